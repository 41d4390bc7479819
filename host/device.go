package host

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// PCI class codes vgpu-host cares about (the top 16 bits of the 24-bit class).
const (
	classDisplay   = 0x03   // base class: VGA 0300, XGA 0301, 3D 0302, other 0380
	classVGA       = 0x0300 // the only subclass with boot_vga
	classAudio     = 0x0403 // HDA audio: the HDMI/DP audio function of a GPU
	classUSB       = 0x0c03 // USB controller: VirtualLink / USB-C on Turing cards
	classSerialBus = 0x0c80 // "other serial bus": the UCSI (USB-C) controller next to it
)

// scanner carries one scan's state: the root, the lazy pci.ids resolver and the warnings met.
type scanner struct {
	root Root
	ids  *PCIIDs
	// bus is ROOT/sys/bus/pci/devices and groups ROOT/sys/kernel/iommu_groups: Scan opens
	// them once and reads each function and group relative to them.
	bus, groups devDir
	// first is what Scan's first pass read of each function (class, IDs, driver, group link),
	// so that readDevice need not read it again; members are the PCI functions of each IOMMU
	// group, from the functions' iommu_group links, or nil when Scan lists the groups.
	first   map[Address]*firstRead
	members map[int][]Address
	// groupsFrom says how readClasses decides between the links and listing the groups.
	groupsFrom groupSource
	// nodeCPUs is the local_cpulist read for each NUMA node (-1 included), which the kernel
	// prints from the node alone (localCPUs).
	nodeCPUs map[int]string
	// pfOf is, in Scan, the PF of every VF a PF read so far named in its virtfnN links
	// (readSRIOV), so that the VF's physfn link need not be read (functionLinks); nil outside
	// Scan.
	pfOf map[Address]Address

	mu       sync.Mutex
	warnings []string
}

func newScanner(root Root) *scanner {
	return &scanner{root: root, ids: pciIDsFor(root),
		bus: root.pathDir(root.Sys("bus", "pci", "devices")), groups: root.pathDir(root.Sys("kernel", "iommu_groups"))}
}

func (s *scanner) warn(format string, a ...any) {
	s.mu.Lock()
	s.warnings = append(s.warnings, fmt.Sprintf(format, a...))
	s.mu.Unlock()
}

// pciIDsCache keeps one lazy resolver per root so that repeated ReadDevice calls read pci.ids once.
var pciIDsCache sync.Map // root dir -> *PCIIDs

func pciIDsFor(root Root) *PCIIDs {
	if v, ok := pciIDsCache.Load(root.Dir()); ok {
		return v.(*PCIIDs)
	}
	v, _ := pciIDsCache.LoadOrStore(root.Dir(), NewPCIIDs(root))
	return v.(*PCIIDs)
}

// ReadDevice reads one PCI function from ROOT/sys/bus/pci/devices/ADDR: IDs and names (from
// pci.ids), class, driver, driver_override, IOMMU group, NUMA, BARs, boot_vga, reset methods,
// SR-IOV (on a PF), physfn (on a VF) and NVIDIA vendor-specific vGPU files. It does not fill
// Companions or Mdev, which need the rest of the host (Scan fills them). A device that does not
// exist returns an error satisfying errors.Is(err, ErrNotFound); an optional attribute that
// cannot be read is left at its zero value (Scan reports those as warnings).
//
// ReadDevice drops those warnings; ReadDeviceWarnings returns them.
func ReadDevice(root Root, addr Address) (Device, error) {
	s := newScanner(root)
	d, err := s.readDevice(addr)
	if err == nil {
		s.name(&d)
	}
	return d, namedNotFound(root, addr, err)
}

// namedNotFound is err, or, when the address a caller named has no device at all, what every
// command says of such an address (NoDevice): a mistyped address is no device "removed".
func namedNotFound(root Root, a Address, err error) error {
	if errors.Is(err, ErrNotFound) {
		if missing := DeviceMissing(root, a); missing != nil {
			return missing
		}
	}
	return err
}

// NoDevice is the error (ErrNotFound) for an address a caller named that has no
// ROOT/sys/bus/pci/devices/ADDR: every command words a mistyped address this one way.
func NoDevice(root Root, a Address) error {
	return fmt.Errorf("device %s: no %s: %w (check the address with lspci -D)", a, root.PCIDevice(a), ErrNotFound)
}

// DeviceMissing returns NoDevice's error when a has no ROOT/sys/bus/pci/devices/ADDR, nil
// when it has one (or it cannot tell).
func DeviceMissing(root Root, a Address) error {
	if _, err := root.Lstat(root.PCIDevice(a)); errors.Is(err, fs.ErrNotExist) {
		return NoDevice(root, a)
	}
	return nil
}

// ReadDeviceWarnings is ReadDevice that also returns the problems met with optional
// attributes (an unreadable numa_node, a dangling virtfn link...), each naming the device and
// the path, sorted: what `vgpu-host inspect ADDR` lists under warnings.
func ReadDeviceWarnings(root Root, addr Address) (Device, []string, error) {
	s := newScanner(root)
	d, err := s.readDevice(addr)
	if err == nil {
		s.name(&d)
	}
	sort.Strings(s.warnings)
	return d, s.warnings, namedNotFound(root, addr, err)
}

// readDevice reads addr, recording problems with optional attributes as warnings. It is one
// attribute after another, in the order Device lists them (86 lines): splitting it would only
// scatter that list.
func (s *scanner) readDevice(addr Address) (Device, error) {
	d := Device{Address: addr, IOMMUGroup: -1, NUMANode: -1}
	var first firstRead
	read, ok := s.first[addr]
	if ok {
		first = *read
	}
	name := first.name // the directory Scan listed
	if name == "" {
		name = addr.String()
	}
	dd := s.bus.sub(name)
	defer dd.close()
	dir := dd.dir
	// The IDs come from uevent (Scan's first pass, or one read here), each one uevent lacks
	// from its own file. A directory that could not be opened is read by its path, file by
	// file: the vendor file's error then says the device is gone, as it always did.
	if !ok || dd.fd == atCWD && s.bus.fd != atCWD {
		first, ok = firstRead{id: readIdentity(dd, "uevent", "")}, false
	}
	id := first.id
	vendor, device := id.vendor, id.device
	if !id.hasIDs {
		var err error
		if vendor, err = dd.hex("vendor"); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return d, fmt.Errorf("read PCI device %s at %s: %w (it may have been removed)", addr, dir, ErrNotFound)
			}
			return d, fmt.Errorf("read PCI device %s: %w", addr, err)
		}
		if device, err = dd.hex("device"); err != nil {
			return d, fmt.Errorf("read PCI device %s: %w", addr, err)
		}
	}
	class := id.class
	if !id.hasClass {
		var err error
		if class, err = dd.hex("class"); err != nil {
			return d, fmt.Errorf("read PCI device %s: %w", addr, err)
		}
	}
	d.VendorID, d.DeviceID = hex4(vendor), hex4(device)
	d.Class = hex6(class)
	d.IsGPU = class>>16 == classDisplay
	d.IsBridge = IsBridgeClass(class)
	if id.hasSubsys {
		d.SubsysVendorID, d.SubsysDeviceID = hex4(id.subVendor), hex4(id.subDevice)
	} else {
		if sv, err := dd.hex("subsystem_vendor"); err == nil {
			d.SubsysVendorID = hex4(sv)
		} else {
			s.warn("%s: %v", addr, err)
		}
		if sd, err := dd.hex("subsystem_device"); err == nil {
			d.SubsysDeviceID = hex4(sd)
		} else {
			s.warn("%s: %v", addr, err)
		}
	}
	var pre *firstRead
	if ok {
		pre = &first
	}
	links, numaRead := s.functionLinks(addr, dd, pre)
	d.Driver, d.IOMMUGroup, d.NUMANode, d.PhysFn = links.Driver, links.IOMMUGroup, links.NUMANode, links.PhysFn
	// sysfs shows an unset override as "(null)".
	if ov, err := dd.strUnless("driver_override", "(null)"); err == nil {
		d.DriverOverride = ov
	} else if !errors.Is(err, fs.ErrNotExist) {
		s.warn("%s: %v", addr, dd.attrErr("driver_override", err))
	}
	d.LocalCPUs = s.localCPUs(addr, dd, links.NUMANode, numaRead)
	if class>>8 == classVGA {
		d.BootVGA = s.optionalString(addr, dd, "boot_vga") == "1"
	}
	// reset_method exists since Linux 5.15; older kernels simply lack it.
	if rm := s.optionalString(addr, dd, "reset_method"); rm != "" {
		d.ResetMethods = strings.Fields(rm)
	}
	if bars, err := readBARs(dd); err == nil {
		d.BARs = bars
	} else {
		s.warn("%s: %v", addr, err)
	}
	// A VF has no SR-IOV capability of its own: the kernel shows sriov_* only on a PF, so the
	// read of sriov_totalvfs would only fail (512 such failures on the 64-GPU host).
	if d.PhysFn == nil {
		d.SRIOV = s.readSRIOV(addr, dd)
	}
	if v, err := readVendorVGPU(addr, dd); err != nil {
		s.warn("%v", err)
	} else {
		d.VendorVGPU = v
	}
	return d, nil
}

// localCPUs is a function's local_cpulist. The kernel prints it from the function's NUMA node
// alone (pci_dev_show_local_cpu: cpumask_of_node(dev_to_node(dev)), every online CPU for node
// -1), so one read serves every function on a node: on the 64-GPU host, 8 reads instead of 592.
// Without a numa_node that was read (a kernel without CONFIG_NUMA prints the bus's CPUs; an
// unreadable file), each function's own file is read.
func (s *scanner) localCPUs(addr Address, dd devDir, node int, numaRead bool) string {
	if numaRead {
		s.mu.Lock()
		c, ok := s.nodeCPUs[node]
		s.mu.Unlock()
		if ok {
			return c
		}
	}
	c, err := dd.str("local_cpulist")
	if err != nil {
		s.warn("%s: %v", addr, err)
		return ""
	}
	if numaRead {
		s.mu.Lock()
		if s.nodeCPUs == nil {
			s.nodeCPUs = map[int]string{}
		}
		s.nodeCPUs[node] = c
		s.mu.Unlock()
	}
	return c
}

// name fills d's names from pci.ids. Scan names its devices last, after every sysfs read.
// (Until #32 it had a goroutine find each vendor's section as readDevice met the vendor: measured
// side by side five times each, that cost 7-10% of inspect's CPU on the real-kernel snapshots
// and the H200 capture for no shorter wall time: without it the wall time was 0.86-1.01 of
// what it was with it. The same within noise on the 64-GPU and the 2,000-function hosts.)
func (s *scanner) name(d *Device) {
	d.VendorName = s.ids.Vendor(d.VendorID)
	d.DeviceName = s.ids.Device(d.VendorID, d.DeviceID)
	if d.SubsysVendorID != "" && d.SubsysDeviceID != "" {
		d.SubsystemName = s.ids.Subsystem(d.VendorID, d.DeviceID, d.SubsysVendorID, d.SubsysDeviceID)
	}
	d.ClassName = s.ids.Class(d.Class)
}

// hex4 and hex6 are fmt.Sprintf("%04x") and ("%06x") of an ID or class, without fmt.
func hex4(v uint32) string { return hexN(v, 4) }
func hex6(v uint32) string { return hexN(v, 6) }

func hexN(v uint32, n int) string {
	s := strconv.FormatUint(uint64(v), 16)
	if len(s) >= n {
		return s
	}
	return "000000"[:n-len(s)] + s
}

// optionalString reads an attribute of dd that may legitimately be absent: absent gives "",
// any other failure is a warning.
func (s *scanner) optionalString(addr Address, dd devDir, name string) string {
	v, err := dd.strRaw(name)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.warn("%s: %v", addr, dd.attrErr(name, err))
	}
	return v
}

// optionalLink is optionalString for a symlink's last element (driver, iommu_group, physfn).
func (s *scanner) optionalLink(addr Address, dd devDir, name string) string {
	v, err := dd.linkBaseRaw(name, "")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.warn("%s: %v", addr, wrapLinkErr(dd.path(name), err))
	}
	return v
}

// fields stores where the whitespace-separated fields of line are in f (start and end
// offsets), as strings.Fields would split it, and returns how many there are (counting those
// beyond len(f)), without allocating. Offsets rather than subslices: a slice of line stored
// through f would make every caller's line escape, and with it the stack page it was read
// into (readBARs).
func fields(line []byte, f [][2]int) int {
	n := 0
	for i := 0; i < len(line); {
		for i < len(line) && asciiSpace(line[i]) {
			i++
		}
		if i == len(line) {
			break
		}
		j := i
		for j < len(line) && !asciiSpace(line[j]) {
			j++
		}
		if n < len(f) {
			f[n] = [2]int{i, j}
		}
		n, i = n+1, j
	}
	return n
}

func asciiSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

// parseUint0 is strconv.ParseUint(string(b), 0, 64), with the kernel's "0x" and 16 hex digits
// parsed without a string.
func parseUint0(b []byte) (uint64, error) {
	if len(b) > 2 && b[0] == '0' && b[1] == 'x' {
		if v, ok := parseHexDigits(b[2:], 16); ok {
			return v, nil
		}
	}
	return strconv.ParseUint(string(b), 0, 64)
}

// IsBridgeClass reports whether a class is a bridge that may stay on the host when the rest
// of its group moves to vfio: host (0600), PCI-to-PCI (0604), CardBus (0607) and
// semi-transparent PCI-to-PCI (0609) bridges. vfio-pci cannot bind bridges; the binder leaves
// them and inspect does not count them as endpoints.
func IsBridgeClass(class uint32) bool {
	switch class >> 8 {
	case 0x0600, 0x0604, 0x0607, 0x0609:
		return true
	}
	return false
}

// isCompanionClass reports whether a class is one of a GPU's companion functions: HDMI/DP
// audio (0403), USB (0c03) or the UCSI USB-C controller (0c80).
func isCompanionClass(class string) bool {
	c, err := strconv.ParseUint(class, 16, 32)
	return err == nil && companionClass(uint32(c))
}

// companionClass is isCompanionClass of a class as a number.
func companionClass(class uint32) bool {
	switch class >> 8 {
	case classAudio, classUSB, classSerialBus:
		return true
	}
	return false
}

// Resource flags from include/linux/ioport.h, as printed in the third column of `resource`.
const (
	ioresourceIO       = 0x00000100
	ioresourceMem      = 0x00000200
	ioresourcePrefetch = 0x00002000
	ioresourceMem64    = 0x00100000
)

// ReadBARs parses a device's `resource` file: one "start end flags" line per region, BARs 0-5
// first, then the expansion ROM and bridge windows (which it skips). Unused BARs (all zero)
// are left out.
//
//	0x00000000f0000000 0x00000000f3ffffff 0x0000000000040200   BAR0: 64 MiB, 32-bit, non-prefetchable
func ReadBARs(root Root, path string) ([]BAR, error) {
	b, err := root.ReadHostFile(path, 0)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return parseBARs(func() string { return path }, b)
}

// readBARs is ReadBARs of dd's resource file.
func readBARs(dd devDir) ([]BAR, error) {
	var page [4096]byte
	b, err := dd.fileIn("resource", "", &page)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", dd.path("resource"), err)
	}
	return parseBARs(func() string { return dd.path("resource") }, b) // joined only for an error
}

// parseBARs parses the text b of the resource file at path() (for errors), line by line as
// bufio.ScanLines splits it.
func parseBARs(path func() string, b []byte) ([]BAR, error) {
	var six [6]BAR
	bars := six[:0] // at most six; kept in one allocation of the right size (own)
	own := func() []BAR {
		if len(bars) == 0 {
			return nil
		}
		return append([]BAR(nil), bars...)
	}
	rest := b
	for i := 0; len(rest) > 0 && i < 6; i++ {
		line := rest
		if j := bytes.IndexByte(rest, '\n'); j >= 0 {
			line, rest = rest[:j], rest[j+1:]
		} else {
			rest = nil
		}
		line = bytes.TrimSuffix(line, []byte{'\r'})
		var f [3][2]int
		if n := fields(line, f[:]); n != 3 {
			return own(), fmt.Errorf("read %s: line %d: want \"start end flags\", got %s", path(), i+1, quoted(string(line)))
		}
		start, err1 := parseUint0(line[f[0][0]:f[0][1]])
		end, err2 := parseUint0(line[f[1][0]:f[1][1]])
		flags, err3 := parseUint0(line[f[2][0]:f[2][1]])
		if err1 != nil || err2 != nil || err3 != nil {
			return own(), fmt.Errorf("read %s: line %d: not hex numbers: %s", path(), i+1, quoted(string(line)))
		}
		if end == 0 && start == 0 || flags&(ioresourceIO|ioresourceMem) == 0 {
			continue
		}
		bars = append(bars, BAR{
			Index: i, Start: start, Size: end - start + 1,
			Is64: flags&ioresourceMem64 != 0, Prefetch: flags&ioresourcePrefetch != 0, IO: flags&ioresourceIO != 0,
		})
	}
	return own(), nil
}
