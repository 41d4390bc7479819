package domains

import (
	"fmt"
	"slices"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/vgpu"
)

// HostDeviceError is a devices.nics[] or devices.usb[] entry this host cannot give the guest
// (Resolve with ResolveOptions.HostDevices). It names the spec field and wraps the class
// (host.ErrNotFound, host.ErrInvalid, host.ErrRefused); unlike a GPU that matches nothing, it
// is never about devices other VMs hold.
type HostDeviceError struct{ Err error }

func (e *HostDeviceError) Error() string { return e.Err.Error() }

// Unwrap returns the error with its class.
func (e *HostDeviceError) Unwrap() error { return e.Err }

// TakesDevices reports whether vm may claim host devices when it is resolved against inv: a
// gpus[] entry of a kind other than virtio-gpu (or one that names no kind: resolving it fails)
// on a host with GPUs or mdev parents to give, or an SR-IOV NIC VF. A VM that takes none cannot
// meet another domain's devices, so apply asks libvirt for those only when this holds (a
// fallback spec on a host without GPUs, the common image-pipeline case, asks nothing).
func (vm *VM) TakesDevices(inv *host.Inventory) bool {
	if inv != nil && len(inv.Devices) == 0 && len(inv.MdevParents) == 0 {
		return slices.ContainsFunc(vm.Spec.Devices.NICs, func(n NIC) bool { return n.Type == "hostdev" })
	}
	for _, g := range vm.Spec.GPUs {
		if k, err := kindFor(g); err != nil || k.Name() != vgpu.VirtioGPU {
			return true
		}
	}
	return slices.ContainsFunc(vm.Spec.Devices.NICs, func(n NIC) bool { return n.Type == "hostdev" })
}

// resolveNICVFs checks the SR-IOV NIC VFs the spec gives the guest (devices.nics[] of type
// hostdev), so two VMs never get one VF: each must exist, be a VF, and be on vfio-pci already
// (the domain says managed='no': libvirt binds nothing). Their claims are the allocation's.
func resolveNICVFs(root host.Root, vm *VM) ([]host.Address, error) {
	var out []host.Address
	for i, n := range vm.Spec.Devices.NICs {
		if n.Type != "hostdev" {
			continue
		}
		field := fmt.Sprintf("spec.devices.nics[%d].vf", i)
		a, err := host.ParseAddress(n.VF)
		if err != nil {
			return nil, &HostDeviceError{fmt.Errorf("%s: %w: %w", field, err, host.ErrInvalid)}
		}
		fl, err := host.ReadFunctionLinks(root, a)
		if err != nil {
			return nil, &HostDeviceError{fmt.Errorf("%s: %w", field, err)}
		}
		if fl.PhysFn == nil {
			return nil, &HostDeviceError{fmt.Errorf("%s: %s is not an SR-IOV VF (no physfn): give one of its PF's VFs (vgpu-host vf list): %w", field, a, host.ErrInvalid)}
		}
		if fl.Driver != "vfio-pci" {
			drv := fl.Driver
			if drv == "" {
				drv = "no driver"
			}
			return nil, &HostDeviceError{fmt.Errorf("%s: VF %s is on %s, not vfio-pci: run vgpu-host vf enable %s --count N --driver vfio-pci (or vgpu-host bind %s): %w",
				field, a, drv, fl.PhysFn, a, host.ErrRefused)}
		}
		out = append(out, a)
	}
	return out, nil
}

// checkUSB finds every host USB device the spec names, so a device that is not plugged in
// fails plan (exit 6, naming it) instead of the guest's start.
func checkUSB(root host.Root, vm *VM) error {
	want := vm.Spec.Devices.USB
	if len(want) == 0 {
		return nil
	}
	have, err := host.USBDevices(root)
	if err != nil {
		return &HostDeviceError{err}
	}
	for i, u := range want {
		found := slices.ContainsFunc(have, func(h host.USBDevice) bool {
			if u.Vendor != "" {
				return h.Vendor == u.Vendor && h.Product == u.Product
			}
			return h.Bus == u.Bus && h.Device == u.Device
		})
		if !found {
			return &HostDeviceError{fmt.Errorf("spec.devices.usb[%d]: no USB device %s on this host (%d USB devices; lsusb lists them; a device's bus/device number changes when it is plugged again): %w",
				i, u, len(have), host.ErrNotFound)}
		}
	}
	return nil
}

// nicClaims are the claims of the allocation's NIC VFs: whole PCI functions, detail "nic".
func (a *Allocation) nicClaims() []vgpu.Claim {
	var out []vgpu.Claim
	for _, vf := range a.NICVFs {
		out = append(out, vgpu.Claim{Kind: vgpu.ClaimPCI, ID: vf.String(), Detail: "nic"})
	}
	return out
}

// Storage returns the files of vm's disks and its seed ISO path for opts: those Resolve
// listed (ResolveOptions.ImagesDir) when they are for the same images directory, else
// computed now.
func (a *Allocation) Storage(vm *VM, opts BuildOptions) ([]DiskFile, string) {
	if a != nil && a.storageDir != "" && a.storageDir == opts.imagesDir() {
		return a.Disks, a.SeedISO
	}
	return vm.DiskFiles(opts), vm.SeedISOPath(opts)
}
