package domains

import (
	"fmt"

	"libvirt.org/go/libvirtxml"

	"github.com/vgpu-host/vgpu-host/host"
)

// MaxHotplugSlots bounds spec.hotplugSlots: a q35 guest has room for far more root ports, but
// every port costs the guest firmware bus numbers and I/O space.
const MaxHotplugSlots = 32

// IsQ35 reports whether machine (spec.machine, or a domain's os type machine) is a q35
// machine: the only one whose PCIe root ports vgpu-host hotplugs into.
func IsQ35(machine string) bool { return isQ35(machine) }

// hotplugSlots checks spec.hotplugSlots.
func (v *validator) hotplugSlots() {
	n := v.vm.Spec.HotplugSlots
	switch {
	case n < 0 || n > MaxHotplugSlots:
		v.add("spec.hotplugSlots", "%d: want 0 to %d empty PCIe root ports kept for hotplug", n, MaxHotplugSlots)
	case n > 0 && !isQ35(v.vm.Spec.Machine):
		v.add("spec.hotplugSlots", "machine %s has no PCIe root ports to keep free: hotplug needs machine q35", v.vm.Spec.Machine)
	}
}

// stepHotplugSlots adds spec.hotplugSlots empty pcie-root-port controllers after the GPUs'
// ports, for `vgpu-host attach` to plug a device into a running guest (libvirt cannot add a
// root port to one). None by default: a domain without them is byte-for-byte what it was.
func stepHotplugSlots(p *Builder, d *libvirtxml.Domain) error {
	for i := 0; i < p.VM.Spec.HotplugSlots; i++ {
		idx := p.nextRootPort
		p.nextRootPort++
		d.Devices.Controllers = append(d.Devices.Controllers, libvirtxml.DomainController{
			Type: "pci", Index: uintp(idx), Model: "pcie-root-port",
		})
	}
	return nil
}

// From makes the numbering continue at mdev and vendor: a hotplug numbers its instance after
// those the VM holds already.
func (n *Numbering) From(mdev, vendor int) { n.mdev, n.vendor = mdev, vendor }

// HotplugDevices renders the devices vm's allocation gives the guest, for a hotplug into an
// existing domain: the hostdevs without guest addresses (the caller places them) and the
// video devices, none of them primary (the domain has its own).
func HotplugDevices(vm *VM, alloc *Allocation) ([]libvirtxml.DomainHostdev, []libvirtxml.DomainVideo, error) {
	p := &Builder{VM: vm, Alloc: alloc, nextRootPort: 1, nextSlot: 0x10}
	d := &libvirtxml.Domain{Devices: &libvirtxml.DomainDeviceList{}}
	var v video
	for i, ga := range alloc.GPUs {
		k, ok := kinds.Get()[ga.Kind]
		if !ok || i >= len(vm.Spec.GPUs) {
			return nil, nil, fmt.Errorf("spec.gpus[%d]: unknown allocation kind %q: %w", i, ga.Kind, host.ErrInvalid)
		}
		if err := k.render(p, vm.Spec.GPUs[i], ga, d, &v); err != nil {
			return nil, nil, fmt.Errorf("spec.gpus[%d]: %w", i, err)
		}
	}
	hds := d.Devices.Hostdevs
	for i := range hds {
		hds[i].Address = nil
	}
	var videos []libvirtxml.DomainVideo
	if v.virtio != nil {
		vid := VirtioVideo(*v.virtio)
		vid.Model.Primary = ""
		videos = append(videos, vid)
	}
	return hds, videos, nil
}
