package vfio

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
)

var ctx = context.Background()

// consumer builds a host with a driverless GPU and its snd_hda_intel audio function in one
// group behind a root port, like the lab's 01:00.0 + 01:00.1.
func consumer(t *testing.T, gpuDriver string) (*hosttest.Tree, *hosttest.Kernel, *Binder, host.Address, host.Address) {
	t.Helper()
	tr := hosttest.New(t)
	gpu, audio := tr.ConsumerGPU("0000:00:04.0", "0000:01:00.0", gpuDriver)
	k := hosttest.NewKernel(tr)
	return tr, k, &Binder{Root: tr.Root, W: k, Modules: k, Timeout: 2 * time.Second}, gpu, audio
}

func override(tr *hosttest.Tree, a host.Address) string {
	return strings.TrimSpace(tr.ReadFile(filepath.Join("sys/bus/pci/devices", a.String(), "driver_override")))
}

func noNewID(t *testing.T, k *hosttest.Kernel) {
	t.Helper()
	if k.UsedNewID() {
		t.Fatal("a write went to new_id: it captures every card with the same ID")
	}
}

func TestBindGroupAsWholeAndRestore(t *testing.T) {
	t.Parallel()
	tr, _, b, gpu, audio := consumer(t, "")
	vk := hosttest.NewVFIOKernel(tr)
	k := vk.Kernel
	b.W, b.Modules = vk, vk
	g := tr.Group(gpu)

	res, err := b.Bind(ctx, []host.Address{gpu}, BindOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []host.Address{gpu, audio} {
		if d := tr.Driver(a); d != "vfio-pci" {
			t.Errorf("%s on %q after bind, want vfio-pci", a, d)
		}
		if o := override(tr, a); o != "vfio-pci" {
			t.Errorf("%s driver_override %q", a, o)
		}
	}
	if tr.Driver(host.MustParseAddress("0000:00:04.0")) != "pcieport" {
		t.Error("the root port left pcieport")
	}
	if !host.Exists(tr.Root.Dev("vfio", strconv.Itoa(g))) {
		t.Error("/dev/vfio/N missing after bind")
	}
	if !res.Changed || len(res.Groups) != 1 || !res.Groups[0].Viable || res.Groups[0].VFIODev != fmt.Sprintf("/dev/vfio/%d", g) {
		t.Errorf("result = %+v", res)
	}
	want := map[string][2]string{gpu.String(): {"", "vfio-pci"}, audio.String(): {"snd_hda_intel", "vfio-pci"}}
	for _, c := range res.Devices {
		if w, ok := want[c.Address.String()]; ok && (c.From != w[0] || c.To != w[1] || !c.Changed) {
			t.Errorf("change %+v, want %v", c, w)
		}
	}
	l, err := LoadLedger(tr.Root)
	if err != nil {
		t.Fatal(err)
	}
	if e, ok := l.Lookup(audio); !ok || e.Driver != "snd_hda_intel" || e.Group != g {
		t.Errorf("ledger entry of audio = %+v %v", e, ok)
	}
	if e, ok := l.Lookup(gpu); !ok || e.Driver != "" {
		t.Errorf("ledger entry of gpu = %+v %v", e, ok)
	}

	// Unbind by the audio address restores the whole group.
	ures, err := b.Unbind(ctx, []host.Address{audio}, UnbindOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d := tr.Driver(audio); d != "snd_hda_intel" {
		t.Errorf("audio on %q after unbind, want snd_hda_intel", d)
	}
	if d := tr.Driver(gpu); d != "" {
		t.Errorf("gpu on %q after unbind, want no driver (it had none)", d)
	}
	for _, a := range []host.Address{gpu, audio} {
		if o := override(tr, a); o != "(null)" {
			t.Errorf("%s driver_override %q after unbind, want (null)", a, o)
		}
	}
	if !ures.Changed {
		t.Error("unbind reported no change")
	}
	if host.Exists(tr.Root.Dev("vfio", strconv.Itoa(g))) || ures.Groups[0].VFIODev != "" {
		t.Errorf("/dev/vfio/%d still reported after the group left vfio-pci: %+v", g, ures.Groups)
	}
	if l, _ := LoadLedger(tr.Root); len(l.Devices) != 0 {
		t.Errorf("ledger not empty after unbind: %v", l.Devices)
	}
	// The GPU was never probed back (a driverless device must not pick up a driver).
	probes := 0
	for _, w := range k.Writes() {
		if strings.HasSuffix(w.Path, "drivers_probe") && w.Value == gpu.String() {
			probes++
		}
	}
	if probes != 1 {
		t.Errorf("gpu probed %d times, want 1 (bind only; unbind leaves it driverless)", probes)
	}
	noNewID(t, k)

	// Unbinding again is a harmless no-op.
	n := len(k.Writes())
	if _, err := b.Unbind(ctx, []host.Address{audio}, UnbindOptions{}); err != nil {
		t.Fatalf("second unbind: %v", err)
	}
	if len(k.Writes()) != n {
		t.Errorf("second unbind wrote %v", k.Writes()[n:])
	}
}

func TestBindTwiceIsNoOp(t *testing.T) {
	t.Parallel()
	_, k, b, gpu, _ := consumer(t, "nvidia")
	if _, err := b.Bind(ctx, []host.Address{gpu}, BindOptions{}); err != nil {
		t.Fatal(err)
	}
	n := len(k.Writes())
	res, err := b.Bind(ctx, []host.Address{gpu}, BindOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := k.Writes()[n:]; len(got) != 0 {
		t.Errorf("second bind wrote %v", got)
	}
	if res.Changed || len(res.Steps) != 0 {
		t.Errorf("second bind changed: %+v", res)
	}
	for _, c := range res.Devices {
		if c.Changed || (c.Note != "already bound" && !strings.HasPrefix(c.Note, "bridge")) {
			t.Errorf("second bind change %+v", c)
		}
	}
}

func TestBootVGARefusedWithoutForce(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	igpu := tr.IntelGVTg()
	k := hosttest.NewKernel(tr)
	b := &Binder{Root: tr.Root, W: k, Modules: k, Timeout: time.Second}
	_, err := b.Bind(ctx, []host.Address{igpu}, BindOptions{})
	if !errors.Is(err, host.ErrRefused) || !strings.Contains(err.Error(), "boot VGA") || !strings.Contains(err.Error(), igpu.String()) {
		t.Fatalf("err = %v, want a boot-VGA refusal naming %s", err, igpu)
	}
	if len(k.Writes()) != 0 || tr.Driver(igpu) != "i915" {
		t.Fatalf("refused bind still wrote %v", k.Writes())
	}
	res, err := b.Bind(ctx, []host.Address{igpu}, BindOptions{Force: true})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Driver(igpu) != "vfio-pci" || len(res.Warnings) == 0 {
		t.Fatalf("forced bind: driver %q warnings %v", tr.Driver(igpu), res.Warnings)
	}
}

func TestBridgedGPUWithNIC(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	gpu, nic := tr.GPUWithNIC("0000:00:0b.0", "0000:03:01.0", "0000:03:02.0")
	bridge := host.MustParseAddress("0000:00:0b.0")
	k := hosttest.NewKernel(tr)
	b := &Binder{Root: tr.Root, W: k, Modules: k, Timeout: time.Second}

	_, err := b.Bind(ctx, []host.Address{gpu}, BindOptions{})
	if !errors.Is(err, host.ErrRefused) || !strings.Contains(err.Error(), nic.String()) || !strings.Contains(err.Error(), "network controller") {
		t.Fatalf("err = %v, want the NIC refused as host-critical", err)
	}
	if len(k.Writes()) != 0 {
		t.Fatalf("refused bind wrote %v", k.Writes())
	}
	res, err := b.Bind(ctx, []host.Address{gpu}, BindOptions{Force: true})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Driver(gpu) != "vfio-pci" || tr.Driver(nic) != "vfio-pci" {
		t.Fatalf("gpu %q nic %q", tr.Driver(gpu), tr.Driver(nic))
	}
	if tr.Driver(bridge) != "" || override(tr, bridge) != "(null)" {
		t.Fatalf("the bridge was touched: driver %q override %q", tr.Driver(bridge), override(tr, bridge))
	}
	for _, w := range k.Writes() {
		if strings.Contains(w.Path, bridge.String()) || w.Value == bridge.String() {
			t.Errorf("write touched the bridge: %v", w)
		}
	}
	if !res.Groups[0].Viable {
		t.Error("group not viable")
	}
	if _, err := b.Unbind(ctx, []host.Address{gpu}, UnbindOptions{}); err != nil {
		t.Fatal(err)
	}
	if tr.Driver(gpu) != "bochs-drm" || tr.Driver(nic) != "e1000" {
		t.Fatalf("after unbind gpu %q nic %q", tr.Driver(gpu), tr.Driver(nic))
	}
	noNewID(t, k)
}

func TestHeldDeviceTimesOutAndReverts(t *testing.T) {
	t.Parallel()
	tr, k, b, gpu, audio := consumer(t, "nvidia")
	b.Timeout = 150 * time.Millisecond
	k.Hold(audio) // the audio function moves second: the GPU must be put back
	defer k.Release(audio)
	start := time.Now()
	_, err := b.Bind(ctx, []host.Address{gpu}, BindOptions{})
	if !errors.Is(err, host.ErrWriteTimeout) || !errors.Is(err, host.ErrBusy) {
		t.Fatalf("err = %v, want a write timeout reported as busy", err)
	}
	if time.Since(start) > 2*time.Second {
		t.Errorf("bind took %s with a 150ms timeout", time.Since(start))
	}
	if !strings.Contains(err.Error(), "put back") || !strings.Contains(err.Error(), audio.String()) {
		t.Errorf("err = %v", err)
	}
	if tr.Driver(gpu) != "nvidia" || tr.Driver(audio) != "snd_hda_intel" {
		t.Fatalf("not reverted: gpu %q audio %q", tr.Driver(gpu), tr.Driver(audio))
	}
	for _, a := range []host.Address{gpu, audio} {
		if o := override(tr, a); o != "(null)" {
			t.Errorf("%s override %q after revert", a, o)
		}
	}
	if l, _ := LoadLedger(tr.Root); len(l.Devices) != 0 {
		t.Errorf("ledger keeps reverted devices: %v", l.Devices)
	}
}

func TestHolderRefusedAndNamedOnTimeout(t *testing.T) {
	t.Parallel()
	tr, k, b, gpu, _ := consumer(t, "nvidia")
	b.Timeout = 150 * time.Millisecond
	tr.WriteFile(filepath.Join("sys/bus/pci/devices", gpu.String(), "drm/card1/dev"), "226:1\n")
	tr.WriteFile("proc/4242/comm", "Xorg\n")
	if err := os.MkdirAll(filepath.Join(tr.Dir(), "proc/4242/fd"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/dri/card1", filepath.Join(tr.Dir(), "proc/4242/fd/7")); err != nil {
		t.Fatal(err)
	}
	_, err := b.Bind(ctx, []host.Address{gpu}, BindOptions{})
	if !errors.Is(err, host.ErrBusy) || !strings.Contains(err.Error(), "pid 4242 (Xorg) has /dev/dri/card1 open") {
		t.Fatalf("err = %v, want busy naming pid 4242 (Xorg)", err)
	}
	if len(k.Writes()) != 0 {
		t.Fatalf("refused bind wrote %v", k.Writes())
	}
	k.Hold(gpu)
	defer k.Release(gpu)
	_, err = b.Bind(ctx, []host.Address{gpu}, BindOptions{Force: true})
	if !errors.Is(err, host.ErrWriteTimeout) || !strings.Contains(err.Error(), "pid 4242 (Xorg)") {
		t.Fatalf("forced bind of a held device: err = %v, want a timeout naming the holder", err)
	}
	if tr.Driver(gpu) != "nvidia" || override(tr, gpu) != "(null)" {
		t.Fatalf("gpu %q override %q after failed forced bind", tr.Driver(gpu), override(tr, gpu))
	}
}

func TestFailWriteMidGroupReverts(t *testing.T) {
	t.Parallel()
	tr, k, b, gpu, audio := consumer(t, "nvidia")
	failed := false
	k.FailWrite = func(path, value string) error {
		if strings.HasSuffix(path, "drivers_probe") && value == audio.String() && !failed {
			failed = true
			return syscall.EIO
		}
		return nil
	}
	_, err := b.Bind(ctx, []host.Address{gpu}, BindOptions{})
	if !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), "drivers_probe") {
		t.Fatalf("err = %v, want the EIO naming drivers_probe", err)
	}
	// The audio function was unbound before the failing probe: it must be probed back too.
	if tr.Driver(gpu) != "nvidia" {
		t.Errorf("gpu on %q, want nvidia back", tr.Driver(gpu))
	}
	if d := tr.Driver(audio); d != "snd_hda_intel" {
		t.Errorf("audio on %q, want snd_hda_intel back", d)
	}
	if l, _ := LoadLedger(tr.Root); len(l.Devices) != 0 {
		t.Errorf("ledger = %v", l.Devices)
	}
	noNewID(t, k)
}

func TestFailedRevertKeepsLedger(t *testing.T) {
	t.Parallel()
	tr, k, b, gpu, audio := consumer(t, "nvidia")
	failed := false
	k.FailWrite = func(path, value string) error {
		if strings.HasSuffix(path, "drivers_probe") && value == audio.String() && !failed {
			failed = true
			return syscall.EIO
		}
		if strings.HasSuffix(path, "vfio-pci/unbind") && value == gpu.String() {
			return syscall.EIO // the GPU cannot be put back
		}
		return nil
	}
	_, err := b.Bind(ctx, []host.Address{gpu}, BindOptions{})
	if err == nil || !strings.Contains(err.Error(), "not all") {
		t.Fatalf("err = %v, want a partial revert report", err)
	}
	l, _ := LoadLedger(tr.Root)
	if _, ok := l.Lookup(gpu); !ok {
		t.Error("the GPU that could not be put back left the ledger: unbind could not restore it later")
	}
	if _, ok := l.Lookup(audio); ok {
		t.Error("the reverted audio function is still in the ledger")
	}
}

func TestDryRunChangesNothing(t *testing.T) {
	t.Parallel()
	tr, k, b, gpu, audio := consumer(t, "")
	os.RemoveAll(tr.Root.PCIDriver("vfio-pci")) // also plan the module load
	before := hosttest.State(t, tr.Dir())
	res, err := b.Bind(ctx, []host.Address{gpu}, BindOptions{DryRun: true, Persist: true})
	if err != nil {
		t.Fatal(err)
	}
	if after := hosttest.State(t, tr.Dir()); !reflect.DeepEqual(before, after) {
		for p, v := range after {
			if before[p] != v {
				t.Errorf("dry run changed %s", p)
			}
		}
		for p := range before {
			if _, ok := after[p]; !ok {
				t.Errorf("dry run removed %s", p)
			}
		}
	}
	if len(k.Writes()) != 0 {
		t.Errorf("dry run reached the kernel: %v", k.Writes())
	}
	r := tr.Root
	want := []string{
		"modprobe vfio-pci",
		"echo vfio-pci > " + r.PCIDevice(gpu, "driver_override"),
		"echo " + gpu.String() + " > " + r.Sys("bus/pci/drivers_probe"),
		"echo vfio-pci > " + r.PCIDevice(audio, "driver_override"),
		"echo " + audio.String() + " > " + r.PCIDriver("snd_hda_intel", "unbind"),
		"echo " + audio.String() + " > " + r.Sys("bus/pci/drivers_probe"),
	}
	var got []string
	for _, s := range res.Steps {
		got = append(got, s.String())
	}
	if len(got) < len(want) || !reflect.DeepEqual(got[:len(want)], want) {
		t.Fatalf("dry-run steps:\n%s\nwant first:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Two driverctl overrides; no softdep, as this snd_hda_intel has no module link (built in).
	if len(got) != len(want)+2 || res.Steps[len(want)].Op != OpFile || !strings.HasSuffix(res.Steps[len(want)].Path, "driverctl.d/pci-0000:01:00.0") {
		t.Errorf("persist steps: %v", got[len(want):])
	}
	if res.Changed {
		t.Error("dry run says it changed the host")
	}
}

func TestUnbindDryRunChangesNothing(t *testing.T) {
	t.Parallel()
	tr, k, b, gpu, audio := consumer(t, "")
	if _, err := b.Bind(ctx, []host.Address{gpu}, BindOptions{}); err != nil {
		t.Fatal(err)
	}
	before := hosttest.State(t, tr.Dir())
	n := len(k.Writes())
	res, err := b.Unbind(ctx, []host.Address{gpu}, UnbindOptions{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(before, hosttest.State(t, tr.Dir())) || len(k.Writes()) != n {
		t.Fatal("unbind dry run changed the tree")
	}
	r := tr.Root
	want := []string{
		"echo > " + r.PCIDevice(audio, "driver_override"),
		"echo " + audio.String() + " > " + r.PCIDriver("vfio-pci", "unbind"),
		"echo " + audio.String() + " > " + r.Sys("bus/pci/drivers_probe"),
		"echo > " + r.PCIDevice(gpu, "driver_override"),
		"echo " + gpu.String() + " > " + r.PCIDriver("vfio-pci", "unbind"),
	}
	var got []string
	for _, s := range res.Steps {
		got = append(got, s.String())
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("unbind dry-run steps:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestLoadsVFIOWhenMissing(t *testing.T) {
	t.Parallel()
	tr, k, b, gpu, _ := consumer(t, "")
	os.RemoveAll(tr.Root.PCIDriver("vfio-pci"))
	if _, err := b.Bind(ctx, []host.Address{gpu}, BindOptions{}); err != nil {
		t.Fatal(err)
	}
	if w := k.Writes(); len(w) == 0 || w[0].Path != "modprobe" || w[0].Value != "vfio-pci" {
		t.Fatalf("first host change %v, want modprobe vfio-pci", w)
	}
	if tr.Driver(gpu) != "vfio-pci" {
		t.Fatal("not bound after loading vfio-pci")
	}
}

func TestUnbindNotInLedger(t *testing.T) {
	t.Parallel()
	tr, k, b, gpu, audio := consumer(t, "")
	tr.Bind(gpu, "vfio-pci") // bound by someone else
	_, err := b.Unbind(ctx, []host.Address{gpu}, UnbindOptions{})
	if !errors.Is(err, ErrNotInLedger) || !errors.Is(err, host.ErrRefused) || !strings.Contains(err.Error(), gpu.String()) {
		t.Fatalf("err = %v, want not-in-ledger naming %s", err, gpu)
	}
	if len(k.Writes()) != 0 {
		t.Fatalf("refused unbind wrote %v", k.Writes())
	}
	// Named by the audio address (not on vfio-pci): nothing to do, and the foreign GPU in its
	// group is left alone.
	if _, err := b.Unbind(ctx, []host.Address{audio}, UnbindOptions{}); err != nil {
		t.Fatal(err)
	}
	if tr.Driver(gpu) != "vfio-pci" || len(k.Writes()) != 0 {
		t.Fatal("unbind by the audio address touched the foreign gpu")
	}
	if _, err := b.Unbind(ctx, []host.Address{gpu}, UnbindOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	if tr.Driver(gpu) == "vfio-pci" || override(tr, gpu) != "(null)" {
		t.Fatalf("forced unbind left gpu on %q override %q", tr.Driver(gpu), override(tr, gpu))
	}
}

func TestUnbindNotBoundIsNoOp(t *testing.T) {
	t.Parallel()
	_, k, b, gpu, audio := consumer(t, "nvidia")
	res, err := b.Unbind(ctx, []host.Address{audio}, UnbindOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(k.Writes()) != 0 || res.Changed {
		t.Fatalf("unbind of an unbound group wrote %v", k.Writes())
	}
	for _, c := range res.Devices {
		if c.Address == gpu && c.Note != "not on vfio-pci: nothing to do" {
			t.Errorf("note %q", c.Note)
		}
	}
}

func TestNoIOMMU(t *testing.T) {
	t.Parallel()
	tr, _, b, gpu, _ := consumer(t, "")
	tr.NoIOMMU()
	_, err := b.Bind(ctx, []host.Address{gpu}, BindOptions{Force: true})
	if !errors.Is(err, host.ErrUnsupported) || !errors.Is(err, host.ErrNoIOMMU) || !strings.Contains(err.Error(), "enable VT-d in the firmware and boot with intel_iommu=on iommu=pt") {
		t.Fatalf("err = %v", err)
	}
	// The fix is check's iommu fix (host.IOMMUFix), for the CPU and the kind of host: an AMD
	// host's firmware, a VM's hypervisor (no firmware advice there).
	for cpuinfo, want := range map[string]string{
		"vendor_id\t: AuthenticAMD\nflags\t\t: fpu svm\n":            `enable the IOMMU ("IOMMU" or "AMD-Vi") in the firmware setup`,
		"vendor_id\t: GenuineIntel\nflags\t\t: fpu vmx hypervisor\n": "this host is a virtual machine: the hypervisor that runs it must give it a virtual IOMMU",
	} {
		tr.WriteFile("proc/cpuinfo", cpuinfo)
		_, err := b.Bind(ctx, []host.Address{gpu}, BindOptions{Force: true})
		if !errors.Is(err, host.ErrNoIOMMU) || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "VT-d") ||
			!strings.Contains(err.Error(), host.IOMMUFix(tr.Root)) {
			t.Errorf("%q: err = %v", cpuinfo, err)
		}
	}
}

func TestInterruptRemappingMissing(t *testing.T) {
	t.Parallel()
	tr, k, b, gpu, _ := consumer(t, "")
	tr.WriteFile("proc/interrupts", "           CPU0\n  0:         10   IO-APIC    2-edge      timer\n 24:  0  PCI-MSI 65536-edge  PCIe PME\n")
	_, err := b.Bind(ctx, []host.Address{gpu}, BindOptions{})
	if !errors.Is(err, host.ErrRefused) || !strings.Contains(err.Error(), "allow_unsafe_interrupts") ||
		!strings.Contains(err.Error(), "enable interrupt remapping (x2APIC/VT-d IR) in the firmware") {
		t.Fatalf("err = %v", err)
	}
	if len(k.Writes()) != 0 {
		t.Fatal("refused bind wrote")
	}
	// In a VM the fix is its virtual IOMMU's, as check words it (host.InterruptRemappingFix).
	tr.WriteFile("proc/cpuinfo", "vendor_id\t: GenuineIntel\nflags\t\t: fpu vmx hypervisor\n")
	_, err = b.Bind(ctx, []host.Address{gpu}, BindOptions{})
	if !errors.Is(err, host.ErrRefused) || !strings.Contains(err.Error(), "its virtual IOMMU must remap interrupts") || strings.Contains(err.Error(), "firmware") {
		t.Fatalf("in a VM: err = %v", err)
	}
	if _, err := b.Bind(ctx, []host.Address{gpu}, BindOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	if tr.ReadFile("sys/module/vfio_iommu_type1/parameters/allow_unsafe_interrupts") != "" {
		t.Fatal("vgpu-host set allow_unsafe_interrupts")
	}
}

func TestPersistWrittenAndRemoved(t *testing.T) {
	t.Parallel()
	tr, _, b, gpu, audio := consumer(t, "")
	// Real sysfs links a modular driver to its module.
	os.MkdirAll(filepath.Join(tr.Dir(), "sys/module/snd_hda_intel"), 0o755)
	os.Symlink("../../../../module/snd_hda_intel", tr.Root.PCIDriver("snd_hda_intel", "module"))
	// A foreign driverctl override must survive.
	tr.WriteFile("etc/driverctl.d/pci-0000:05:00.0", "vfio-pci\n")
	res, err := b.Bind(ctx, []host.Address{gpu}, BindOptions{Persist: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []host.Address{gpu, audio} {
		if got := tr.ReadFile("etc/driverctl.d/pci-" + a.String()); got != "vfio-pci\n" {
			t.Errorf("driverctl override of %s = %q", a, got)
		}
	}
	conf := tr.ReadFile("etc/modprobe.d/vgpu-host.conf")
	if !strings.Contains(conf, "\nsoftdep snd_hda_intel pre: vfio-pci\n") || strings.Count(conf, "softdep") != 1 {
		t.Errorf("softdep conf:\n%s", conf)
	}
	if len(res.Warnings) == 0 || !strings.Contains(strings.Join(res.Warnings, " "), "driverctl is not installed") {
		t.Errorf("no warning about missing driverctl: %v", res.Warnings)
	}
	if _, err := b.Unbind(ctx, []host.Address{gpu}, UnbindOptions{Persist: true}); err != nil {
		t.Fatal(err)
	}
	for _, a := range []host.Address{gpu, audio} {
		if host.Exists(DriverctlPath(tr.Root, a)) {
			t.Errorf("driverctl override of %s left behind", a)
		}
	}
	if host.Exists(SoftdepPath(tr.Root)) {
		t.Error("softdep conf left behind with nothing persisted")
	}
	if tr.ReadFile("etc/driverctl.d/pci-0000:05:00.0") != "vfio-pci\n" {
		t.Error("foreign driverctl override removed")
	}
	if tr.Driver(audio) != "snd_hda_intel" {
		t.Error("audio not restored")
	}
}

func TestPersistOnAlreadyBound(t *testing.T) {
	t.Parallel()
	tr, k, b, gpu, audio := consumer(t, "")
	if _, err := b.Bind(ctx, []host.Address{gpu}, BindOptions{}); err != nil {
		t.Fatal(err)
	}
	n := len(k.Writes())
	if _, err := b.Bind(ctx, []host.Address{audio}, BindOptions{Persist: true}); err != nil {
		t.Fatal(err)
	}
	if len(k.Writes()) != n {
		t.Error("persisting an already bound group wrote sysfs")
	}
	if tr.ReadFile("etc/driverctl.d/pci-"+gpu.String()) != "vfio-pci\n" {
		t.Error("no driverctl override")
	}
	if l, _ := LoadLedger(tr.Root); !l.Devices[audio.String()].Persist {
		t.Error("ledger does not record persistence")
	}
}

func TestLedgerWrittenBeforeEachMoveAndAtomically(t *testing.T) {
	t.Parallel()
	tr, k, b, gpu, audio := consumer(t, "nvidia")
	var seen []string
	k.FailWrite = func(path, value string) error {
		if strings.HasSuffix(path, "/driver_override") && strings.TrimSpace(value) == "vfio-pci" {
			l, err := LoadLedger(tr.Root)
			if err != nil {
				return err
			}
			a := filepath.Base(filepath.Dir(path))
			e, ok := l.Devices[a]
			if !ok {
				t.Errorf("%s moved before the ledger recorded it", a)
			}
			seen = append(seen, a+"="+e.Driver)
		}
		return nil
	}
	if _, err := b.Bind(ctx, []host.Address{gpu}, BindOptions{}); err != nil {
		t.Fatal(err)
	}
	if want := []string{gpu.String() + "=nvidia", audio.String() + "=snd_hda_intel"}; !reflect.DeepEqual(seen, want) {
		t.Errorf("ledger at each move: %v, want %v", seen, want)
	}
	ents, _ := os.ReadDir(tr.Root.StateDir())
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp") {
			t.Errorf("temporary file left: %s", e.Name())
		}
	}
	var raw map[string]any
	b2, _ := os.ReadFile(LedgerPath(tr.Root))
	if err := json.Unmarshal(b2, &raw); err != nil || raw["version"] != float64(1) {
		t.Errorf("ledger json %s: %v", b2, err)
	}
}

func TestCrashLeftoverKeepsOriginal(t *testing.T) {
	t.Parallel()
	// A run crashed after recording the audio function and unbinding it: the device is
	// driverless with the override set. A new bind must keep the true original.
	tr, _, b, gpu, audio := consumer(t, "")
	l := &Bindings{Devices: map[string]Binding{audio.String(): {Address: audio, Group: tr.Group(audio), Driver: "snd_hda_intel"}}}
	if err := l.save(tr.Root); err != nil {
		t.Fatal(err)
	}
	tr.Unbind(audio)
	tr.WriteFile(filepath.Join("sys/bus/pci/devices", audio.String(), "driver_override"), "vfio-pci\n")
	if _, err := b.Bind(ctx, []host.Address{gpu}, BindOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Unbind(ctx, []host.Address{gpu}, UnbindOptions{}); err != nil {
		t.Fatal(err)
	}
	if tr.Driver(audio) != "snd_hda_intel" {
		t.Fatalf("audio on %q, want the original snd_hda_intel", tr.Driver(audio))
	}
}

func TestLockSerializesRuns(t *testing.T) {
	t.Parallel()
	_, _, b, gpu, _ := consumer(t, "")
	b.Timeout = 100 * time.Millisecond
	unlock, err := lock(b.Root, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.Bind(ctx, []host.Address{gpu}, BindOptions{})
	unlock()
	if !errors.Is(err, host.ErrBusy) || !strings.Contains(err.Error(), "vfio.lock") {
		t.Fatalf("err = %v, want busy on the lock", err)
	}
	if _, err := b.Bind(ctx, []host.Address{gpu}, BindOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestOwnerGuardsUnbind(t *testing.T) {
	t.Parallel()
	_, _, b, gpu, _ := consumer(t, "")
	if _, err := b.Bind(ctx, []host.Address{gpu}, BindOptions{Owner: "vm-a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Unbind(ctx, []host.Address{gpu}, UnbindOptions{Owner: "vm-b"}); !errors.Is(err, host.ErrRefused) {
		t.Fatalf("err = %v, want refused for another owner", err)
	}
	if _, err := b.Unbind(ctx, []host.Address{gpu}, UnbindOptions{Owner: "vm-a"}); err != nil {
		t.Fatal(err)
	}
}

func TestHostCriticalByMountAndRoute(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	// A "other class" function that carries a mounted disk, and one that carries a routed NIC.
	disk := tr.AddPCI(hosttest.PCI{Addr: "0000:00:1e.0", Vendor: 0x1af4, Device: 0x1042, Class: 0xff0000, Driver: "virtio-pci"})
	nic := tr.AddPCI(hosttest.PCI{Addr: "0000:00:03.0", Vendor: 0x1af4, Device: 0x1041, Class: 0xff0000, Driver: "virtio-pci"})
	tr.WriteFile(filepath.Join("sys/bus/pci/devices", disk.String(), "virtio2/block/vda/vda1/partition"), "1\n")
	os.MkdirAll(filepath.Join(tr.Dir(), "sys/class/block"), 0o755)
	os.Symlink("../../devices/pci0000:00/0000:00:1e.0/virtio2/block/vda/vda1", filepath.Join(tr.Dir(), "sys/class/block/vda1"))
	tr.WriteFile("proc/mounts", "sysfs /sys sysfs rw 0 0\n/dev/vda1 / ext4 rw,relatime 0 0\n")
	os.MkdirAll(filepath.Join(tr.Dir(), "sys/class/net"), 0o755)
	os.Symlink("../../devices/pci0000:00/0000:00:03.0/virtio0/net/ens3", filepath.Join(tr.Dir(), "sys/class/net/ens3"))
	tr.WriteFile("proc/net/route", "Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\tMTU\tWindow\tIRTT\nens3\t00000000\t0202000A\t0003\t0\t0\t0\t00000000\t0\t0\t0\n")
	k := hosttest.NewKernel(tr)
	b := &Binder{Root: tr.Root, W: k, Timeout: time.Second}
	_, err := b.Bind(ctx, []host.Address{disk}, BindOptions{})
	if !errors.Is(err, host.ErrRefused) || !strings.Contains(err.Error(), "/dev/vda1 (mounted on /)") {
		t.Fatalf("disk: err = %v", err)
	}
	_, err = b.Bind(ctx, []host.Address{nic}, BindOptions{})
	if !errors.Is(err, host.ErrRefused) || !strings.Contains(err.Error(), "ens3") {
		t.Fatalf("nic: err = %v", err)
	}
	if len(k.Writes()) != 0 {
		t.Fatal("refused binds wrote")
	}
}

func TestUnknownDevice(t *testing.T) {
	t.Parallel()
	_, _, b, _, _ := consumer(t, "")
	_, err := b.Bind(ctx, []host.Address{host.MustParseAddress("0000:09:00.0")}, BindOptions{})
	if !errors.Is(err, host.ErrNotFound) {
		t.Fatalf("err = %v", err)
	}
}

func TestTwoIdenticalCardsBindByAddress(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	a, _ := tr.ConsumerGPU("0000:00:04.0", "0000:01:00.0", "nvidia")
	other, _ := tr.ConsumerGPU("0000:00:05.0", "0000:02:00.0", "nvidia")
	k := hosttest.NewKernel(tr)
	b := &Binder{Root: tr.Root, W: k, Timeout: time.Second}
	if _, err := b.Bind(ctx, []host.Address{a}, BindOptions{}); err != nil {
		t.Fatal(err)
	}
	if tr.Driver(other) != "nvidia" {
		t.Fatal("the identical second card was captured")
	}
	noNewID(t, k)
}

func TestBindBridgeOnlyGroupIsNoOp(t *testing.T) {
	t.Parallel()
	_, k, b, _, _ := consumer(t, "")
	port := host.MustParseAddress("0000:00:04.0")
	start := time.Now()
	res, err := b.Bind(ctx, []host.Address{port}, BindOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(k.Writes()) != 0 || res.Changed || res.Devices[0].Note != "bridge stays on pcieport" {
		t.Fatalf("bind of a root port: writes %v result %+v", k.Writes(), res)
	}
	if time.Since(start) > time.Second {
		t.Errorf("waited %s for a /dev/vfio node a bridge-only group never gets", time.Since(start))
	}
}

// BenchmarkBindUnbind measures vgpu-host's own work for bind+unbind of the two-function
// GPU + audio group on a fake tree (the lab bench adds process start and the kernel's work).
func BenchmarkBindUnbind(b *testing.B) {
	tr := hosttest.New(b)
	gpu, _ := tr.ConsumerGPU("0000:00:04.0", "0000:01:00.0", "")
	k := hosttest.NewKernel(tr)
	bd := &Binder{Root: tr.Root, W: k, Modules: k, Timeout: 2 * time.Second}
	for b.Loop() {
		if _, err := bd.Bind(ctx, []host.Address{gpu}, BindOptions{}); err != nil {
			b.Fatal(err)
		}
		if _, err := bd.Unbind(ctx, []host.Address{gpu}, UnbindOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestHeldHDARefusedBeforeAnyWrite: measured in the real-kernel lab, the kernel's unbind of an
// HDA function blocks while a process holds its ALSA nodes and cannot be interrupted; so a
// held /dev/snd/controlC0 must refuse the bind before any write, naming the process.
func TestHeldHDARefusedBeforeAnyWrite(t *testing.T) {
	t.Parallel()
	tr, k, b, gpu, _ := consumer(t, "nvidia")
	tr.HoldOpen(5150, "pulseaudio", "/dev/snd/controlC0")
	_, err := b.Bind(ctx, []host.Address{gpu}, BindOptions{})
	if !errors.Is(err, host.ErrBusy) || !strings.Contains(err.Error(), "pid 5150 (pulseaudio) has /dev/snd/controlC0 open") {
		t.Fatalf("err = %v, want busy naming pid 5150", err)
	}
	if len(k.Writes()) != 0 {
		t.Fatalf("refused bind wrote %v", k.Writes())
	}
	// A pcm node of the same card counts too; one of another card does not.
	tr2, _, b2, gpu2, _ := consumer(t, "nvidia")
	tr2.HoldOpen(5151, "speaker-test", "/dev/snd/pcmC0D3p")
	if _, err := b2.Bind(ctx, []host.Address{gpu2}, BindOptions{DryRun: true}); !errors.Is(err, host.ErrBusy) {
		t.Fatalf("pcm node held: %v", err)
	}
	tr3, _, b3, gpu3, _ := consumer(t, "nvidia")
	tr3.HoldOpen(5152, "aplay", "/dev/snd/pcmC1D3p")
	if _, err := b3.Bind(ctx, []host.Address{gpu3}, BindOptions{DryRun: true}); err != nil {
		t.Fatalf("another card's node held: %v", err)
	}
}

// TestUnbindRefusesWhatAVMOwns: a group apply bound for a VM is the VM's: a plain unbind
// refuses (exit 4) naming the VM and the command that gives it back; --force restores it.
func TestUnbindRefusesWhatAVMOwns(t *testing.T) {
	t.Parallel()
	tr, k, b, gpu, audio := consumer(t, "nvidia")
	if _, err := b.Bind(ctx, []host.Address{gpu}, BindOptions{Owner: "train-01"}); err != nil {
		t.Fatal(err)
	}
	n := len(k.Writes())
	_, err := b.Unbind(ctx, []host.Address{gpu}, UnbindOptions{})
	if !errors.Is(err, host.ErrRefused) || !strings.Contains(err.Error(), `VM "train-01"`) || !strings.Contains(err.Error(), "vgpu-host destroy train-01") {
		t.Fatalf("unbind of a VM's group: %v", err)
	}
	if len(k.Writes()) != n {
		t.Fatal("the refused unbind wrote")
	}
	if _, err := b.Unbind(ctx, []host.Address{gpu}, UnbindOptions{Owner: "train-01"}); err != nil {
		t.Fatalf("the owner's own unbind: %v", err)
	}
	if tr.Driver(audio) != "snd_hda_intel" {
		t.Fatalf("audio on %q", tr.Driver(audio))
	}
}

// TestOneHolderSearchNamesTheRightFunction: bind and unbind search every process's open files
// once for all the groups of the call; each refusal must still name the function (bind) or
// group (unbind) whose node is held, and no other.
func TestOneHolderSearchNamesTheRightFunction(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	gpu1, audio1 := tr.ConsumerGPU("0000:00:04.0", "0000:01:00.0", "nvidia")
	gpu2, audio2 := tr.ConsumerGPU("0000:00:05.0", "0000:02:00.0", "nvidia")
	k := hosttest.NewKernel(tr)
	b := &Binder{Root: tr.Root, W: k, Modules: k, Timeout: 2 * time.Second}
	tr.HoldOpen(4242, "speaker-test", "/dev/snd/pcmC1D3p") // card 1: the second GPU's audio
	_, err := b.Bind(ctx, []host.Address{gpu1, gpu2}, BindOptions{})
	if !errors.Is(err, host.ErrBusy) || !strings.Contains(err.Error(), audio2.String()+": is held open") || strings.Contains(err.Error(), audio1.String()) {
		t.Fatalf("bind with card 1 held: %v, want a refusal of %s alone", err, audio2)
	}
	if len(k.Writes()) != 0 {
		t.Fatalf("refused bind wrote %v", k.Writes())
	}
	if err := os.RemoveAll(filepath.Join(tr.Dir(), "proc/4242")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Bind(ctx, []host.Address{gpu1, gpu2}, BindOptions{}); err != nil {
		t.Fatal(err)
	}
	g1, g2 := tr.Group(gpu1), tr.Group(gpu2)
	tr.HoldOpen(4243, "qemu-system-x86", fmt.Sprintf("/dev/vfio/%d", g2))
	n := len(k.Writes())
	_, err = b.Unbind(ctx, []host.Address{gpu1, gpu2}, UnbindOptions{})
	if !errors.Is(err, host.ErrBusy) || !strings.Contains(err.Error(), fmt.Sprintf("IOMMU group %d is in use", g2)) || strings.Contains(err.Error(), fmt.Sprintf("IOMMU group %d is in use", g1)) {
		t.Fatalf("unbind with group %d held: %v, want a refusal of that group alone", g2, err)
	}
	if len(k.Writes()) != n {
		t.Fatal("the refused unbind wrote")
	}
}

// TestBindSeesAFunctionThatJoinedTheGroup: after a bind, each moved function's driver is the
// one the kernel was seen to give it, and the group is not read member by member again; but a
// function that joined the group meanwhile (hot-plugged onto a host driver) must still make
// the group not viable, and the bind say so.
func TestBindSeesAFunctionThatJoinedTheGroup(t *testing.T) {
	t.Parallel()
	tr, k, b, gpu, _ := consumer(t, "nvidia")
	g := tr.Group(gpu)
	joined := false
	k.FailWrite = func(path, value string) error {
		if !joined && strings.HasSuffix(path, "drivers_probe") {
			joined = true
			tr.AddPCI(hosttest.PCI{Addr: "0000:01:00.2", Parent: "0000:00:04.0", Vendor: 0x10de, Device: 0x1aec, Class: 0x0c0330, Driver: "xhci_hcd", Group: g})
		}
		return nil
	}
	res, err := b.Bind(ctx, []host.Address{gpu}, BindOptions{})
	if !errors.Is(err, ErrGroupNotViable) || !strings.Contains(err.Error(), "0000:01:00.2 on xhci_hcd") {
		t.Fatalf("bind while a function joined the group: %v", err)
	}
	if len(res.Groups) != 1 || res.Groups[0].Viable {
		t.Fatalf("groups %+v, want group %d not viable", res.Groups, g)
	}
	// Without a hot-plug the group is viable, from the drivers the bind saw.
	_, _, b2, gpu2, _ := consumer(t, "nvidia")
	res, err = b2.Bind(ctx, []host.Address{gpu2}, BindOptions{})
	if err != nil || len(res.Groups) != 1 || !res.Groups[0].Viable {
		t.Fatalf("plain bind: %v %+v", err, res)
	}
}
