package host

import (
	"fmt"
	"strconv"
	"strings"
)

// Address is a PCI function address: domain:bus:device.function.
//
// Addresses are values: parse them once at the edge (CLI flags, specs, sysfs link names)
// and pass Address around, never raw strings.
type Address struct {
	Domain   uint32
	Bus      uint8
	Device   uint8
	Function uint8
}

// ParseAddress accepts the forms users and tools print: "0000:01:00.0", "01:00.0"
// (domain 0), and libvirt's node-device name "pci_0000_01_00_0".
func ParseAddress(s string) (Address, error) {
	if a, ok := parseCanonicalAddress(s); ok {
		return a, nil
	}
	orig := s
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "pci_") {
		p := strings.Split(strings.TrimPrefix(s, "pci_"), "_")
		if len(p) != 4 {
			return Address{}, fmt.Errorf("parse PCI address %q: want pci_DDDD_BB_SS_F", orig)
		}
		s = p[0] + ":" + p[1] + ":" + p[2] + "." + p[3]
	}
	parts := strings.Split(s, ":")
	var dom, bus, devfn string
	switch len(parts) {
	case 2:
		dom, bus, devfn = "0", parts[0], parts[1]
	case 3:
		dom, bus, devfn = parts[0], parts[1], parts[2]
	default:
		return Address{}, fmt.Errorf("parse PCI address %q: want DDDD:BB:SS.F (e.g. 0000:01:00.0)", orig)
	}
	dev, fn, ok := strings.Cut(devfn, ".")
	if !ok {
		return Address{}, fmt.Errorf("parse PCI address %q: missing .function (e.g. 0000:01:00.0)", orig)
	}
	d, err1 := strconv.ParseUint(dom, 16, 32)
	b, err2 := strconv.ParseUint(bus, 16, 8)
	v, err3 := strconv.ParseUint(dev, 16, 8)
	f, err4 := strconv.ParseUint(fn, 16, 8)
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || v > 0x1f || f > 7 || len(bus) > 2 || len(dev) > 2 || len(fn) > 1 {
		return Address{}, fmt.Errorf("parse PCI address %q: want DDDD:BB:SS.F with hex fields, slot <= 1f, function <= 7", orig)
	}
	return Address{Domain: uint32(d), Bus: uint8(b), Device: uint8(v), Function: uint8(f)}, nil
}

// parseCanonicalAddress parses the form sysfs names functions by, "DDDD:BB:SS.F" with four
// domain digits, without the general parser's split (Scan parses every directory name, link
// and group member: on the 64-GPU host its slices were 3% of inspect's memory). It accepts
// exactly what ParseAddress accepts in that form, with the same value; anything else (ok
// false) goes to the general parser, which also words the errors.
func parseCanonicalAddress(s string) (Address, bool) {
	if len(s) != 12 || s[4] != ':' || s[7] != ':' || s[10] != '.' {
		return Address{}, false
	}
	b := []byte{s[0], s[1], s[2], s[3], s[5], s[6], s[8], s[9], s[11]}
	dom, ok1 := parseHexDigits(b[0:4], 4)
	bus, ok2 := parseHexDigits(b[4:6], 2)
	dev, ok3 := parseHexDigits(b[6:8], 2)
	fn, ok4 := parseHexDigits(b[8:9], 1)
	if !ok1 || !ok2 || !ok3 || !ok4 || dev > 0x1f || fn > 7 {
		return Address{}, false
	}
	return Address{Domain: uint32(dom), Bus: uint8(bus), Device: uint8(dev), Function: uint8(fn)}, true
}

// MustParseAddress is ParseAddress for constants in tests and tables; it panics on a bad address.
func MustParseAddress(s string) Address {
	a, err := ParseAddress(s)
	if err != nil {
		panic(err)
	}
	return a
}

// String returns the canonical sysfs form, e.g. "0000:01:00.0".
func (a Address) String() string {
	var b [16]byte
	return string(a.appendText(b[:0]))
}

// appendText appends what fmt.Sprintf("%04x:%02x:%02x.%x") prints, without fmt: inspect
// prints thousands of addresses on a large host.
func (a Address) appendText(b []byte) []byte {
	b = appendHexPad(b, a.Domain, 4)
	b = appendHexPad(append(b, ':'), uint32(a.Bus), 2)
	b = appendHexPad(append(b, ':'), uint32(a.Device), 2)
	return appendHexPad(append(b, '.'), uint32(a.Function), 1)
}

// appendHexPad appends v in lower-case hex, zero-padded to n digits.
func appendHexPad(b []byte, v uint32, n int) []byte {
	const digits = "0123456789abcdef"
	var t [8]byte
	i := len(t)
	for v != 0 || len(t)-i < n {
		i--
		t[i] = digits[v&0xf]
		v >>= 4
	}
	return append(b, t[i:]...)
}

// NodeDevName returns libvirt's node-device name, e.g. "pci_0000_01_00_0".
func (a Address) NodeDevName() string {
	return fmt.Sprintf("pci_%04x_%02x_%02x_%x", a.Domain, a.Bus, a.Device, a.Function)
}

// SameSlot reports whether b is another function of a's slot (same domain, bus and device).
func (a Address) SameSlot(b Address) bool {
	return a.Domain == b.Domain && a.Bus == b.Bus && a.Device == b.Device
}

// MarshalText implements encoding.TextMarshaler so addresses print canonically in JSON/YAML.
func (a Address) MarshalText() ([]byte, error) { return a.appendText(make([]byte, 0, 16)), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (a *Address) UnmarshalText(b []byte) error {
	v, err := ParseAddress(string(b))
	if err != nil {
		return err
	}
	*a = v
	return nil
}

// MarshalNeverFails declares that MarshalText returns no error for any Address
// (jsonindent.Infallible): `inspect -o json` encodes a host's devices once, not twice.
func (Address) MarshalNeverFails() {}
