package virt

import (
	"strings"

	"libvirt.org/go/libvirtxml"

	"github.com/vgpu-host/vgpu-host/host"
)

// Hostdevs are the host devices a domain's XML gives its guest.
type Hostdevs struct {
	// PCI are the source addresses of PCI hostdevs (passthrough, VFs, vendor-VFIO VFs).
	PCI []host.Address
	// Mdevs are the UUIDs of mdev hostdevs, lower case.
	Mdevs []string
}

// DomainHostdevs reads the hostdevs of a domain XML: the one reader of what a domain holds,
// for lifecycle (foreign domains' devices), mdev (which domain uses an instance) and the
// agent's drift watcher. ok is false when the XML does not parse or has no devices.
func DomainHostdevs(x string) (hd Hostdevs, ok bool) {
	var d libvirtxml.Domain
	if d.Unmarshal(x) != nil || d.Devices == nil {
		return hd, false
	}
	for _, h := range d.Devices.Hostdevs {
		if s := h.SubsysPCI; s != nil && s.Source != nil && s.Source.Address != nil {
			a := s.Source.Address
			hd.PCI = append(hd.PCI, host.Address{Domain: uint32(orZero(a.Domain)), Bus: uint8(orZero(a.Bus)), Device: uint8(orZero(a.Slot)), Function: uint8(orZero(a.Function))})
		}
		if m := h.SubsysMDev; m != nil && m.Source != nil && m.Source.Address != nil {
			hd.Mdevs = append(hd.Mdevs, strings.ToLower(m.Source.Address.UUID))
		}
	}
	return hd, true
}

// orZero is an address part libvirt leaves out: 0, as libvirt reads it.
func orZero(p *uint) uint {
	if p == nil {
		return 0
	}
	return *p
}
