package domains

import (
	"libvirt.org/go/libvirtxml"

	"github.com/vgpu-host/vgpu-host/host"
)

// Each hostdev kind is a pure function from its inputs to a libvirtxml.DomainHostdev.

// PCIHostdev is a whole PCI function given to the guest through VFIO:
//
//	<hostdev mode='subsystem' type='pci' managed='yes'>
//	  <driver name='vfio'/>
//	  <source><address domain='0x0000' bus='0x41' slot='0x00' function='0x0'/></source>
//	</hostdev>
//
// managed='yes' lets libvirt bind the function to vfio-pci at start and give it back at stop.
// The driver element names the backend explicitly: libvirt otherwise probes /dev/vfio, and
// domxml-to-native on a host without VFIO refuses the device.
func PCIHostdev(src host.Address, managed bool) libvirtxml.DomainHostdev {
	m := "no"
	if managed {
		m = "yes"
	}
	return libvirtxml.DomainHostdev{
		Managed: m,
		SubsysPCI: &libvirtxml.DomainHostdevSubsysPCI{
			Driver: &libvirtxml.DomainHostdevSubsysPCIDriver{Name: "vfio"},
			Source: &libvirtxml.DomainHostdevSubsysPCISource{Address: pciAddress(src)},
		},
	}
}

// GuestSlot is where a host slot's functions appear in the guest: bus and slot, with the
// host function numbers kept.
type GuestSlot struct {
	Bus  uint
	Slot uint
}

// SlotHostdevs gives all functions of one host slot (a GPU and its HDMI audio / USB-C
// companions) to the guest on one guest slot, as the card looks on real hardware: the GPU at
// function 0 with multifunction='on', the companions at functions 1, 2, ... in host order. Drivers
// (NVIDIA's HDA, AMD's) expect the audio function next to the GPU. rom applies to the GPU
// function only.
func SlotHostdevs(functions []host.Address, at GuestSlot, managed bool, rom *ROM) []libvirtxml.DomainHostdev {
	out := make([]libvirtxml.DomainHostdev, 0, len(functions))
	for i, f := range functions {
		hd := PCIHostdev(f, managed)
		dom, bus, slot, fn := uint(0), at.Bus, at.Slot, uint(i)
		ga := &libvirtxml.DomainAddressPCI{Domain: &dom, Bus: &bus, Slot: &slot, Function: &fn}
		if i == 0 && len(functions) > 1 {
			ga.MultiFunction = "on"
		}
		hd.Address = &libvirtxml.DomainAddress{PCI: ga}
		if i == 0 && rom != nil && (rom.Bar != "" || rom.File != "") {
			r := &libvirtxml.DomainROM{Bar: rom.Bar}
			if rom.File != "" {
				file := rom.File
				r.File = &file
			}
			hd.ROM = r
		}
		out = append(out, hd)
	}
	return out
}

// MdevHostdev is a mediated device (a vGPU instance) by UUID:
//
//	<hostdev mode='subsystem' type='mdev' model='vfio-pci' display='on' ramfb='on'>
//	  <source><address uuid='...'/></source>
//	</hostdev>
//
// display='on' exports the vGPU's framebuffer to the VM's graphics; ramfb='on' adds a boot
// framebuffer so firmware and early boot are visible (only with display). libvirt 9.0 accepts
// both only on mdev hostdevs.
func MdevHostdev(uuid string, display, ramfb bool) libvirtxml.DomainHostdev {
	md := &libvirtxml.DomainHostdevSubsysMDev{
		Model:  "vfio-pci",
		Source: &libvirtxml.DomainHostdevSubsysMDevSource{Address: &libvirtxml.DomainAddressMDev{UUID: uuid}},
	}
	if display {
		md.Display = "on"
		if ramfb {
			md.RamFB = "on"
		}
	}
	return libvirtxml.DomainHostdev{SubsysMDev: md}
}

// VendorVFIOHostdev is an NVIDIA vendor-VFIO VF (vGPU 17+, kernel >= 6.8): the VF keeps its
// vendor driver, which already provides VFIO, so libvirt must not rebind it (managed='no').
//
//	# cat /sys/bus/pci/devices/0000:41:00.4/nvidia/current_vgpu_type
//	  557
func VendorVFIOHostdev(vf host.Address) libvirtxml.DomainHostdev {
	return PCIHostdev(vf, false)
}

// pciAddress returns a host address as libvirtxml's PCI address, for hostdev sources.
func pciAddress(a host.Address) *libvirtxml.DomainAddressPCI {
	dom, bus, slot, fn := uint(a.Domain), uint(a.Bus), uint(a.Device), uint(a.Function)
	return &libvirtxml.DomainAddressPCI{Domain: &dom, Bus: &bus, Slot: &slot, Function: &fn}
}
