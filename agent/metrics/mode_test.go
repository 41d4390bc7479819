package metrics

import (
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
)

// TestModeOf pins gpu_info's mode label for each use of a GPU function: dashboards and
// alerts match these strings.
func TestModeOf(t *testing.T) {
	pf := host.Address{Bus: 0x41}
	for _, c := range []struct {
		d    host.Device
		want string
	}{
		{host.Device{PhysFn: &pf, VendorVGPU: &host.VendorVGPU{}, Driver: "nvidia"}, "vendor-vfio"},
		{host.Device{PhysFn: &pf, Driver: "vfio-pci"}, "sriov-vf"},
		{host.Device{Driver: "vfio-pci"}, "passthrough"},
		{host.Device{Driver: "nvidia", Mdev: &host.MdevParent{}}, "mdev"},
		{host.Device{Driver: "nvidia", SRIOV: &host.SRIOV{NumVFs: 4}}, "sriov-pf"},
		{host.Device{Driver: "nvidia", SRIOV: &host.SRIOV{}}, "host"},
		{host.Device{}, "unbound"},
	} {
		if got := string(ModeOf(c.d)); got != c.want {
			t.Errorf("ModeOf(%+v) = %q, want %q", c.d, got, c.want)
		}
	}
}
