package domains

import (
	"fmt"
	"net"
	"strings"

	"libvirt.org/go/libvirtxml"

	"github.com/vgpu-host/vgpu-host/host"
)

// wantTPM reports whether the VM gets an emulated TPM 2.0 (spec.tpm; default on for windows11).
func wantTPM(vm *VM) bool {
	if vm.Spec.TPM != nil {
		return *vm.Spec.TPM
	}
	return vm.Spec.OS == "windows11"
}

// stepGuestOS adds what Windows 11 needs beyond a Linux guest: a TPM 2.0 (swtpm, also with
// spec.tpm), Hyper-V enlightenments, and a clock in local time. Secure Boot with enrolled
// keys is stepFirmware's.
//
// The enlightenments are an explicit list, not <hyperv mode='passthrough'>: passthrough gives
// the guest whatever the host's KVM offers, so the same spec would render a different guest on
// another host, and libvirt accepts it only with KVM. The list is the set virt-manager and
// Proxmox give Windows guests: relaxed, vapic, spinlocks (8191 retries), vpindex, synic,
// stimer (with direct mode), reset, frequencies, tlbflush, ipi, and the hypervclock timer
// stimer needs. They need KVM: under qemu (TCG) they are left out, and Resolve notes it.
func stepGuestOS(p *Builder, d *libvirtxml.Domain) error {
	vm := p.VM
	if wantTPM(vm) {
		d.Devices.TPMs = append(d.Devices.TPMs, libvirtxml.DomainTPM{
			Model:   "tpm-crb",
			Backend: &libvirtxml.DomainTPMBackend{Emulator: &libvirtxml.DomainTPMBackendEmulator{Version: "2.0"}},
		})
	}
	if vm.Spec.OS != "windows11" {
		return nil
	}
	d.Clock.Offset = "localtime"
	if p.Alloc.VirtType == "qemu" {
		return nil // QEMU offers the Hyper-V enlightenments with KVM only ("kernel doesn't allow setting HyperV VP_INDEX")
	}
	on := func() *libvirtxml.DomainFeatureState { return &libvirtxml.DomainFeatureState{State: "on"} }
	hv := d.Features.HyperV
	if hv == nil {
		hv = &libvirtxml.DomainFeatureHyperV{}
		d.Features.HyperV = hv
	}
	hv.Mode = "custom"
	hv.Relaxed, hv.VAPIC, hv.VPIndex, hv.Synic = on(), on(), on(), on()
	hv.Spinlocks = &libvirtxml.DomainFeatureHyperVSpinlocks{DomainFeatureState: *on(), Retries: 8191}
	hv.STimer = &libvirtxml.DomainFeatureHyperVSTimer{DomainFeatureState: *on()}
	hv.Reset, hv.Frequencies, hv.IPI = on(), on(), on()
	hv.TLBFlush = &libvirtxml.DomainFeatureHyperVTLBFlush{DomainFeatureState: *on()}
	d.Clock.Timer = append(d.Clock.Timer, libvirtxml.DomainTimer{Name: "hypervclock", Present: "yes"})
	return nil
}

// stepCPUPlacement pins vCPUs and the emulator as Resolve chose (spec.cpu.pin).
func stepCPUPlacement(p *Builder, d *libvirtxml.Domain) error {
	a := p.Alloc
	if len(a.VCPUPins) == 0 && a.EmulatorPin == "" {
		return nil
	}
	if len(a.VCPUPins) != 0 && len(a.VCPUPins) != p.VM.Spec.VCPUs {
		return fmt.Errorf("spec.cpu.pin: %d pins for %d vcpus: %w", len(a.VCPUPins), p.VM.Spec.VCPUs, host.ErrInvalid)
	}
	ct := &libvirtxml.DomainCPUTune{}
	for i, c := range a.VCPUPins {
		ct.VCPUPin = append(ct.VCPUPin, libvirtxml.DomainCPUTuneVCPUPin{VCPU: uint(i), CPUSet: c})
	}
	if a.EmulatorPin != "" {
		ct.EmulatorPin = &libvirtxml.DomainCPUTuneEmulatorPin{CPUSet: a.EmulatorPin}
	}
	d.CPUTune = ct
	return nil
}

// stepVirtioWin attaches the virtio-win driver ISO as a further CD-ROM.
func stepVirtioWin(p *Builder, d *libvirtxml.Domain) error {
	p.addCDROM(d, p.VM.Spec.VirtioWin)
	return nil
}

// stepDevices adds spec.devices: the USB controller, evdev inputs, the Looking
// Glass ivshmem, further NICs and a sound device.
func stepDevices(p *Builder, d *libvirtxml.Domain) error {
	dv := p.VM.Spec.Devices
	if m := dv.USBController; m != "" {
		c := libvirtxml.DomainController{Type: "usb", Index: uintp(0), Model: m}
		if m == "qemu-xhci" || m == "nec-xhci" {
			c.USB = &libvirtxml.DomainControllerUSB{Port: uintp(15)}
		}
		d.Devices.Controllers = append(d.Devices.Controllers, c)
	}
	for _, e := range dv.Evdev {
		src := &libvirtxml.DomainInputSourceEVDev{Dev: e.Path, GrabToggle: e.GrabToggle}
		if e.Grab {
			src.Grab, src.Repeat = "all", "on"
		}
		if src.GrabToggle == "" {
			src.GrabToggle = "ctrl-ctrl"
		}
		d.Devices.Inputs = append(d.Devices.Inputs, libvirtxml.DomainInput{Type: "evdev", Source: &libvirtxml.DomainInputSource{EVDev: src}})
	}
	if lg := dv.LookingGlass; lg != nil {
		w, h, ok := parseResolution(lg.Resolution)
		if !ok {
			return fmt.Errorf("spec.devices.lookingGlass.resolution %q: %w", lg.Resolution, host.ErrInvalid)
		}
		d.Devices.Shmems = append(d.Devices.Shmems, libvirtxml.DomainShmem{
			Name:  "looking-glass",
			Model: &libvirtxml.DomainShmemModel{Type: "ivshmem-plain"},
			Size:  &libvirtxml.DomainShmemSize{Value: uint(LookingGlassMiB(w, h)), Unit: "M"},
		})
	}
	for _, n := range dv.NICs {
		d.Devices.Interfaces = append(d.Devices.Interfaces, nicInterface(n))
	}
	if dv.Sound != "" {
		d.Devices.Sounds = append(d.Devices.Sounds, libvirtxml.DomainSound{Model: dv.Sound})
	}
	for _, u := range dv.USB {
		src := &libvirtxml.DomainHostdevSubsysUSBSource{}
		if u.Vendor != "" {
			src.Vendor = &libvirtxml.DomainHostDevProductVendorID{ID: "0x" + u.Vendor}
			src.Product = &libvirtxml.DomainHostDevProductVendorID{ID: "0x" + u.Product}
		} else {
			src.Address = &libvirtxml.DomainAddressUSB{Bus: uintp(uint(u.Bus)), Device: uintp(uint(u.Device))}
		}
		d.Devices.Hostdevs = append(d.Devices.Hostdevs, libvirtxml.DomainHostdev{
			Managed:   "yes",
			SubsysUSB: &libvirtxml.DomainHostdevSubsysUSB{Source: src},
		})
	}
	return nil
}

// nicInterface is the interface of one NIC (spec.network or a spec.devices.nics entry).
func nicInterface(n NIC) libvirtxml.DomainInterface {
	iface := libvirtxml.DomainInterface{Model: &libvirtxml.DomainInterfaceModel{Type: "virtio"}}
	if n.Model != "" {
		iface.Model.Type = n.Model
	}
	if n.MAC != "" {
		// libvirt parses only aa:bb:cc:dd:ee:ff; Validate accepts what net.ParseMAC does
		// (aa-bb-..., aabb.ccdd.eeff), so write the canonical form.
		mac := strings.ToLower(n.MAC)
		if hw, err := net.ParseMAC(n.MAC); err == nil {
			mac = hw.String()
		}
		iface.MAC = &libvirtxml.DomainInterfaceMAC{Address: mac}
	}
	switch n.Type {
	case "hostdev":
		a, _ := host.ParseAddress(n.VF) // Validate checked it
		iface.Model = nil
		iface.Managed = "no"
		iface.Source = &libvirtxml.DomainInterfaceSource{Hostdev: &libvirtxml.DomainInterfaceSourceHostdev{
			PCI: &libvirtxml.DomainHostdevSubsysPCISource{Address: &libvirtxml.DomainAddressPCI{
				Domain: uintp(uint(a.Domain)), Bus: uintp(uint(a.Bus)), Slot: uintp(uint(a.Device)), Function: uintp(uint(a.Function))}}}}
	case "bridge":
		iface.Source = &libvirtxml.DomainInterfaceSource{Bridge: &libvirtxml.DomainInterfaceSourceBridge{Bridge: n.Bridge}}
	case "macvtap":
		mode := n.Mode
		if mode == "" {
			mode = "bridge"
		}
		iface.Source = &libvirtxml.DomainInterfaceSource{Direct: &libvirtxml.DomainInterfaceSourceDirect{Dev: n.Dev, Mode: mode}}
	default:
		iface.Source = &libvirtxml.DomainInterfaceSource{Network: &libvirtxml.DomainInterfaceSourceNetwork{Network: n.Network}}
	}
	return iface
}

// stepBoot applies spec.boot as per-device boot order (<boot order='N'/>), which OVMF and
// SeaBIOS both honour, instead of <os><boot dev=...>: cdrom is the first CD-ROM of
// spec.disks (the installer; else the virtio-win ISO), disk the first disk, network the first
// NIC. libvirt refuses the two forms together, so <os><boot> goes.
func stepBoot(p *Builder, d *libvirtxml.Domain) error {
	if len(p.VM.Spec.Boot) == 0 {
		return nil
	}
	d.OS.BootDevices = nil
	for i, b := range p.VM.Spec.Boot {
		order := &libvirtxml.DomainDeviceBoot{Order: uint(i + 1)}
		switch b {
		case "disk", "cdrom":
			found := false
			for j := range d.Devices.Disks {
				dk := &d.Devices.Disks[j]
				if dk.Device == "cdrom" && dk.Source != nil && dk.Source.File != nil && dk.Source.File.File == p.seed {
					continue // the cloud-init seed is data, not a boot CD
				}
				if dk.Device == b {
					d.Devices.Disks[j].Boot, found = order, true
					break
				}
			}
			if !found {
				return fmt.Errorf("spec.boot[%d]: the VM has no %s: %w", i, b, host.ErrInvalid)
			}
		case "network":
			if len(d.Devices.Interfaces) == 0 {
				return fmt.Errorf("spec.boot[%d]: the VM has no NIC: %w", i, host.ErrInvalid)
			}
			d.Devices.Interfaces[0].Boot = order
		default:
			return fmt.Errorf("spec.boot[%d] %q: %w", i, b, host.ErrInvalid)
		}
	}
	return nil
}
