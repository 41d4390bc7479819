package domains

import (
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/internal/strictyaml"
)

// Problem is one thing wrong with a spec: the field path, its YAML line (0 when unknown)
// and what is wrong.
type Problem struct {
	Path string `json:"path"`
	Line int    `json:"line,omitempty"`
	Msg  string `json:"message"`
}

func (p Problem) String() string {
	if p.Line > 0 {
		return fmt.Sprintf("line %d: %s: %s", p.Line, p.Path, p.Msg)
	}
	return fmt.Sprintf("%s: %s", p.Path, p.Msg)
}

// InvalidSpecError lists every problem Validate found. It wraps host.ErrInvalid.
type InvalidSpecError struct {
	Problems []Problem
}

func (e *InvalidSpecError) Error() string {
	s := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		s[i] = p.String()
	}
	return "invalid spec: " + strings.Join(s, "; ")
}

// Unwrap makes errors.Is(err, host.ErrInvalid) true.
func (e *InvalidSpecError) Unwrap() error { return host.ErrInvalid }

// Limits on values that would be typos rather than intent.
const (
	MaxVCPUs     = 1024
	MinMemory    = 64 << 20 // 64 MiB: less does not boot firmware
	MaxMemory    = 16 << 40 // 16 TiB
	MaxDiskSize  = 64 << 40 // 64 TiB
	MaxGPUCount  = 16
	maxNameLen   = 64
	maxStringLen = 4096
)

// domainNameRE is what vgpu-host accepts as a domain name. libvirt itself only forbids '/',
// but the name is also a file-name stem (overlay, seed ISO, NVRAM) and usually a hostname.
var domainNameRE = lazyRE(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

var (
	hexIDRE  = lazyRE(`^[0-9a-fA-F]{4}$`)
	alnumRE  = lazyRE(`^[A-Za-z0-9]+$`)
	ifnameRE = lazyRE(`^[A-Za-z0-9._-]+$`)
)

// Validate checks every field and returns a *InvalidSpecError naming each problem's field path
// (and YAML line when the VM came from Parse), or nil. It never changes vm.
func (vm *VM) Validate() error {
	v := &validator{vm: vm}
	v.check()
	if len(v.problems) == 0 {
		return nil
	}
	return &InvalidSpecError{Problems: v.problems}
}

type validator struct {
	vm       *VM
	problems []Problem
}

func (v *validator) add(path, format string, a ...any) {
	// The deepest recorded ancestor gives the best line.
	line := strictyaml.LineOf(v.vm.lines, path)
	v.problems = append(v.problems, Problem{Path: path, Line: line, Msg: fmt.Sprintf(format, a...)})
}

func (v *validator) oneOf(path, val string, allowed ...string) {
	for _, a := range allowed {
		if val == a {
			return
		}
	}
	v.add(path, "%q is not one of %s", val, strings.Join(allowed, ", "))
}

func (v *validator) size(path string, s Size, min, max uint64, required bool) {
	if s.IsZero() {
		if required {
			v.add(path, "required (e.g. 4GiB)")
		}
		return
	}
	if s.err != nil {
		v.add(path, "%v", s.err)
		return
	}
	if s.Bytes < min {
		v.add(path, "%s is too small (minimum %s)", s.Raw, human(min))
	}
	if s.Bytes > max {
		v.add(path, "%s is too large (maximum %s)", s.Raw, human(max))
	}
}

func (v *validator) text(path, s string) {
	if len(s) > maxStringLen {
		v.add(path, "longer than %d characters", maxStringLen)
	}
	v.chars(path, s, true)
}

// chars reports a character XML 1.0 cannot carry (NUL, other C0 controls, U+FFFE, U+FFFF,
// invalid UTF-8): encoding/xml would silently write U+FFFD instead, so the domain would name
// a different file or say something else. Tab and newline are allowed where lines are.
func (v *validator) chars(path, s string, lines bool) {
	for i, r := range s {
		switch {
		case r == 0:
			v.add(path, "contains a NUL character")
		case (r == '\t' || r == '\n' || r == '\r') && lines:
			continue
		case r < 0x20 || r == 0x7f:
			v.add(path, "contains the control character %U at byte %d", r, i)
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			v.add(path, "is not valid UTF-8 (byte %d)", i)
		case r == 0xFFFE || r == 0xFFFF:
			v.add(path, "contains the non-character %U", r)
		default:
			continue
		}
		return
	}
}

func (v *validator) absPath(path, p string) {
	if len(p) > maxStringLen {
		v.add(path, "longer than %d characters", maxStringLen)
	}
	v.chars(path, p, false)
	if p != "" && !filepath.IsAbs(p) {
		v.add(path, "%q must be an absolute path", p)
	} else if p != "" && (p == "/" || strings.HasSuffix(p, "/")) {
		// libvirt's schema wants a file (absFilePath: "/" and at least one more character).
		v.add(path, "%q names a directory: name the file", p)
	}
}

func human(b uint64) string {
	switch {
	case b >= 1<<40 && b%(1<<40) == 0:
		return fmt.Sprintf("%dTiB", b>>40)
	case b >= 1<<30 && b%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", b>>30)
	case b >= 1<<20 && b%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", b>>20)
	}
	return fmt.Sprintf("%dB", b)
}

// check runs every field check of the spec, top to bottom in the order docs/spec.md lists the
// fields; it is long (95 lines) because the spec is, and each line is one field's rule.
func (v *validator) check() {
	vm := v.vm
	if vm.APIVersion != APIVersion {
		v.add("apiVersion", "%q is not supported: want %q", vm.APIVersion, APIVersion)
	}
	if vm.Kind != Kind {
		v.add("kind", "%q is not supported: want %q", vm.Kind, Kind)
	}
	switch n := vm.Metadata.Name; {
	case n == "":
		v.add("metadata.name", "required")
	case len(n) > maxNameLen:
		v.add("metadata.name", "longer than %d characters", maxNameLen)
	case !domainNameRE.MatchString(n):
		v.add("metadata.name", "%q is not a valid domain name: use letters, digits, '.', '_' and '-', starting with a letter or digit", n)
	}
	v.text("metadata.description", vm.Metadata.Description)

	s := &vm.Spec
	if s.VCPUs < 1 || s.VCPUs > MaxVCPUs {
		v.add("spec.vcpus", "%d is out of range 1..%d", s.VCPUs, MaxVCPUs)
	}
	v.size("spec.memory", s.Memory, MinMemory, MaxMemory, true)
	if !s.Hugepages.IsZero() {
		v.size("spec.hugepages", s.Hugepages, 4<<10, 16<<30, false)
		if s.Hugepages.err == nil {
			switch s.Hugepages.Bytes {
			case 2 << 20, 1 << 30:
				if s.Memory.err == nil && s.Memory.Bytes%s.Hugepages.Bytes != 0 {
					v.add("spec.memory", "%s is not a multiple of the %s huge page size", s.Memory.Raw, s.Hugepages.Raw)
				}
			default:
				v.add("spec.hugepages", "%s is not an x86 huge page size: use 2MiB or 1GiB", s.Hugepages.Raw)
			}
		}
	}
	switch m := s.CPU.Model; m {
	case "", "host-passthrough", "host-model", "maximum":
	default:
		if !domainNameRE.MatchString(m) || len(m) > 64 {
			v.add("spec.cpu.model", "%q is not a CPU model name", m)
		}
	}
	if s.NUMA != "" {
		v.oneOf("spec.numa", s.NUMA, "auto", "none")
	}
	if s.Firmware != "" {
		v.oneOf("spec.firmware", s.Firmware, "uefi", "bios")
	}
	if s.SecureBoot && s.Firmware == "bios" {
		v.add("spec.secureBoot", "needs firmware uefi")
	}
	if s.Machine != "" && !validMachine(s.Machine) {
		v.add("spec.machine", "%q is not supported: use q35, pc, or a versioned pc-q35-*/pc-i440fx-* type", s.Machine)
	}
	if s.SecureBoot && s.Machine != "" && !isQ35(s.Machine) {
		v.add("spec.secureBoot", "needs machine q35 (secure boot needs SMM)")
	}
	if s.VirtType != "" {
		v.oneOf("spec.virtType", s.VirtType, "auto", "kvm", "qemu")
	}
	v.disks()
	if ci := s.CloudInit; ci != nil {
		v.text("spec.cloudInit.metaData", ci.MetaData)
		v.text("spec.cloudInit.networkConfig", ci.NetworkConfig)
		if len(ci.UserData) > 1<<20 {
			v.add("spec.cloudInit.userData", "longer than 1 MiB")
		}
		v.chars("spec.cloudInit.userData", ci.UserData, true)
		if ci.UserData == "" && ci.MetaData == "" && ci.NetworkConfig == "" && len(ci.SSHAuthorizedKeys) == 0 {
			v.add("spec.cloudInit", "empty: give userData, metaData, networkConfig or sshAuthorizedKeys, or remove cloudInit")
		}
		v.cloudInitContent(ci)
	}
	v.network()
	v.graphics()
	v.gpus()
	v.hotplugSlots()
	v.guestOS()
	v.cpuPlacement()
	v.devices()
	v.xmlPatches()
	if q := s.Quirks.HypervVendorID; q != "" {
		if len(q) > 12 || !alnumRE.MatchString(q) {
			v.add("spec.quirks.hypervVendorId", "%q: want 1 to 12 letters or digits", q)
		}
	}
	switch s.MMIO64 {
	case "", "auto", "off":
	default:
		sz, err := ParseSize(s.MMIO64)
		switch {
		case err != nil:
			v.add("spec.mmio64", "want auto, off or a size: %v", err)
		case sz.Bytes < 1<<30 || sz.Bytes > 64<<40:
			v.add("spec.mmio64", "%s is out of range 1GiB..64TiB", s.MMIO64)
		case sz.Bytes&(sz.Bytes-1) != 0:
			v.add("spec.mmio64", "%s is not a power of two", s.MMIO64)
		}
	}
}

func validMachine(m string) bool {
	return m == "q35" || m == "pc" || strings.HasPrefix(m, "pc-q35-") || strings.HasPrefix(m, "pc-i440fx-")
}

func isQ35(m string) bool { return m == "" || m == "q35" || strings.HasPrefix(m, "pc-q35-") }

func (v *validator) disks() {
	names := map[string]bool{}
	for i, d := range v.vm.Spec.Disks {
		p := fmt.Sprintf("spec.disks[%d]", i)
		if d.Name != "" {
			if !domainNameRE.MatchString(d.Name) || len(d.Name) > 32 {
				v.add(p+".name", "%q: use letters, digits, '.', '_' and '-' (at most 32)", d.Name)
			}
			if names[d.Name] {
				v.add(p+".name", "%q is used by another disk", d.Name)
			}
			names[d.Name] = true
		}
		sources := 0
		for _, set := range []bool{d.Image != "", d.Path != "", d.Blank, d.Volume != "", d.URL != ""} {
			if set {
				sources++
			}
		}
		switch {
		case sources > 1:
			v.add(p, "give only one of image (a base image with an overlay), path, blank, volume or url, not both")
		case sources == 0:
			v.add(p, "give image (a base image with an overlay), path, blank: true (with size), volume or url (a cdrom)")
		case d.URL != "":
			v.fetched(p, d)
		case d.Blank || d.Volume != "":
			v.blankOrVolume(p, d)
		case d.Image != "":
			v.absPath(p+".image", d.Image)
			v.absPath(p+".overlay", d.Overlay)
			v.size(p+".size", d.Size, 1<<20, MaxDiskSize, true)
			if d.Overlay != "" && filepath.Clean(d.Overlay) == filepath.Clean(d.Image) {
				v.add(p+".overlay", "is the base image itself; the overlay must be a new file")
			}
			if d.Device == "cdrom" {
				v.add(p+".device", "a cdrom cannot have an overlay: use path")
			}
		default:
			v.absPath(p+".path", d.Path)
			if !d.Size.IsZero() {
				v.add(p+".size", "only disks with an image (overlay) have a size")
			}
			if d.Overlay != "" {
				v.add(p+".overlay", "only disks with an image have an overlay")
			}
		}
		if d.Format != "" {
			v.oneOf(p+".format", d.Format, "qcow2", "raw")
		}
		switch d.Bus {
		case "", "virtio", "sata", "scsi":
		case "nvme":
			v.add(p+".bus", "nvme: libvirt 9.0 (Debian 12) has no emulated NVMe disk bus; use virtio, scsi, or sata for an installer without drivers")
		default:
			v.oneOf(p+".bus", d.Bus, "virtio", "scsi", "sata")
		}
		if d.Device != "" {
			v.oneOf(p+".device", d.Device, "disk", "cdrom")
		}
		if d.Device == "cdrom" && d.Bus == "virtio" {
			v.add(p+".bus", "a cdrom needs bus sata or scsi")
		}
	}
	if len(v.vm.Spec.Disks) > 20 {
		v.add("spec.disks", "more than 20 disks")
	}
	// Two disks on one file: QEMU's image locking refuses the second at start.
	// Paths are compared cleaned ("/a//b.img" is "/a/b.img"); a base image may back several
	// disks (read-only), but no disk may write a file another disk uses as its base.
	files := map[string]int{}
	dfs := v.vm.DiskFiles(BuildOptions{})
	for i, f := range dfs {
		if f.Path == "" {
			continue
		}
		p := filepath.Clean(f.Path)
		if j, dup := files[p]; dup {
			v.add(fmt.Sprintf("spec.disks[%d]", i), "%s is also the file of spec.disks[%d]", f.Path, j)
			continue
		}
		files[p] = i
	}
	for i, f := range dfs {
		if f.Backing == "" {
			continue
		}
		if j, dup := files[filepath.Clean(f.Backing)]; dup {
			v.add(fmt.Sprintf("spec.disks[%d].image", i), "%s is the writable file of spec.disks[%d]; a base image must not be written", f.Backing, j)
		}
	}
}

func (v *validator) network() {
	n := v.vm.Spec.Network
	switch n.Type {
	case "", "network":
		if n.Bridge != "" {
			v.add("spec.network.bridge", "only for type bridge")
		}
		if n.Network != "" && (!domainNameRE.MatchString(n.Network) || len(n.Network) > 64) {
			v.add("spec.network.network", "%q is not a libvirt network name", n.Network)
		}
	case "bridge":
		if n.Bridge == "" {
			v.add("spec.network.bridge", "required for type bridge")
		} else if len(n.Bridge) > 15 || !ifnameRE.MatchString(n.Bridge) {
			v.add("spec.network.bridge", "%q is not a Linux interface name", n.Bridge)
		}
		if n.Network != "" {
			v.add("spec.network.network", "only for type network")
		}
	case "none":
		if n.Network != "" || n.Bridge != "" || n.MAC != "" || n.Model != "" {
			v.add("spec.network", "type none takes no other fields")
		}
	default:
		v.oneOf("spec.network.type", n.Type, "network", "bridge", "none")
	}
	if n.Model != "" {
		v.oneOf("spec.network.model", n.Model, "virtio", "e1000e", "rtl8139")
	}
	if n.MAC != "" {
		hw, err := net.ParseMAC(n.MAC)
		if err != nil || len(hw) != 6 {
			v.add("spec.network.mac", "%q is not a MAC address", n.MAC)
		} else if hw[0]&1 == 1 {
			v.add("spec.network.mac", "%q is a multicast address", n.MAC)
		}
	}
}

func (v *validator) graphics() {
	g := v.vm.Spec.Graphics
	if g.Type != "" {
		v.oneOf("spec.graphics.type", g.Type, "vnc", "spice", "egl-headless", "none")
	}
	if g.Listen != "" {
		if net.ParseIP(g.Listen) == nil {
			v.add("spec.graphics.listen", "%q is not an IP address", g.Listen)
		}
		if g.Type == "none" {
			v.add("spec.graphics.listen", "graphics type none listens nowhere")
		}
	}
	if g.GL && g.Type != "spice" {
		v.add("spec.graphics.gl", "only for type spice (egl-headless is always GL)")
	}
	if g.GL && g.Listen != "" {
		v.add("spec.graphics.listen", "spice gl serves local clients only and listens nowhere; remove listen")
	}
	v.absPath("spec.graphics.renderNode", g.RenderNode)
	if g.RenderNode != "" && !g.GL && g.Type != "egl-headless" {
		v.add("spec.graphics.renderNode", "only with spice gl or egl-headless")
	}
}

func (v *validator) gpus() {
	s := &v.vm.Spec
	if len(s.GPUs) > MaxGPUCount {
		v.add("spec.gpus", "more than %d entries", MaxGPUCount)
	}
	virtio := 0
	seen := &seenIDs{addr: map[string]string{}, uuid: map[string]string{}}
	for i, g := range s.GPUs {
		p := fmt.Sprintf("spec.gpus[%d]", i)
		kinds := 0
		for _, set := range []bool{g.Passthrough != nil, g.VGPU != nil, g.VirtioGPU != nil} {
			if set {
				kinds++
			}
		}
		if kinds != 1 {
			v.add(p, "give exactly one of passthrough, vgpu or virtioGpu")
		}
		if g.Fallback != "" {
			v.oneOf(p+".fallback", g.Fallback, "fail", "virtio-gpu")
			if g.VirtioGPU != nil && g.Fallback == "virtio-gpu" {
				v.add(p+".fallback", "a virtioGpu entry needs no fallback")
			}
		}
		if g.Passthrough != nil {
			v.passthrough(p+".passthrough", g.Passthrough, seen)
		}
		if g.VGPU != nil {
			v.vgpu(p+".vgpu", g.VGPU, seen)
		}
		if g.VirtioGPU != nil {
			virtio++
			v.virtioGPU(p+".virtioGpu", g.VirtioGPU)
		}
	}
	if virtio > 1 {
		v.add("spec.gpus", "at most one virtioGpu entry per VM")
	}
}

// seenIDs are the PCI addresses and mdev UUIDs the spec's entries named so far, with the path
// that named each: one device may be named once.
type seenIDs struct {
	addr, uuid map[string]string
}

// claimAddr records address a for path, or reports the entry that named it first.
func (v *validator) claimAddr(seen *seenIDs, path string, a host.Address, owner string) {
	if other, dup := seen.addr[a.String()]; dup {
		v.add(path, "%s is also assigned by %s", a, other)
		return
	}
	seen.addr[a.String()] = owner
}

func (v *validator) passthrough(pp string, pt *Passthrough, seen *seenIDs) {
	if pt.Address != "" {
		if a, err := host.ParseAddress(pt.Address); err != nil {
			v.add(pp+".address", "%v", err)
		} else {
			v.claimAddr(seen, pp+".address", a, pp)
		}
		if pt.Vendor != "" || pt.Device != "" || pt.Model != "" {
			v.add(pp, "give an address or a selector (vendor, device, model), not both")
		}
		if pt.Count > 1 {
			v.add(pp+".count", "an address names one GPU; use a selector for count > 1")
		}
	} else if pt.Vendor == "" && pt.Device == "" && pt.Model == "" {
		v.add(pp, "give an address, or a selector: vendor, device and/or model")
	}
	if pt.Vendor != "" && !hexIDRE.MatchString(pt.Vendor) {
		v.add(pp+".vendor", "%q: want a 4-digit hex PCI vendor id such as 10de", pt.Vendor)
	}
	if pt.Device != "" && !hexIDRE.MatchString(pt.Device) {
		v.add(pp+".device", "%q: want a 4-digit hex PCI device id such as 2236", pt.Device)
	}
	v.text(pp+".model", pt.Model)
	if pt.Count < 0 || pt.Count > MaxGPUCount {
		v.add(pp+".count", "%d is out of range 1..%d", pt.Count, MaxGPUCount)
	}
	if pt.ROM != nil {
		if pt.ROM.Bar != "" {
			v.oneOf(pp+".rom.bar", pt.ROM.Bar, "on", "off")
		}
		v.absPath(pp+".rom.file", pt.ROM.File)
	}
}

func (v *validator) vgpu(vp string, vg *VGPU, seen *seenIDs) {
	if strings.TrimSpace(vg.Profile) == "" {
		v.add(vp+".profile", "required: an mdev type id or name (e.g. nvidia-558 or \"GRID A100-4C\")")
	}
	v.text(vp+".profile", vg.Profile)
	if vg.Count < 0 || vg.Count > MaxGPUCount {
		v.add(vp+".count", "%d is out of range 1..%d", vg.Count, MaxGPUCount)
	}
	switch vg.Mode {
	case "", "mdev":
		v.mdevVGPU(vp, vg, seen)
	case "vendor-vfio":
		v.vendorVGPU(vp, vg, seen)
	default:
		v.oneOf(vp+".mode", vg.Mode, "mdev", "vendor-vfio")
	}
}

func (v *validator) mdevVGPU(vp string, vg *VGPU, seen *seenIDs) {
	count := max(vg.Count, 1)
	if len(vg.VFs) > 0 {
		v.add(vp+".vfs", "only for mode vendor-vfio")
	}
	if len(vg.UUIDs) > 0 && len(vg.UUIDs) != count {
		v.add(vp+".uuids", "%d UUIDs for count %d", len(vg.UUIDs), count)
	}
	for j, u := range vg.UUIDs {
		up := fmt.Sprintf("%s.uuids[%d]", vp, j)
		id, err := uuid.Parse(u)
		if err != nil || len(u) != 36 {
			v.add(up, "%q is not a UUID", u)
			continue
		}
		if other, dup := seen.uuid[id.String()]; dup {
			v.add(up, "%s is also used by %s", id, other)
			continue
		}
		seen.uuid[id.String()] = up
	}
	if vg.Display && graphicsType(v.vm) == "none" {
		v.add(vp+".display", "a vGPU display needs graphics (vnc, spice or egl-headless); graphics type is none")
	}
	if vg.RAMFB != nil && *vg.RAMFB && !vg.Display {
		v.add(vp+".ramfb", "only with display: true (libvirt refuses ramfb without display)")
	}
}

func (v *validator) vendorVGPU(vp string, vg *VGPU, seen *seenIDs) {
	if vg.Display {
		v.add(vp+".display", "libvirt accepts display only on mdev hostdevs; a vendor-VFIO VF is a PCI hostdev")
	}
	if vg.RAMFB != nil {
		v.add(vp+".ramfb", "only for mode mdev")
	}
	if len(vg.UUIDs) > 0 {
		v.add(vp+".uuids", "only for mode mdev")
	}
	if count := max(vg.Count, 1); len(vg.VFs) > 0 && len(vg.VFs) != count {
		v.add(vp+".vfs", "%d VFs for count %d", len(vg.VFs), count)
	}
	for j, a := range vg.VFs {
		path := fmt.Sprintf("%s.vfs[%d]", vp, j)
		if pa, err := host.ParseAddress(a); err != nil {
			v.add(path, "%v", err)
		} else {
			v.claimAddr(seen, path, pa, vp)
		}
	}
}

func (v *validator) virtioGPU(p string, vg *VirtioGPU) {
	if vg.Heads < 0 || vg.Heads > 16 {
		v.add(p+".heads", "%d is out of range 1..16", vg.Heads)
	}
	if vg.Virgl {
		switch g := v.vm.Spec.Graphics; {
		case g.Type == "egl-headless", g.Type == "spice" && g.GL:
		default:
			v.add(p+".virgl", "virgl renders on the host GPU and needs graphics type egl-headless, or spice with gl: true")
		}
	}
}
