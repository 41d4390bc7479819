package layout

import (
	"context"
	"errors"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/mdev"
)

// dcHost is a datacenter node: two A100s (one an mdev parent), an RTX 3080 with its audio
// function, an L40S with vendor-VFIO VFs, and a pci.ids naming them.
func dcHost(t *testing.T) (*hosttest.Tree, *hosttest.Kernel, *Host) {
	t.Helper()
	tr := hosttest.New(t)
	tr.WriteFile("usr/share/misc/pci.ids", "# pci.ids\n10de  NVIDIA Corporation\n\t20b0  GA100 [A100 SXM4 40GB]\n\t2206  GA102 [GeForce RTX 3080]\n\t26b9  AD102GL [L40S]\n")
	a0 := tr.DatacenterGPU("0000:40:01.0", "0000:41:00.0", "nvidia", 0)
	tr.DatacenterGPU("0000:50:01.0", "0000:51:00.0", "nvidia", 1)
	tr.A100Mdev(a0)
	tr.ConsumerGPU("0000:00:04.0", "0000:01:00.0", "")
	tr.NvidiaSRIOVGPU("0000:60:01.0", "0000:61:00.0", 0, 0, nil)
	k := hosttest.NewKernel(tr)
	return tr, k, hostOn(tr.Root, k)
}

func targetsOf(t *testing.T, h *Host, doc, config string) ([]Target, []string, error) {
	t.Helper()
	f := mustParse(t, doc)
	inv, err := host.Scan(h.Root)
	if err != nil {
		t.Fatal(err)
	}
	name, c, err := f.Select(config)
	if err != nil {
		t.Fatal(err)
	}
	return resolve(h.Root, inv, name, c)
}

// TestSelectorsAndConflicts: model and vendor/device select by pci.ids name and id; a GPU two
// entries select is an error naming both entries; all takes the rest; an entry that selects
// nothing is a warning, not an error.
func TestSelectorsAndConflicts(t *testing.T) {
	_, _, h := dcHost(t)
	ts, unmatched, err := targetsOf(t, h, head+`  a:
    gpus:
      - select: {model: a100}
        mode: passthrough
      - select: {address: "01:00.0"}
        mode: mdev
        types: [{type: x, count: 1}]
      - select: {vendor: "1002", device: "73bf"}
        mode: passthrough
      - select: {all: true}
        mode: host
`, "")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, x := range ts {
		got = append(got, x.Name+"="+string(x.Mode))
	}
	want := []string{"0000:01:00.0=mdev", "0000:41:00.0=passthrough", "0000:51:00.0=passthrough", "0000:61:00.0=host"}
	if !slices.Equal(got, want) {
		t.Fatalf("targets %v, want %v", got, want)
	}
	if len(unmatched) != 1 || !strings.Contains(unmatched[0], "gpus[2]") {
		t.Fatalf("unmatched %v", unmatched)
	}

	_, _, err = targetsOf(t, h, head+`  a:
    gpus:
      - select: {vendor: "10de", device: "20b0"}
        mode: passthrough
      - select: {address: "0000:51:00.0"}
        mode: host
`, "")
	if !errors.Is(err, host.ErrInvalid) || !strings.Contains(err.Error(), "0000:51:00.0 is selected by configs.a.gpus[0] (vendor 10de device 20b0) and by configs.a.gpus[1] (address 0000:51:00.0)") {
		t.Fatalf("conflict: %v", err)
	}
	_, _, err = targetsOf(t, h, head+"  a:\n    gpus:\n      - select: {parent: mbochs}\n        mode: host\n", "")
	if !errors.Is(err, host.ErrNotFound) || !strings.Contains(err.Error(), "gpus[0].select") {
		t.Fatalf("missing parent: %v", err)
	}
	_, _, err = targetsOf(t, h, head+"  a:\n    gpus:\n      - select: {address: \"0000:99:00.0\"}\n        mode: host\n", "")
	if !errors.Is(err, host.ErrNotFound) {
		t.Fatalf("missing address: %v", err)
	}
}

// TestModesOnADatacenterNode plans mdev types by name on an A100 (the one profile matcher),
// vendor-VFIO types on an L40S (VFs first, then the types), and refuses mdev on a GPU that is
// no mdev parent and SR-IOV on one without the capability.
func TestModesOnADatacenterNode(t *testing.T) {
	_, k, h := dcHost(t)
	f := mustParse(t, head+`  vdi:
    gpus:
      - select: {address: "41:00.0"}
        mode: mdev
        types: [{type: A100-4C, count: 3}]
      - select: {address: "61:00.0"}
        mode: vendor-vfio
        vfs: 4
        types: [{type: "NVIDIA L40S-8Q", count: 2}]
  wrong:
    gpus:
      - select: {address: "51:00.0"}
        mode: mdev
        types: [{type: A100-4C, count: 1}]
      - select: {address: "01:00.0"}
        mode: sriov
        vfs: 2
  overvf:
    gpus:
      - select: {address: "61:00.0"}
        mode: vendor-vfio
        types: [{type: L40S-1Q, count: 33}]
`)
	p, err := PlanConfig(context.Background(), h, f, "vdi", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := actions(p); !slices.Equal(got, []string{"set-vfs 0000:61:00.0", "set-vgpu 0000:61:00.0", "create-mdev 0000:41:00.0"}) {
		t.Fatalf("plan %v", got)
	}
	if _, err := ApplyConfig(context.Background(), h, f, "vdi", "f", nil, ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	ins, _ := h.Mdev.Instances()
	n := map[string]int{}
	for _, in := range ins {
		n[in.Backend+" "+in.Type]++
	}
	if n["mdev nvidia-471"] != 3 || n["nvidia-vfio 1160"] != 2 {
		t.Fatalf("instances %v", n)
	}
	if p, err := PlanConfig(context.Background(), h, f, "vdi", nil); err != nil || !p.Empty() {
		t.Fatalf("plan after apply: %v %v", actions(p), err)
	}
	w := len(k.Writes())
	p, err = PlanConfig(context.Background(), h, f, "wrong", nil)
	if err == nil || len(p.Refusals) != 2 || !errors.Is(err, host.ErrUnsupported) ||
		!strings.Contains(err.Error(), "no SR-IOV capability") || !strings.Contains(err.Error(), "offers no mdev types") {
		t.Fatalf("wrong: %v", err)
	}
	if _, err = PlanConfig(context.Background(), h, f, "overvf", nil); !errors.Is(err, host.ErrInvalid) || !strings.Contains(err.Error(), "33 vGPU instances") {
		t.Fatalf("33 instances on 32 VFs: %v", err)
	}
	if len(k.Writes()) != w {
		t.Fatal("a refused plan wrote")
	}
}

// TestMIGWithoutNVML: a configuration with a mig entry is refused with ErrUnsupported (exit 7)
// when there is no NVML backend, naming the GPU; nothing else of the plan runs.
func TestMIGWithoutNVML(t *testing.T) {
	_, k, h := dcHost(t)
	f := mustParse(t, head+`  train:
    gpus:
      - select: {address: "41:00.0"}
        mode: mig
        profiles: [{profile: 1g.10gb, count: 7}]
      - select: {address: "51:00.0"}
        mode: mig
        profiles: [{profile: 3g.40gb, count: 1}, {profile: 4g.40gb, count: 1}]
      - select: {address: "01:00.0"}
        mode: passthrough
`)
	_, err := ApplyConfig(context.Background(), h, f, "", "f", nil, ApplyOptions{})
	if !errors.Is(err, host.ErrUnsupported) || !strings.Contains(err.Error(), "0000:41:00.0, 0000:51:00.0") || !strings.Contains(err.Error(), "NVML is not available") {
		t.Fatalf("mig without NVML: %v", err)
	}
	if len(k.Writes()) != 0 {
		t.Fatalf("wrote %v", k.Writes())
	}
}

// failingWriter fails the first write whose path ends in suffix, as a kernel refusing it.
type failingWriter struct {
	*hosttest.Kernel
	suffix string
	failed bool
}

func (w *failingWriter) Write(ctx context.Context, path, value string) error {
	if !w.failed && strings.HasSuffix(path, w.suffix) {
		w.failed = true
		return syscall.EIO
	}
	return w.Kernel.Write(ctx, path, value)
}

// TestFailureHalfWayUndoes: when the bind (the last change) fails, the VFs and the mdev
// instances this run made are undone, their persistence too, the error says what failed and
// that the rest was undone, and no selection is recorded.
func TestFailureHalfWayUndoes(t *testing.T) {
	l := newLab(t)
	fw := &failingWriter{Kernel: l.k, suffix: "drivers_probe"}
	l.h.Mdev.W = fw
	l.h.Binder.W = fw
	f := mustParse(t, labLayout)
	res, err := ApplyConfig(context.Background(), l.h, f, "mixed", "f", nil, ApplyOptions{})
	if err == nil || !strings.Contains(err.Error(), "bind 0000:01:00.0") || !strings.Contains(err.Error(), "the 2 change(s) before it were undone") {
		t.Fatalf("apply: %v", err)
	}
	if len(res.Done) != 2 || res.Done[0].Result != "undone" {
		t.Fatalf("done %+v", res.Done)
	}
	if pf, _ := l.h.Mdev.ReadPF(l.nvme); pf.NumVFs != 0 {
		t.Fatalf("%d VFs left", pf.NumVFs)
	}
	ins, _ := l.h.Mdev.Instances()
	defs, _ := l.h.Mdev.Definitions()
	pers, _ := l.h.Mdev.PersistedPFs()
	if len(ins) != 0 || len(defs) != 0 || len(pers) != 0 {
		t.Fatalf("left instances %+v, definitions %+v, persisted %+v", ins, defs, pers)
	}
	if l.tr.Driver(l.audio) != "snd_hda_intel" {
		t.Fatalf("audio on %q", l.tr.Driver(l.audio))
	}
	if s, _, _ := LoadSelection(l.h.Root); s != nil {
		t.Fatal("a failed apply was recorded")
	}
}

// TestInUseRefusedNamingTheVM: an mdev the allocation ledger gives to a VM is not removed by a
// layout that drops it: plan refuses (host.ErrRefused) naming the VM, nothing is written;
// --force in-use goes past it.
func TestInUseRefusedNamingTheVM(t *testing.T) {
	l := newLab(t)
	f := mustParse(t, labLayout)
	l.apply(t, f, "mixed")
	ins, _ := l.h.Mdev.Instances()
	l.h.Mdev.Allocated = func(in mdev.Instance) string {
		if in.UUID == ins[0].UUID || in.UUID == ins[1].UUID {
			return "desk1"
		}
		return ""
	}
	w := len(l.k.Writes())
	_, err := ApplyConfig(context.Background(), l.h, f, "clear", "f", nil, ApplyOptions{})
	if !errors.Is(err, host.ErrRefused) || !strings.Contains(err.Error(), `VM "desk1"`) || !strings.Contains(err.Error(), "--force in-use") {
		t.Fatalf("clear with an allocated mdev: %v", err)
	}
	if len(l.k.Writes()) != w {
		t.Fatalf("refused apply wrote %v", writes(l.k, w))
	}
	if _, err := ApplyConfig(context.Background(), l.h, f, "clear", "f", nil, ApplyOptions{Force: []string{"in-use"}}); err != nil {
		t.Fatalf("--force in-use: %v", err)
	}
	if ins, _ := l.h.Mdev.Instances(); len(ins) != 0 {
		t.Fatalf("left %+v", ins)
	}
}

// On the real H200 host's capture, with the pci.ids that host had (no H200 in it): an entry
// selecting `model: H200` selects nothing, and the warning says why and gives the IDs to select
// it by; those IDs select it. On the dcHost tree, whose GPUs all have names, no such hint.
func TestModelSelectorHintOnH200(t *testing.T) {
	t.Parallel()
	root := hosttest.RealGPUSnapshot(t, "nvidia-h200/sysfs-snapshot.tar.gz")
	inv, err := host.Scan(root)
	if err != nil {
		t.Fatal(err)
	}
	targets := func(sel string) ([]Target, []string) {
		t.Helper()
		name, c, err := mustParse(t, head+"  a:\n    gpus:\n      - select: "+sel+"\n        mode: passthrough\n").Select("")
		if err != nil {
			t.Fatal(err)
		}
		ts, unmatched, err := resolve(root, inv, name, c)
		if err != nil {
			t.Fatal(err)
		}
		return ts, unmatched
	}
	ts, unmatched := targets("{model: H200}")
	if len(ts) != 0 || len(unmatched) != 1 || !strings.Contains(unmatched[0], `pci.ids names no device for 0000:00:06.0 (10de:2335), so no model matches it: select by ID (vendor: "10de", device: "2335")`) {
		t.Errorf("model H200: targets %v, unmatched %q", ts, unmatched)
	}
	ts, unmatched = targets(`{vendor: "10de", device: "2335"}`)
	if len(ts) != 1 || ts[0].Name != "0000:00:06.0" || len(unmatched) != 0 {
		t.Errorf("vendor/device: targets %v, unmatched %q", ts, unmatched)
	}

	_, _, h := dcHost(t)
	_, unmatched, err = targetsOf(t, h, head+"  a:\n    gpus:\n      - select: {model: H200}\n        mode: passthrough\n", "")
	if err != nil || len(unmatched) != 1 || strings.Contains(unmatched[0], "pci.ids") {
		t.Errorf("model H200 on dcHost: %q, %v", unmatched, err)
	}
}
