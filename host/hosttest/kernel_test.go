package hosttest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
)

// The emulator is test infrastructure other packages trust: prove it behaves like the kernel.

func TestKernelBindSequence(t *testing.T) {
	tr := New(t)
	gpu, audio := tr.ConsumerGPU("0000:00:01.0", "0000:01:00.0", "nvidia")
	k := NewKernel(tr)
	ctx := context.Background()
	r := tr.Root
	must := func(p, v string) {
		t.Helper()
		if err := k.Write(ctx, p, v); err != nil {
			t.Fatal(err)
		}
	}
	if tr.Group(gpu) != tr.Group(audio) {
		t.Fatal("gpu and audio must share a group")
	}
	must(r.PCIDevice(gpu, "driver_override"), "vfio-pci")
	must(r.PCIDevice(gpu, "driver", "unbind"), gpu.String())
	if tr.Driver(gpu) != "" {
		t.Fatal("unbind left the driver link")
	}
	must(r.Sys("bus/pci/drivers_probe"), gpu.String())
	if tr.Driver(gpu) != "vfio-pci" {
		t.Fatalf("driver = %q after probe with override", tr.Driver(gpu))
	}
	if !host.Exists(r.Dev("vfio", strconv.Itoa(tr.Group(gpu)))) {
		t.Fatal("/dev/vfio/N missing")
	}
	// Restore: clear override, unbind, probe: native driver comes back.
	must(r.PCIDevice(gpu, "driver_override"), "\n")
	must(r.PCIDriver("vfio-pci", "unbind"), gpu.String())
	must(r.Sys("bus/pci/drivers_probe"), gpu.String())
	if tr.Driver(gpu) != "nvidia" {
		t.Fatalf("driver = %q after restore", tr.Driver(gpu))
	}
	if tr.ReadFile("sys/bus/pci/devices/0000:01:00.0/driver_override") != "(null)\n" {
		t.Fatal("override not cleared")
	}
	if k.UsedNewID() {
		t.Fatal("new_id used")
	}
}

func TestKernelHeldUnbindBlocks(t *testing.T) {
	tr := New(t)
	gpu, _ := tr.ConsumerGPU("0000:00:01.0", "0000:01:00.0", "nvidia")
	k := NewKernel(tr)
	k.Hold(gpu)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := k.Write(ctx, tr.Root.PCIDriver("nvidia", "unbind"), gpu.String())
	if !errors.Is(err, context.DeadlineExceeded) || tr.Driver(gpu) != "nvidia" {
		t.Fatalf("held unbind: err=%v driver=%q", err, tr.Driver(gpu))
	}
	k.Release(gpu)
	if err := k.Write(context.Background(), tr.Root.PCIDriver("nvidia", "unbind"), gpu.String()); err != nil || tr.Driver(gpu) != "" {
		t.Fatalf("released unbind: %v", err)
	}
}

func TestKernelSRIOVRules(t *testing.T) {
	tr := New(t)
	pf := tr.SRIOVPF(PCI{Addr: "0000:00:0a.0", Vendor: 0x1b36, Device: 0x0010, Class: 0x010802, Driver: "nvme"},
		VFSpec{Total: 3, VFDevice: 0x0010, VFDriver: "nvme"}, 0)
	k := NewKernel(tr)
	p := tr.Root.PCIDevice(pf, "sriov_numvfs")
	ctx := context.Background()
	if err := k.Write(ctx, p, "2"); err != nil {
		t.Fatal(err)
	}
	vf1 := tr.VFAddress(pf, 1)
	if vf1.String() != "0000:00:0a.2" || tr.Driver(vf1) != "nvme" {
		t.Fatalf("vf1 = %s driver %q", vf1, tr.Driver(vf1))
	}
	if l, _ := os.Readlink(filepath.Join(tr.DevDir(vf1), "physfn")); filepath.Base(l) != pf.String() {
		t.Fatalf("physfn = %q", l)
	}
	vf1Dir := tr.DevDir(vf1)
	if err := k.Write(ctx, p, "3"); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("2→3 err = %v, want EBUSY", err)
	}
	if err := k.Write(ctx, p, "0"); err != nil {
		t.Fatal(err)
	}
	if err := k.Write(ctx, p, "4"); !errors.Is(err, syscall.ERANGE) {
		t.Fatalf("4 > total err = %v, want ERANGE", err)
	}
	if host.Exists(vf1Dir) || host.Exists(tr.Root.PCIDevice(vf1)) {
		t.Fatal("VF left after disable")
	}
}

func TestKernelMdevAndNvidia(t *testing.T) {
	tr := New(t)
	dir := tr.Mbochs()
	k := NewKernel(tr)
	ctx := context.Background()
	create := tr.Root.Path(dir, "mdev_supported_types/mbochs-large/create")
	u1, u2, u3 := "11111111-2222-3333-4444-555555555555", "11111111-2222-3333-4444-555555555556", "11111111-2222-3333-4444-555555555557"
	for _, u := range []string{u1, u2} {
		if err := k.Write(ctx, create, u); err != nil {
			t.Fatal(err)
		}
	}
	if err := k.Write(ctx, create, u3); !errors.Is(err, syscall.EUSERS) {
		t.Fatalf("over-ask err = %v", err)
	}
	if l, _ := host.LinkBase(tr.Root.Sys("bus/mdev/devices", u1, "mdev_type")); l != "mbochs-large" {
		t.Fatalf("mdev_type = %q", l)
	}
	if err := k.Write(ctx, tr.Root.Sys("bus/mdev/devices", u1, "remove"), "1"); err != nil {
		t.Fatal(err)
	}
	if host.Exists(tr.Root.Sys("bus/mdev/devices", u1)) || strings.TrimSpace(tr.ReadFile(dir+"/mdev_supported_types/mbochs-large/available_instances")) != "1" {
		t.Fatal("remove did not free the instance")
	}

	pf := tr.NvidiaSRIOVGPU("0000:40:01.0", "0000:41:00.0", 1, 4, nil)
	vf0, vf1 := tr.VFAddress(pf, 0), tr.VFAddress(pf, 1)
	if err := k.Write(ctx, tr.Root.PCIDevice(vf0, "nvidia/current_vgpu_type"), "1160"); err != nil {
		t.Fatal(err)
	}
	c := tr.ReadFile("sys/bus/pci/devices/" + vf1.String() + "/nvidia/creatable_vgpu_types")
	if !strings.Contains(c, "1160") || strings.Contains(c, "1155") {
		t.Fatalf("sibling creatable after 8Q assigned:\n%s", c)
	}
	if err := k.Write(ctx, tr.Root.PCIDevice(vf1, "nvidia/current_vgpu_type"), "1155"); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("mixed type err = %v", err)
	}
	if err := k.Write(ctx, tr.Root.PCIDevice(vf0, "nvidia/current_vgpu_type"), "0"); err != nil {
		t.Fatal(err)
	}
	if c := tr.ReadFile("sys/bus/pci/devices/" + vf1.String() + "/nvidia/creatable_vgpu_types"); !strings.Contains(c, "1155") {
		t.Fatalf("after clear:\n%s", c)
	}
}
