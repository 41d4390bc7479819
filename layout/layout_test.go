package layout

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/mdev"
	"github.com/vgpu-host/vgpu-host/vfio"
)

// lab is a fake host shaped like the real-kernel lab (test/e2e/lab.env): a multifunction GPU
// (VGA + HDMI audio, one IOMMU group), a second GPU, an NVMe SR-IOV PF with 3 VFs, mbochs.
type lab struct {
	tr          *hosttest.Tree
	k           *hosttest.Kernel
	h           *Host
	gpu1, audio host.Address
	gpu2, nvme  host.Address
}

func newLab(t *testing.T) *lab {
	t.Helper()
	tr := hosttest.New(t)
	gpu1, audio := tr.ConsumerGPU("0000:00:04.0", "0000:01:00.0", "")
	gpu2, _ := tr.ConsumerGPU("0000:00:05.0", "0000:02:00.0", "")
	nvme := tr.SRIOVPF(hosttest.PCI{Addr: "0000:00:0a.0", Vendor: 0x1b36, Device: 0x0010, Class: 0x010802, Driver: "nvme"},
		hosttest.VFSpec{Total: 3, VFDevice: 0x0010, VFDriver: "nvme"}, 0)
	tr.Mbochs()
	k := hosttest.NewKernel(tr)
	return &lab{tr: tr, k: k, gpu1: gpu1, audio: audio, gpu2: gpu2, nvme: nvme, h: hostOn(tr.Root, k)}
}

func hostOn(root host.Root, k *hosttest.Kernel) *Host {
	m := mdev.New(root, k)
	m.Timeout = 2 * time.Second
	return &Host{Root: root, Mdev: m, Binder: &vfio.Binder{Root: root, W: k, Modules: k, Timeout: 2 * time.Second}}
}

const labLayout = `apiVersion: vgpu-host/v1
kind: HostLayout
configs:
  mixed:
    default: true
    gpus:
      - select: {address: "0000:00:0a.0"}
        mode: sriov
        vfs: 3
      - select: {parent: mbochs}
        mode: mdev
        types:
          - {type: mbochs-medium, count: 2}
      - select: {address: "0000:01:00.0"}
        mode: passthrough
  smaller:
    gpus:
      - select: {address: "0000:00:0a.0"}
        mode: sriov
        vfs: 1
      - select: {parent: mbochs}
        mode: mdev
        types:
          - {type: medium, count: 1}
          - {type: small, count: 1}
      - select: {address: "0000:01:00.0"}
        mode: passthrough
  clear:
    gpus:
      - select: {address: "0000:00:0a.0"}
        mode: host
      - select: {all: true}
        mode: host
  greedy:
    gpus:
      - select: {parent: mbochs}
        mode: mdev
        types:
          - {type: mbochs-large, count: 3}
      - select: {address: "0000:00:0a.0"}
        mode: sriov
        vfs: 4
`

func mustParse(t *testing.T, s string) *File {
	t.Helper()
	f, err := Parse([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func (l *lab) apply(t *testing.T, f *File, name string) *HostApplyResult {
	t.Helper()
	res, err := ApplyConfig(context.Background(), l.h, f, name, "test.yaml", []byte(labLayout), ApplyOptions{})
	if err != nil {
		t.Fatalf("apply %s: %v", name, err)
	}
	return res
}

func (l *lab) plan(t *testing.T, f *File, name string) *HostPlan {
	t.Helper()
	p, err := PlanConfig(context.Background(), l.h, f, name, nil)
	if err != nil {
		t.Fatalf("plan %s: %v", name, err)
	}
	return p
}

func actions(p *HostPlan) []string {
	var out []string
	for _, c := range p.Changes {
		out = append(out, c.Action+" "+c.Target)
	}
	return out
}

func writes(k *hosttest.Kernel, from int) []string {
	var out []string
	for _, w := range k.Writes()[from:] {
		out = append(out, w.Path+"="+w.Value)
	}
	return out
}

// TestPlanOrderApplyThenNothing: from the boot state the mixed configuration plans VFs, then
// mdevs, then the binding (host restore's order), writes nothing while planning; apply makes
// exactly that; a second plan is empty and a second apply writes nothing.
func TestPlanOrderApplyThenNothing(t *testing.T) {
	l := newLab(t)
	f := mustParse(t, labLayout)
	p := l.plan(t, f, "")
	want := []string{"set-vfs 0000:00:0a.0", "create-mdev mbochs", "bind 0000:01:00.0"}
	if got := actions(p); !slices.Equal(got, want) {
		t.Fatalf("plan = %v, want %v", got, want)
	}
	if n := len(l.k.Writes()); n != 0 {
		t.Fatalf("plan wrote %d times: %v", n, writes(l.k, 0))
	}
	l.apply(t, f, "")
	if l.tr.Driver(l.gpu1) != "vfio-pci" || l.tr.Driver(l.audio) != "vfio-pci" {
		t.Fatal("the multifunction GPU's group is not on vfio-pci")
	}
	pf, _ := l.h.Mdev.ReadPF(l.nvme)
	if pf.NumVFs != 3 {
		t.Fatalf("%d VFs", pf.NumVFs)
	}
	ins, _ := l.h.Mdev.Instances()
	if len(ins) != 2 || ins[0].Type != "mbochs-medium" || !ins[0].Defined || ins[0].Start != "auto" {
		t.Fatalf("instances %+v", ins)
	}
	if p := l.plan(t, f, ""); !p.Empty() {
		t.Fatalf("plan after apply: %v", actions(p))
	}
	n := len(l.k.Writes())
	res := l.apply(t, f, "mixed")
	if len(res.Done) != 0 || len(l.k.Writes()) != n {
		t.Fatalf("re-apply did %v, wrote %v", res.Done, writes(l.k, n))
	}
	s, sf, err := LoadSelection(l.h.Root)
	if err != nil || s == nil || s.Config != "mixed" || sf == nil {
		t.Fatalf("selection %+v %v", s, err)
	}
	// Persisted for host restore: the VF count, the mdev definitions, the vfio-pci override.
	pers, _ := l.h.Mdev.PersistedPFs()
	if len(pers) != 1 || pers[0].NumVFs != 3 {
		t.Fatalf("persisted VFs %+v", pers)
	}
	defs, _ := l.h.Mdev.Definitions()
	if len(defs) != 2 {
		t.Fatalf("definitions %+v", defs)
	}
	if _, err := os.Stat(vfio.DriverctlPath(l.h.Root, l.gpu1)); err != nil {
		t.Fatalf("binding not persisted: %v", err)
	}
}

// TestConfigSwitchChangesOnlyWhatDiffers: switching mixed → smaller writes sriov_numvfs (to 0,
// then 1), removes one medium and creates one small instance, and makes no bind write.
func TestConfigSwitchChangesOnlyWhatDiffers(t *testing.T) {
	l := newLab(t)
	f := mustParse(t, labLayout)
	l.apply(t, f, "mixed")
	before, _ := l.h.Mdev.Instances()
	n := len(l.k.Writes())
	p := l.plan(t, f, "smaller")
	want := []string{"remove-mdev mbochs", "set-vfs 0000:00:0a.0", "create-mdev mbochs"}
	if got := actions(p); !slices.Equal(got, want) {
		t.Fatalf("plan = %v, want %v", got, want)
	}
	l.apply(t, f, "smaller")
	got := writes(l.k, n)
	var kinds []string
	for _, w := range got {
		kinds = append(kinds, filepath.Base(strings.SplitN(w, "=", 2)[0]))
	}
	if !slices.Equal(kinds, []string{"remove", "sriov_numvfs", "sriov_numvfs", "create"}) {
		t.Fatalf("writes of the switch: %v", got)
	}
	if !strings.Contains(got[len(got)-1], "mbochs-small/create") || !strings.HasSuffix(got[2], "=1") {
		t.Fatalf("writes of the switch: %v", got)
	}
	after, _ := l.h.Mdev.Instances()
	kept := 0
	for _, a := range after {
		for _, b := range before {
			if a.UUID == b.UUID {
				kept++
			}
		}
	}
	if len(after) != 2 || kept != 1 {
		t.Fatalf("after the switch %+v (kept %d of %+v)", after, kept, before)
	}
	if p := l.plan(t, f, "smaller"); !p.Empty() {
		t.Fatalf("plan after the switch: %v", actions(p))
	}
	// Back to the boot state: everything undone and unpersisted.
	l.apply(t, f, "clear")
	if l.tr.Driver(l.audio) != "snd_hda_intel" || l.tr.Driver(l.gpu1) != "" {
		t.Fatalf("clear left %s on %q, %s on %q", l.audio, l.tr.Driver(l.audio), l.gpu1, l.tr.Driver(l.gpu1))
	}
	if ins, _ := l.h.Mdev.Instances(); len(ins) != 0 {
		t.Fatalf("clear left %+v", ins)
	}
	if pers, _ := l.h.Mdev.PersistedPFs(); len(pers) != 0 {
		t.Fatalf("clear left persisted VFs %+v", pers)
	}
	if _, err := os.Stat(vfio.DriverctlPath(l.h.Root, l.gpu1)); err == nil {
		t.Fatal("clear left the driverctl override")
	}
}

// TestOverAskRefusedBeforeAnyWrite: 3× mbochs-large (2 available) and 4 VFs (3 total) are
// refused by plan and apply, with both reasons, and nothing is written.
func TestOverAskRefusedBeforeAnyWrite(t *testing.T) {
	l := newLab(t)
	f := mustParse(t, labLayout)
	p, err := PlanConfig(context.Background(), l.h, f, "greedy", nil)
	if err == nil || p == nil || len(p.Refusals) != 2 {
		t.Fatalf("plan greedy: %v %+v", err, p)
	}
	if !strings.Contains(err.Error(), "available_instances=2") || !strings.Contains(err.Error(), "sriov_totalvfs=3") {
		t.Fatalf("reasons: %v", err)
	}
	// The first refusal (by target) decides the class: more VFs than the PF has is bad input.
	if !errors.Is(err, host.ErrInvalid) || p.Refusals[1].Target != "mbochs" || !errors.Is(p.Refusals[1].err, host.ErrBusy) {
		t.Fatalf("over-ask classes: %v", err)
	}
	if _, err := ApplyConfig(context.Background(), l.h, f, "greedy", "x", nil, ApplyOptions{}); err == nil {
		t.Fatal("apply greedy succeeded")
	}
	if w := l.k.Writes(); len(w) != 0 {
		t.Fatalf("refused layout wrote %v", w)
	}
	if s, _, _ := LoadSelection(l.h.Root); s != nil {
		t.Fatal("refused layout was recorded")
	}
}

// TestShowRoundTrip: show after apply is a valid layout; applying it changes nothing; after
// clearing the host, applying it brings the same state back (show prints the same file).
func TestShowRoundTrip(t *testing.T) {
	l := newLab(t)
	f := mustParse(t, labLayout)
	l.apply(t, f, "mixed")
	shown, err := Show(context.Background(), l.h)
	if err != nil {
		t.Fatal(err)
	}
	y1, err := shown.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	again := mustParse(t, string(y1))
	for _, want := range []string{"mode: sriov", "vfs: 3", "parent: mbochs", "type: mbochs-medium", "count: 2", "mode: passthrough", "all: true"} {
		if !strings.Contains(string(y1), want) {
			t.Fatalf("show lacks %q:\n%s", want, y1)
		}
	}
	if p := l.plan(t, again, ""); !p.Empty() {
		t.Fatalf("applying show's output would change %v\n%s", actions(p), y1)
	}
	l.apply(t, f, "clear")
	if p := l.plan(t, again, ""); p.Empty() {
		t.Fatal("show's output plans nothing on the cleared host")
	}
	l.apply(t, again, "")
	shown2, err := Show(context.Background(), l.h)
	if err != nil {
		t.Fatal(err)
	}
	y2, _ := shown2.Marshal()
	if string(y1) != string(y2) {
		t.Fatalf("round trip differs:\n%s\n---\n%s", y1, y2)
	}
}

// TestShowOnGeneratedHost: on a host generated as gen-fakehost does (consumer GPUs, two L40S
// with 4 vendor-vGPU VFs each, a NIC with VFs), show lists the GPUs' VFs and not the NIC's;
// applying what it printed makes
// no sysfs write (it only persists the VF counts no one had persisted), and then plans nothing.
func TestShowOnGeneratedHost(t *testing.T) {
	tr := hosttest.New(t)
	spec := hosttest.HostSpec{Switches: 3, NICs: 1, VFsPerNIC: 4, VFsPerGPU: 4, MiscDevices: 4}
	tr.GenerateHost(spec)
	k := hosttest.NewKernel(tr)
	h := hostOn(tr.Root, k)
	shown, err := Show(context.Background(), h)
	if err != nil {
		t.Fatal(err)
	}
	c := shown.Configs[CurrentName]
	var modes []string
	for _, e := range c.GPUs {
		modes = append(modes, string(e.Mode))
		if e.Mode == ModeSRIOV && e.VFs != spec.VFsPerGPU {
			t.Errorf("%s: %d VFs (a NIC's?)", e.Select, e.VFs)
		}
	}
	if !slices.Equal(modes, []string{"sriov", "sriov", "host"}) {
		t.Fatalf("show modes %v", modes)
	}
	y, _ := shown.Marshal()
	f := mustParse(t, string(y))
	p, err := PlanConfig(context.Background(), h, f, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range p.Changes {
		if ch.Action != ActPersistVFs {
			t.Fatalf("show's output plans %v", actions(p))
		}
	}
	if _, err := Apply(context.Background(), h, p, ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	if w := k.Writes(); len(w) != 0 {
		t.Fatalf("applying show's output wrote %v", w)
	}
	if p, err := PlanConfig(context.Background(), h, f, "", nil); err != nil || !p.Empty() {
		t.Fatalf("then: %v %v", actions(p), err)
	}
}
