package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/domains"
	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/ledger"
	"github.com/vgpu-host/vgpu-host/step"
	"github.com/vgpu-host/vgpu-host/vfio"
	"github.com/vgpu-host/vgpu-host/virt"
)

// TestApplyPreparesFakeHost runs apply and destroy with the real host preparation (vfio
// binder over hosttest's kernel emulator, host.Scan of the fake tree) and a fake libvirt: the
// GPU's whole group moves to vfio-pci, and destroy gives it back to its original drivers.
func TestApplyPreparesFakeHost(t *testing.T) {
	t.Parallel()
	tree := hosttest.New(t)
	gpu, audio := tree.ConsumerGPU("0000:00:01.0", "0000:01:00.0", "nvidia")
	k := hosttest.NewKernel(tree)
	conn := virt.NewFake("kvm", "qemu")
	lc := New(Options{Root: tree.Root, Conn: conn, Host: NewSysfsPrep(tree.Root, k, k), Ledger: ledger.Open(tree.Root)})
	ctx := context.Background()
	vm := spec(t, "vgpuhost-test-prep", anyNvidia)

	res, err := lc.Apply(ctx, vm)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Claims) != 2 || len(res.Fallback) != 0 {
		t.Fatalf("apply: %+v", res)
	}
	for _, a := range []host.Address{gpu, audio} {
		if d, _ := host.LinkBase(tree.Root.PCIDevice(a, "driver")); d != "vfio-pci" {
			t.Fatalf("%s on %q after apply, want vfio-pci", a, d)
		}
	}
	if k.UsedNewID() {
		t.Fatal("binding used new_id")
	}
	if _, err := lc.Destroy(ctx, vm.Metadata.Name); err != nil {
		t.Fatal(err)
	}
	if d, _ := host.LinkBase(tree.Root.PCIDevice(gpu, "driver")); d != "nvidia" {
		t.Fatalf("GPU on %q after destroy, want nvidia", d)
	}
	if d, _ := host.LinkBase(tree.Root.PCIDevice(audio, "driver")); d != "snd_hda_intel" {
		t.Fatalf("audio on %q after destroy, want snd_hda_intel", d)
	}
	if len(conn.Domains()) != 0 {
		t.Fatalf("domains left: %v", conn.Domains())
	}
}

// vendorEnv is a fake tree with one L40S (0000:41:00.0) and 4 vendor-VFIO VFs
// (0000:41:00.4-7), written through hosttest's kernel, with a fake libvirt.
type vendorEnv struct {
	tree *hosttest.Tree
	k    *hosttest.Kernel
	conn *virt.Fake
	led  *ledger.Ledger
	pf   host.Address
}

func newVendorEnv(t *testing.T) *vendorEnv {
	tree := hosttest.New(t)
	pf := tree.NvidiaSRIOVGPU("0000:40:01.0", "0000:41:00.0", 0, 4, nil)
	return &vendorEnv{tree: tree, k: hosttest.NewKernel(tree), conn: virt.NewFake("kvm", "qemu"), led: ledger.Open(tree.Root), pf: pf}
}

func (e *vendorEnv) lc(mod ...func(*Options)) *Lifecycle {
	// LateDefineGrace as env.lc's: a crash before the define leaves a started define step,
	// which teardown watches the fake for (TestLateDefineAfterCrash tests that watch).
	o := Options{Root: e.tree.Root, Conn: e.conn, Host: NewSysfsPrep(e.tree.Root, e.k, e.k), Ledger: e.led, LateDefineGrace: 300 * time.Millisecond}
	for _, m := range mod {
		m(&o)
	}
	return New(o)
}

// current reads a VF's nvidia/current_vgpu_type.
func (e *vendorEnv) current(t *testing.T, vf string) int {
	t.Helper()
	n, err := host.ReadInt(e.tree.Root.PCIDevice(host.MustParseAddress(vf), "nvidia", "current_vgpu_type"))
	if err != nil {
		t.Fatal(err)
	}
	return int(n)
}

// assertClean checks that no VF holds a type, no ledger entry and no domain is left.
func (e *vendorEnv) assertClean(t *testing.T) {
	t.Helper()
	for i := 0; i < 4; i++ {
		if vf := e.tree.VFAddress(e.pf, i).String(); e.current(t, vf) != 0 {
			t.Errorf("VF %s still holds type %d", vf, e.current(t, vf))
		}
	}
	b, err := e.led.Read()
	if err != nil {
		t.Fatal(err)
	}
	if b.Len() != 0 {
		t.Errorf("ledger still has %v", b.Names())
	}
	if d := e.conn.Domains(); len(d) != 0 {
		t.Errorf("domains left: %v", d)
	}
}

const vendorL40S8Q = "    - vgpu:\n        profile: \"L40S-8Q\"\n        mode: vendor-vfio\n"

// TestApplyVendorVGPUFakeHost applies a vendor-VFIO vGPU spec on a fake tree through the mdev
// manager's vendor backend: the VF the allocation picked gets the type, the domain gets that VF
// as a managed='no' hostdev, re-apply changes nothing, and destroy clears exactly that VF.
func TestApplyVendorVGPUFakeHost(t *testing.T) {
	t.Parallel()
	e := newVendorEnv(t)
	ctx := context.Background()
	vm := spec(t, "vgpuhost-test-vv", vendorL40S8Q)

	plans, err := e.lc().Plan(ctx, []*domains.VM{vm})
	if err != nil {
		t.Fatal(err)
	}
	const want = "assign vGPU type 1160 (NVIDIA L40S-8Q) to VF 0000:41:00.4"
	if s := plans[0].Steps[0]; s.Action() != step.ActAssignVGPU || s.Text() != want {
		t.Fatalf("first planned step %+v, want %q", s, want)
	}
	if e.current(t, "0000:41:00.4") != 0 {
		t.Fatal("plan wrote current_vgpu_type")
	}

	res, err := e.lc().Apply(ctx, vm)
	if err != nil {
		t.Fatal(err)
	}
	picked := plans[0].Alloc.GPUs[0].Slots[0].Functions[0].String()
	if e.current(t, picked) != 1160 {
		t.Fatalf("VF %s (the allocation's) has type %d, want 1160", picked, e.current(t, picked))
	}
	for i := 1; i < 4; i++ {
		if vf := e.tree.VFAddress(e.pf, i).String(); e.current(t, vf) != 0 {
			t.Fatalf("VF %s got a type too", vf)
		}
	}
	if len(res.Claims) != 1 || res.Claims[0].Kind != ledger.KindVendorVGPU || res.Claims[0].ID != picked {
		t.Fatalf("claims %+v, want one vendor-vgpu claim on %s", res.Claims, picked)
	}
	b, _ := e.led.Read()
	j := b.VM(vm.Metadata.Name).Journal
	if len(j) == 0 || j[0].Action != string(step.ActAssignVGPU) || j[0].Target != picked || j[0].Params["type"] != "1160" || j[0].Status != ledger.StepDone {
		t.Fatalf("journal does not start with the assign step: %+v", j)
	}
	x, _ := e.conn.DomainXML(ctx, vm.Metadata.Name)
	if !strings.Contains(x, `managed="no"`) || !strings.Contains(x, `bus="0x41" slot="0x00" function="0x4"`) {
		t.Fatalf("domain XML lacks a managed='no' hostdev at %s:\n%s", picked, x)
	}

	// Planned again, the VM's own VF holds the type: no step, and no "left set" note.
	plans, err = e.lc().Plan(ctx, []*domains.VM{vm})
	if err != nil {
		t.Fatal(err)
	}
	if s := plans[0].Steps[0]; s.Action() == step.ActAssignVGPU || slices.ContainsFunc(plans[0].Alloc.Notes, func(n string) bool { return strings.Contains(n, "left set") }) {
		t.Fatalf("re-plan of an applied VM: %+v notes %v", s, plans[0].Alloc.Notes)
	}
	writes := len(e.k.Writes())
	res, err = e.lc().Apply(ctx, vm)
	if err != nil || res.Changed {
		t.Fatalf("re-apply: %+v %v", res, err)
	}
	if w := e.k.Writes()[writes:]; len(w) != 0 {
		t.Fatalf("re-apply wrote %v", w)
	}

	if _, err := e.lc().Destroy(ctx, vm.Metadata.Name); err != nil {
		t.Fatal(err)
	}
	e.assertClean(t)
	last := e.k.Writes()[len(e.k.Writes())-1]
	if !strings.HasSuffix(last.Path, picked+"/nvidia/current_vgpu_type") || strings.TrimSpace(last.Value) != "0" {
		t.Fatalf("last write %+v, want 0 to %s's current_vgpu_type", last, picked)
	}
}

// TestVendorVGPUOneTypePerGPU: while one VM runs L40S-8Q, a VM asking for L40S-1Q on the same
// GPU is refused as busy, naming what runs; with fallback: virtio-gpu it gets virtio-gpu and
// says so. Neither touches the first VM's VF.
func TestVendorVGPUOneTypePerGPU(t *testing.T) {
	t.Parallel()
	e := newVendorEnv(t)
	ctx := context.Background()
	if _, err := e.lc().Apply(ctx, spec(t, "vgpuhost-test-v1", vendorL40S8Q)); err != nil {
		t.Fatal(err)
	}
	other := "    - vgpu:\n        profile: \"NVIDIA L40S-1Q\"\n        mode: vendor-vfio\n"
	_, err := e.lc().Apply(ctx, spec(t, "vgpuhost-test-v2", other))
	t.Log(err)
	if !errors.Is(err, host.ErrBusy) || !strings.Contains(err.Error(), "1160 (NVIDIA L40S-8Q)") {
		t.Fatalf("second type on the GPU: %v, want ErrBusy naming the running type", err)
	}
	// Pinning a VF of the busy GPU is refused the same way.
	_, err = e.lc().Apply(ctx, spec(t, "vgpuhost-test-v2", other+"        vfs: [\"0000:41:00.5\"]\n"))
	if !errors.Is(err, host.ErrBusy) {
		t.Fatalf("pinned VF on a GPU running another type: %v, want ErrBusy", err)
	}
	// The VF the first VM holds cannot be pinned by another VM either.
	_, err = e.lc().Apply(ctx, spec(t, "vgpuhost-test-v2", vendorL40S8Q+"        vfs: [\"0000:41:00.4\"]\n"))
	if !errors.Is(err, host.ErrBusy) {
		t.Fatalf("pinned VF held by another VM: %v, want ErrBusy", err)
	}
	res, err := e.lc().Apply(ctx, spec(t, "vgpuhost-test-v3", other+"      fallback: virtio-gpu\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Fallback) != 1 || !strings.Contains(res.Fallback[0], "virtio-gpu") || len(res.Claims) != 0 {
		t.Fatalf("fallback not reported: %+v", res)
	}
	if e.current(t, "0000:41:00.4") != 1160 || e.current(t, "0000:41:00.5") != 0 {
		t.Fatal("the refused VMs changed a VF")
	}
	// A second VM of the same type gets the next VF.
	res, err = e.lc().Apply(ctx, spec(t, "vgpuhost-test-v4", vendorL40S8Q))
	if err != nil || len(res.Claims) != 1 || res.Claims[0].ID != "0000:41:00.5" || e.current(t, "0000:41:00.5") != 1160 {
		t.Fatalf("second 8Q VM: %+v %v", res, err)
	}
	for _, n := range []string{"vgpuhost-test-v1", "vgpuhost-test-v3", "vgpuhost-test-v4"} {
		if _, err := e.lc().Destroy(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	e.assertClean(t)
}

// TestVendorVGPUTypeNotOurs: a type an operator set on a VF is never cleared by destroy.
func TestVendorVGPUTypeNotOurs(t *testing.T) {
	t.Parallel()
	e := newVendorEnv(t)
	ctx := context.Background()
	if err := e.k.Write(ctx, e.tree.Root.PCIDevice(host.MustParseAddress("0000:41:00.4"), "nvidia", "current_vgpu_type"), "1160"); err != nil {
		t.Fatal(err)
	}
	vm := spec(t, "vgpuhost-test-vo", vendorL40S8Q)
	plans, err := e.lc().Plan(ctx, []*domains.VM{vm})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range plans[0].Steps {
		if s.Action() == step.ActAssignVGPU {
			t.Fatalf("plan assigns a type to a VF that holds it: %+v", s)
		}
	}
	if !slices.ContainsFunc(plans[0].Alloc.Notes, func(n string) bool { return strings.Contains(n, "left set at destroy") }) {
		t.Fatalf("plan does not say the operator's type stays: %v", plans[0].Alloc.Notes)
	}
	if _, err := e.lc().Apply(ctx, vm); err != nil {
		t.Fatal(err)
	}
	if _, err := e.lc().Destroy(ctx, vm.Metadata.Name); err != nil {
		t.Fatal(err)
	}
	if e.current(t, "0000:41:00.4") != 1160 {
		t.Fatal("destroy cleared a type vgpu-host did not set")
	}
}

// TestVendorVGPUCrashAtEveryStep stops apply dead at every step (before and after taking it)
// on the fake tree, then checks that apply or destroy converges: no VF holds a type, no ledger
// entry, no domain.
func TestVendorVGPUCrashAtEveryStep(t *testing.T) {
	t.Parallel()
	const steps = 6 // assign-vgpu, pool, overlay, seed, define, start
	for _, before := range []bool{false, true} {
		for n := 1; n <= steps; n++ {
			for _, then := range []string{"apply", "destroy"} {
				t.Run(fmt.Sprintf("step%d-before=%v-then-%s", n, before, then), func(t *testing.T) {
					e := newVendorEnv(t)
					ctx := context.Background()
					vm := spec(t, "vgpuhost-test-vc", vendorL40S8Q)
					done := make(chan struct{})
					go func() {
						defer close(done)
						_, _ = e.lc(func(o *Options) { o.CrashAt, o.CrashBefore, o.Crash = n, before, runtime.Goexit }).Apply(ctx, vm)
						t.Errorf("apply did not crash at step %d", n)
					}()
					<-done
					if n == 1 {
						// The step is in the journal before the write: stopped before it, the
						// journal names the VF and type and the VF holds nothing yet.
						b, _ := e.led.Read()
						j := b.VM(vm.Metadata.Name).Journal
						if len(j) != 1 || j[0].Action != string(step.ActAssignVGPU) || j[0].Status != ledger.StepStarted || j[0].Params["type"] != "1160" {
							t.Fatalf("journal after a crash at step 1: %+v", j)
						}
						if got, want := e.current(t, "0000:41:00.4"), map[bool]int{true: 0, false: 1160}[before]; got != want {
							t.Fatalf("VF holds type %d after a crash at step 1 (before=%v), want %d", got, before, want)
						}
					}
					if then == "apply" {
						res, err := e.lc().Apply(ctx, vm)
						if err != nil {
							t.Fatal(err)
						}
						if len(res.Converged) == 0 || res.State != virt.StateRunning || e.current(t, "0000:41:00.4") != 1160 {
							t.Fatalf("re-apply did not converge: %+v", res)
						}
					}
					if _, err := e.lc().Destroy(ctx, vm.Metadata.Name); err != nil {
						t.Fatal(err)
					}
					e.assertClean(t)
				})
			}
		}
	}
}

// TestRefusalsPlannedAndNamedForce: plan shows every safety refusal before anything changes
// (here the boot VGA, and the HDMI audio function's ALSA node held by a process); apply refuses
// on the same grounds and writes nothing; each --force=NAME overrides its own refusal only.
func TestRefusalsPlannedAndNamedForce(t *testing.T) {
	t.Parallel()
	tree := hosttest.New(t)
	gpu, audio := tree.ConsumerGPU("0000:00:01.0", "0000:01:00.0", "nvidia")
	tree.WriteFile("sys/bus/pci/devices/0000:01:00.0/boot_vga", "1\n")
	tree.HoldOpen(4711, "pulseaudio", "/dev/snd/controlC0")
	k := hosttest.NewKernel(tree)
	conn := virt.NewFake("kvm", "qemu")
	ctx := context.Background()
	vm := spec(t, "vgpuhost-test-refuse", anyNvidia)
	lc := func(force ...string) *Lifecycle {
		return New(Options{Root: tree.Root, Conn: conn, Host: NewSysfsPrep(tree.Root, k, k), Ledger: ledger.Open(tree.Root), Force: force})
	}

	plans, err := lc().Plan(ctx, []*domains.VM{vm})
	if err != nil {
		t.Fatal(err)
	}
	checks := map[string]bool{}
	for _, r := range plans[0].Refusals {
		checks[r.Check] = true
		if r.Check == vfio.CheckHeld && (len(r.Holders) != 1 || r.Holders[0].PID != 4711 || *r.Address != audio) {
			t.Errorf("held refusal %+v, want pid 4711 on %s", r, audio)
		}
		if r.Check == vfio.CheckBootVGA && *r.Address != gpu {
			t.Errorf("boot-vga refusal on %s", r.Address)
		}
	}
	if !checks[vfio.CheckBootVGA] || !checks[vfio.CheckHeld] || len(plans[0].Forced) != 0 {
		t.Fatalf("plan refusals %+v forced %v, want boot-vga and held", plans[0].Refusals, plans[0].Forced)
	}
	if err := plans[0].Refused(); !errors.Is(err, host.ErrRefused) {
		t.Fatalf("plan's verdict %v, want refused", err)
	}

	_, err = lc().Apply(ctx, vm)
	if !errors.Is(err, host.ErrRefused) || !strings.Contains(err.Error(), "--force=boot-vga,held") {
		t.Fatalf("apply: %v, want refused naming --force=boot-vga,held", err)
	}
	_, err = lc(vfio.CheckBootVGA).Apply(ctx, vm)
	if !errors.Is(err, host.ErrBusy) || errors.Is(err, host.ErrRefused) || !strings.Contains(err.Error(), "pid 4711 (pulseaudio)") {
		t.Fatalf("apply --force=boot-vga: %v, want busy naming pid 4711", err)
	}
	if w := k.Writes(); len(w) != 0 || len(conn.Domains()) != 0 {
		t.Fatalf("refused applies changed the host: writes %v, domains %v", w, conn.Domains())
	}
	if b, _ := ledger.Open(tree.Root).Read(); b.Len() != 0 {
		t.Fatalf("refused applies claimed: %v", b.Names())
	}

	res, err := lc(vfio.CheckBootVGA, vfio.CheckHeld).Apply(ctx, vm)
	if err != nil || !res.Changed {
		t.Fatalf("apply --force=boot-vga,held: %+v %v", res, err)
	}
	if d, _ := host.LinkBase(tree.Root.PCIDevice(gpu, "driver")); d != "vfio-pci" {
		t.Fatalf("GPU on %q after the forced apply", d)
	}
	if _, err := lc().Destroy(ctx, vm.Metadata.Name); err != nil {
		t.Fatal(err)
	}
	if d, _ := host.LinkBase(tree.Root.PCIDevice(audio, "driver")); d != "snd_hda_intel" {
		t.Fatalf("audio on %q after destroy", d)
	}
}
