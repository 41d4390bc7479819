package domains

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/vgpu-host/vgpu-host/cloudinit"
	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/internal/fetch"
)

var (
	resolutionRE = lazyRE(`^([1-9][0-9]{2,4})x([1-9][0-9]{2,4})$`)
	usbIDRE      = lazyRE(`^[0-9a-f]{4}$`)
)

// blankOrVolume checks a disk made blank in the pool, or taken from an existing pool volume.
func (v *validator) blankOrVolume(p string, d Disk) {
	if d.Blank {
		v.size(p+".size", d.Size, 1<<20, MaxDiskSize, true)
		v.absPath(p+".overlay", d.Overlay)
		if d.Device == "cdrom" {
			v.add(p+".blank", "a cdrom cannot be blank")
		}
		return
	}
	if !domainNameRE.MatchString(d.Volume) || len(d.Volume) > 255 {
		v.add(p+".volume", "%q is not a volume name of the pool", d.Volume)
	}
	if !d.Size.IsZero() {
		v.add(p+".size", "only blank disks and disks with an image (overlay) have a size")
	}
	if d.Overlay != "" {
		v.add(p+".overlay", "only disks with an image have an overlay")
	}
}

// guestOS checks spec.os, virtioWin, tpm and boot.
func (v *validator) guestOS() {
	s := &v.vm.Spec
	if s.OS != "" {
		v.oneOf("spec.os", s.OS, "linux", "windows11")
	}
	if s.OS == "windows11" {
		if s.Firmware == "bios" {
			v.add("spec.firmware", "windows11 needs firmware uefi (Secure Boot)")
		}
		if !isQ35(s.Machine) {
			v.add("spec.machine", "windows11 needs machine q35 (Secure Boot needs SMM)")
		}
		if s.TPM != nil && !*s.TPM {
			v.add("spec.tpm", "windows11 needs a TPM 2.0")
		}
	}
	v.absPath("spec.virtioWin", s.VirtioWin)
	seen := map[string]bool{}
	for i, b := range s.Boot {
		p := fmt.Sprintf("spec.boot[%d]", i)
		v.oneOf(p, b, "disk", "cdrom", "network")
		if seen[b] {
			v.add(p, "%q is listed twice", b)
		}
		seen[b] = true
		if b == "cdrom" && !hasCDROM(v.vm) {
			v.add(p, "the VM has no cdrom: add a disk with device: cdrom, or virtioWin")
		}
		if b == "network" && s.Network.Type == "none" && len(s.Devices.NICs) == 0 {
			v.add(p, "the VM has no NIC")
		}
	}
}

func hasCDROM(vm *VM) bool {
	for _, d := range vm.Spec.Disks {
		if d.Device == "cdrom" {
			return true
		}
	}
	return vm.Spec.VirtioWin != ""
}

// cpuPlacement checks spec.cpu.topology and spec.cpu.pin.
func (v *validator) cpuPlacement() {
	s := &v.vm.Spec
	if t := s.CPU.Topology; t != nil {
		for name, n := range map[string]int{"sockets": t.Sockets, "cores": t.Cores, "threads": t.Threads} {
			if n < 0 || n > MaxVCPUs {
				v.add("spec.cpu.topology."+name, "%d is out of range 1..%d", n, MaxVCPUs)
			}
		}
		if _, err := topology(s.VCPUs, t); err != nil {
			v.add("spec.cpu.topology", "%v", err)
		}
	}
	if pin := s.CPU.Pin; pin != nil {
		switch {
		case pin.err != nil:
			v.add("spec.cpu.pin", "%v", pin.err)
		case pin.Auto && s.NUMA == "none":
			v.add("spec.cpu.pin", "auto pins to the GPU's NUMA node; it cannot go with numa: none")
		case !pin.Auto && len(pin.CPUs) != s.VCPUs:
			v.add("spec.cpu.pin", "%d host CPUs for %d vcpus: give one per vCPU", len(pin.CPUs), s.VCPUs)
		}
	}
}

// topology fills the defaults of t and checks that it multiplies out to vcpus.
func topology(vcpus int, t *Topology) (Topology, error) {
	out := Topology{Sockets: 1, Threads: 1}
	if t == nil {
		out.Cores = vcpus
		return out, nil
	}
	if t.Sockets > 0 {
		out.Sockets = t.Sockets
	}
	if t.Threads > 0 {
		out.Threads = t.Threads
	}
	out.Cores = t.Cores
	if out.Cores == 0 {
		out.Cores = vcpus / (out.Sockets * out.Threads)
	}
	if out.Sockets*out.Cores*out.Threads != vcpus {
		return out, fmt.Errorf("sockets %d x cores %d x threads %d = %d, but vcpus is %d", out.Sockets, out.Cores, out.Threads, out.Sockets*out.Cores*out.Threads, vcpus)
	}
	return out, nil
}

// devices checks spec.devices.
func (v *validator) devices() {
	dv := &v.vm.Spec.Devices
	if dv.USBController != "" {
		v.oneOf("spec.devices.usbController", dv.USBController, "qemu-xhci", "nec-xhci", "ich9-ehci1", "none")
	}
	if dv.USBController == "none" && graphicsType(v.vm) != "none" {
		v.add("spec.devices.usbController", "none leaves the graphics' USB tablet without a bus; set graphics type none too")
	}
	for i, e := range dv.Evdev {
		p := fmt.Sprintf("spec.devices.evdev[%d]", i)
		if e.Path == "" {
			v.add(p+".path", "required: a /dev/input/by-id/*-event-* device")
		}
		v.absPath(p+".path", e.Path)
		if e.GrabToggle != "" {
			v.oneOf(p+".grabToggle", e.GrabToggle, "ctrl-ctrl", "alt-alt", "shift-shift", "meta-meta", "scrolllock", "ctrl-scrolllock")
		}
	}
	if lg := dv.LookingGlass; lg != nil {
		if _, _, ok := parseResolution(lg.Resolution); !ok {
			v.add("spec.devices.lookingGlass.resolution", "%q: want WIDTHxHEIGHT, e.g. 1920x1080", lg.Resolution)
		}
	}
	for i, n := range dv.NICs {
		v.nic(fmt.Sprintf("spec.devices.nics[%d]", i), n)
	}
	if dv.Sound != "" {
		v.oneOf("spec.devices.sound", dv.Sound, "ich9", "ich6", "ac97")
	}
	seen := map[string]int{}
	for i, u := range dv.USB {
		p := fmt.Sprintf("spec.devices.usb[%d]", i)
		byID, byAddr := u.Vendor != "" || u.Product != "", u.Bus != 0 || u.Device != 0
		switch {
		case byID && byAddr:
			v.add(p, "give vendor and product, or bus and device, not both")
			continue
		case byID:
			if !usbIDRE.MatchString(u.Vendor) || !usbIDRE.MatchString(u.Product) {
				v.add(p, "vendor %q product %q: want two 4-digit hex ids, as lsusb shows them (046d:c52b)", u.Vendor, u.Product)
				continue
			}
		case byAddr:
			if u.Bus < 1 || u.Bus > 255 || u.Device < 1 || u.Device > 127 {
				v.add(p, "bus %d device %d: want lsusb's numbers (bus 1-255, device 1-127)", u.Bus, u.Device)
				continue
			}
		default:
			v.add(p, "give vendor and product (046d:c52b) or bus and device (lsusb's \"Bus 001 Device 004\")")
			continue
		}
		if j, dup := seen[u.String()]; dup {
			v.add(p, "%s is listed twice (also spec.devices.usb[%d])", u, j)
		}
		seen[u.String()] = i
	}
	if len(dv.USB) > 0 && dv.USBController == "none" {
		v.add("spec.devices.usb", "host USB devices need a USB controller: drop usbController: none")
	}
}

func parseResolution(s string) (w, h uint64, ok bool) {
	m := resolutionRE.FindStringSubmatch(s)
	if m == nil {
		return 0, 0, false
	}
	w, _ = strconv.ParseUint(m[1], 10, 64)
	h, _ = strconv.ParseUint(m[2], 10, 64)
	return w, h, w <= 16384 && h <= 16384
}

func (v *validator) nic(p string, n NIC) {
	switch n.Type {
	case "network":
		if n.Network == "" || !domainNameRE.MatchString(n.Network) {
			v.add(p+".network", "%q is not a libvirt network name", n.Network)
		}
	case "bridge":
		if n.Bridge == "" || len(n.Bridge) > 15 || !ifnameRE.MatchString(n.Bridge) {
			v.add(p+".bridge", "%q is not a Linux interface name", n.Bridge)
		}
	case "macvtap":
		if n.Dev == "" || len(n.Dev) > 15 || !ifnameRE.MatchString(n.Dev) {
			v.add(p+".dev", "%q is not a Linux interface name", n.Dev)
		}
		if n.Mode != "" {
			v.oneOf(p+".mode", n.Mode, "bridge", "vepa", "private", "passthrough")
		}
	case "hostdev":
		if _, err := host.ParseAddress(n.VF); err != nil {
			v.add(p+".vf", "%q: want the SR-IOV NIC VF's PCI address, e.g. 0000:3b:02.1 (vgpu-host vf list)", n.VF)
		}
		if n.Model != "" {
			v.add(p+".model", "a VF is its own device: no model")
		}
	default:
		v.oneOf(p+".type", n.Type, "network", "bridge", "macvtap", "hostdev")
	}
	if n.VF != "" && n.Type != "hostdev" {
		v.add(p+".vf", "only for type hostdev")
	}
	if n.Network != "" && n.Type != "network" {
		v.add(p+".network", "only for type network")
	}
	if n.Bridge != "" && n.Type != "bridge" {
		v.add(p+".bridge", "only for type bridge")
	}
	if (n.Dev != "" || n.Mode != "") && n.Type != "macvtap" {
		v.add(p+".dev", "dev and mode are only for type macvtap")
	}
	if n.Model != "" {
		v.oneOf(p+".model", n.Model, "virtio", "e1000e", "rtl8139")
	}
	if n.MAC != "" {
		hw, err := net.ParseMAC(n.MAC)
		if err != nil || len(hw) != 6 || hw[0]&1 == 1 {
			v.add(p+".mac", "%q is not a unicast MAC address", n.MAC)
		}
	}
}

// xmlPatches checks each patch's shape and path (the document is checked when it is built).
func (v *validator) xmlPatches() {
	for i, p := range v.vm.Spec.XMLPatches {
		if err := p.check(); err != nil {
			v.add(fmt.Sprintf("spec.xmlPatches[%d]", i), "%v", err)
		}
	}
}

// cloudInitContent checks what cloud-init will make of the seed's files: user-data it would
// ignore, meta-data or network-config that is not the YAML it reads, and sshAuthorizedKeys.
func (v *validator) cloudInitContent(ci *CloudInit) {
	if err := cloudinit.CheckUserData(ci.UserData); err != nil {
		v.add("spec.cloudInit.userData", "%v", err)
	}
	if err := cloudinit.CheckMetaData(ci.MetaData); err != nil {
		v.add("spec.cloudInit.metaData", "%v", err)
	}
	if err := cloudinit.CheckNetworkConfig(ci.NetworkConfig); err != nil {
		v.add("spec.cloudInit.networkConfig", "%v", err)
	}
	for i, k := range ci.SSHAuthorizedKeys {
		p := fmt.Sprintf("spec.cloudInit.sshAuthorizedKeys[%d]", i)
		if !cloudinit.IsPublicKey(k) {
			if !strings.HasPrefix(k, "/") {
				v.add(p, "%q: give an OpenSSH public key line (ssh-ed25519 AAAA…) or the absolute path of a .pub file", host.Clip(k, 40))
				continue
			}
			v.absPath(p, k)
		}
	}
	if len(ci.SSHAuthorizedKeys) > 0 && strings.TrimSpace(ci.UserData) != "" {
		if first, _, _ := strings.Cut(ci.UserData, "\n"); strings.TrimSpace(first) != "#cloud-config" {
			v.add("spec.cloudInit.sshAuthorizedKeys", "needs userData to be #cloud-config (or empty): the keys are added to its ssh_authorized_keys")
		}
	}
}

// fetched checks a cdrom downloaded into the pool (url + checksum).
func (v *validator) fetched(p string, d Disk) {
	if _, err := fetch.CheckURL(d.URL); err != nil {
		v.add(p+".url", "%v", err)
	}
	if d.Device != "cdrom" {
		v.add(p+".device", "url is for an installer ISO: say device: cdrom")
	}
	if d.Checksum == "" {
		v.add(p+".checksum", "required with url: the sha256:HEX (or sha512:HEX) the distribution publishes, so a changed or damaged download is never booted")
	} else if _, _, err := fetch.ParseChecksum(d.Checksum); err != nil {
		v.add(p+".checksum", "%v", err)
	}
	if !d.Size.IsZero() || d.Overlay != "" || d.Format != "" && d.Format != "raw" {
		v.add(p, "a fetched ISO has no size, overlay or format")
	}
}
