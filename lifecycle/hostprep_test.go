package lifecycle

import (
	"context"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/ledger"
	"github.com/vgpu-host/vgpu-host/virt"
)

// TestApplyPreparesFakeHost runs apply and destroy with the real host preparation (vfio
// binder over hosttest's kernel emulator, host.Scan of the fake tree) and a fake libvirt: the
// GPU's whole group moves to vfio-pci, and destroy gives it back to its original drivers.
func TestApplyPreparesFakeHost(t *testing.T) {
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
