package host

import "bytes"

// identity is what a PCI function's `uevent` file says about it in one read: the class, the
// IDs and the subsystem IDs, which sysfs also shows one per file (class, vendor, device,
// subsystem_vendor, subsystem_device). The kernel prints both from the same fields of its
// struct pci_dev (pci_uevent, and the attributes in pci-sysfs.c), so they agree:
//
//	DRIVER=nvidia
//	PCI_CLASS=30200                    class             0x030200
//	PCI_ID=10DE:26B9                   vendor, device    0x10de, 0x26b9
//	PCI_SUBSYS_ID=10DE:1851            subsystem_vendor  0x10de, subsystem_device 0x1851
//	PCI_SLOT_NAME=0000:41:00.0
//	MODALIAS=pci:v000010DEd000026B9sv000010DEsd00001851bc03sc02i00
//
// The `config` file (which lspci reads) is not a substitute: a VF's vendor and device read
// 0xffff there, and a bridge's subsystem IDs are not at offset 0x2c.
//
// A field uevent lacks (an old or odd tree, a fake one without uevent) is read from its own
// file instead: has* say which fields uevent gave. DRIVER= is the name of the driver the
// function's driver link points to (the driver's directory is named after it).
type identity struct {
	class, vendor, device, subVendor, subDevice uint32
	hasClass, hasIDs, hasSubsys                 bool
	// driver is DRIVER=, the bound driver: a PCI uevent (hasIDs) without it has none.
	driver string
}

// readIdentity reads the uevent file name/sub (relative to d: "ADDR", "uevent", or "uevent",
// ""); a file
// that cannot be read or parsed gives an identity with nothing in it, and the caller reads the
// separate files, whose errors it reports as before.
func readIdentity(d devDir, name, sub string) identity {
	var page [4096]byte
	b, err := d.fileIn(name, sub, &page)
	if err != nil {
		return identity{}
	}
	return parseUevent(b)
}

// parseUevent parses the PCI lines of a uevent file; lines it does not know, and values that
// are not hex, are left out.
func parseUevent(b []byte) identity {
	var id identity
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		key, val, ok := bytes.Cut(line, []byte{'='})
		if !ok {
			continue
		}
		switch string(key) {
		case "DRIVER":
			id.driver = string(val)
		case "PCI_CLASS":
			id.class, id.hasClass = parseHex32(val)
		case "PCI_ID":
			id.vendor, id.device, id.hasIDs = parseHexPair(val)
		case "PCI_SUBSYS_ID":
			id.subVendor, id.subDevice, id.hasSubsys = parseHexPair(val)
		}
	}
	return id
}

// parseHexPair parses "10DE:26B9" (two 16-bit hex numbers).
func parseHexPair(v []byte) (uint32, uint32, bool) {
	a, b, ok := bytes.Cut(v, []byte{':'})
	if !ok || len(a) == 0 || len(a) > 4 || len(b) == 0 || len(b) > 4 {
		return 0, 0, false
	}
	x, ok1 := parseHex32(a)
	y, ok2 := parseHex32(b)
	if !ok1 || !ok2 {
		return 0, 0, false
	}
	return x, y, true
}

// parseHex32 parses a hex number of at most 8 digits, without prefix.
func parseHex32(v []byte) (uint32, bool) {
	n, ok := parseHexDigits(v, 8)
	return uint32(n), ok
}

// parseHexDigits parses 1 to max (at most 16) hex digits, nothing else, without a string.
func parseHexDigits(v []byte, max int) (uint64, bool) {
	if len(v) == 0 || len(v) > max {
		return 0, false
	}
	var n uint64
	for _, c := range v {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		n = n<<4 | uint64(c)
	}
	return n, true
}
