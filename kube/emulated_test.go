package kube_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/internal/kubetest"
	"github.com/vgpu-host/vgpu-host/kube"
)

// TestOnlyRealGPUsByDefault: emulated display devices (QEMU's bochs VGA, virtio-gpu) and mdev
// instances of the kernel's sample parents (mbochs, mtty: a serial port) are not resources,
// nor offered to KubeVirt, unless includeEmulated is set; real GPUs and their vGPU types are.
// Before, the bochs VGA and virtio-gpu were advertised (Unhealthy) and mtty instances were
// permitted as GPU resources.
func TestOnlyRealGPUsByDefault(t *testing.T) {
	tr := kubetest.ExampleHost(t)
	tr.AddPCI(hosttest.PCI{Addr: "0000:00:0e.0", Vendor: 0x1234, Device: 0x1111, Class: 0x030000, Driver: "vfio-pci"})
	tr.AddPCI(hosttest.PCI{Addr: "0000:00:0f.0", Vendor: 0x1af4, Device: 0x1050, Class: 0x038000, Driver: "virtio-pci"})
	mb := strings.TrimPrefix(tr.Mbochs(), tr.Dir()+"/")
	tr.CreateMdev(mb, "mbochs-small", "6a6d5c3e-7f0a-4c8b-9e1d-2b3c4d5e6f70")
	mt := strings.TrimPrefix(tr.MdevParentVirtual("mtty", []hosttest.MdevType{{ID: "mtty-2", Name: "Dual-port-serial", Available: 4}}), tr.Dir()+"/")
	tr.CreateMdev(mt, "mtty-2", "7b7e6d4f-8a1b-4d9c-8f2e-3c4d5e6f7a81")
	inv, err := host.Scan(tr.Root)
	if err != nil {
		t.Fatal(err)
	}
	names := func(c *kube.Catalog) []string {
		var out []string
		for _, r := range c.Resources {
			out = append(out, r.Name)
		}
		return out
	}
	real := []string{"nvidia.com/GA100_A100_SXM4_40GB", "nvidia.com/GA102_GEFORCE_RTX_3080", "nvidia.com/GRID_T4-2Q", "nvidia.com/NVIDIA_L40S-4Q"}
	emulated := []string{"vgpu-host.io/PCI_1234_1111", "vgpu-host.io/PCI_1AF4_1050", "vgpu-host.io/small", "vgpu-host.io/Dual-port-serial"}
	got := names(kube.Build(inv, kube.Config{}))
	if !slices.Equal(got, real) {
		t.Errorf("default: %v, want %v", got, real)
	}
	for _, n := range names(kube.Offered(inv, kube.Config{})) {
		if strings.HasPrefix(n, "vgpu-host.io/") {
			t.Errorf("offered to KubeVirt by default: %s", n)
		}
	}
	got = names(kube.Build(inv, kube.Config{IncludeEmulated: true}))
	for _, n := range append(real, emulated...) {
		if !slices.Contains(got, n) {
			t.Errorf("includeEmulated: %s missing from %v", n, got)
		}
	}
}
