// Package mocknvml is go-nvml's own mock of a DGX A100 (pkg/nvml/mock/dgxa100: eight
// A100-SXM4-40GB), completed where vgpu-host needs more than it answers. It is for tests and
// for the test build of the NVML helper (build tag nvmlmock); release binaries do not link it.
package mocknvml

import (
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
)

// DGXA100 returns go-nvml's dgxa100 mock with each device's GetPciInfo reporting its bus id (the
// mock fills in only the PCI device id there), in NVML's own form: an 8-digit domain, upper-case
// hex ("00000000:01:00.0"), which the backend must normalise.
func DGXA100() *dgxa100.Server {
	s := dgxa100.New()
	for _, d := range s.Devices {
		d := d.(*dgxa100.Device)
		d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
			p := nvml.PciInfo{PciDeviceId: 0x20B010DE}
			copy(p.BusId[:], "0000"+strings.ToUpper(d.PciBusID))
			return p, nvml.SUCCESS
		}
	}
	return s
}
