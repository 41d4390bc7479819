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
	// Devices are the PCI and mdev hostdevs one by one, in the domain's order.
	Devices []Hostdev
}

// Hostdev is one PCI or mdev hostdev of a domain.
type Hostdev struct {
	// Type is the hostdev's type: "pci" or "mdev".
	Type string
	// Alias is libvirt's device alias (the QEMU qdev id, "hostdev0"); "" in an inactive XML.
	Alias string
	// PCI is the source address of a PCI hostdev (nil for an mdev); PCIComplete is false when
	// the XML leaves out its bus, slot or function (read as 0, as libvirt reads them).
	PCI         *host.Address
	PCIComplete bool
	// Mdev is the UUID of an mdev hostdev, lower case ("" for a PCI one).
	Mdev string
}

// DomainHostdevs reads the hostdevs of a domain XML: the one reader of what a domain holds,
// for lifecycle (foreign domains' devices, verify), mdev (which domain uses an instance) and
// the agent's drift watcher. ok is false when the XML does not parse or has no devices.
func DomainHostdevs(x string) (hd Hostdevs, ok bool) {
	var d libvirtxml.Domain
	if d.Unmarshal(x) != nil || d.Devices == nil {
		return hd, false
	}
	return HostdevsOf(&d), true
}

// HostdevsOf is DomainHostdevs of a domain parsed already.
func HostdevsOf(d *libvirtxml.Domain) (hd Hostdevs) {
	if d.Devices == nil {
		return hd
	}
	for _, h := range d.Devices.Hostdevs {
		var one Hostdev
		if h.Alias != nil {
			one.Alias = h.Alias.Name
		}
		switch {
		case h.SubsysPCI != nil:
			one.Type = "pci"
			if s := h.SubsysPCI.Source; s != nil && s.Address != nil {
				a := s.Address
				addr := host.Address{Domain: uint32(orZero(a.Domain)), Bus: uint8(orZero(a.Bus)), Device: uint8(orZero(a.Slot)), Function: uint8(orZero(a.Function))}
				hd.PCI = append(hd.PCI, addr)
				one.PCI, one.PCIComplete = &addr, a.Bus != nil && a.Slot != nil && a.Function != nil
			}
		case h.SubsysMDev != nil:
			one.Type = "mdev"
			if m := h.SubsysMDev; m.Source != nil && m.Source.Address != nil {
				one.Mdev = strings.ToLower(m.Source.Address.UUID)
				hd.Mdevs = append(hd.Mdevs, one.Mdev)
			}
		default:
			continue
		}
		hd.Devices = append(hd.Devices, one)
	}
	return hd
}

// orZero is an address part libvirt leaves out: 0, as libvirt reads it.
func orZero(p *uint) uint {
	if p == nil {
		return 0
	}
	return *p
}
