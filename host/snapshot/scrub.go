package snapshot

import (
	"encoding/binary"
	"path"
	"strings"

	"github.com/vgpu-host/vgpu-host/internal/lazy"
)

// serialFile reports whether attribute name holds a serial number or an identifier unique to
// one machine or device; their letters and digits are zeroed, keeping their length and
// punctuation. A switch, not a package-level map: a map is built at every start.
func serialFile(name string) bool {
	switch name {
	case "serial", "serial_number", "product_serial", "board_serial",
		"chassis_serial", "uuid", "product_uuid", "wwid", "eui", "nguid":
		return true
	}
	return false
}

// idRE is an identifier on the kernel command line or in /proc/mounts: UUID=…, PARTUUID=…,
// by-uuid/…, by-partuuid/…, by-id/…. Compiled on first use: a package-level
// regexp.MustCompile runs at every start of the binary, `vgpu-host --version` included (#32:
// this package's init was the largest of vgpu-host's own).
var idRE = lazy.Regexp{Expr: `((?:PART)?UUID=|by-(?:part)?uuid/|by-id/)([^\s,]+)`}

// Scrub zeroes serial numbers and UUIDs in the file at rel (relative to the host root) whose
// content is b: attributes named like a serial (serialFile), a PCI function's Device Serial
// Number capability in config, and disk identifiers in /proc/cmdline and /proc/mounts. mdev
// UUIDs are left alone: they name devices vgpu-host shows and a snapshot must reproduce.
func Scrub(rel string, b []byte) []byte {
	name := path.Base(rel)
	switch {
	case serialFile(name):
		return zeroAlnum(b)
	case name == "config" && strings.HasPrefix(rel, "sys/devices/pci"):
		return zeroDSN(b)
	case rel == "proc/cmdline" || rel == "proc/mounts":
		re := idRE.Get()
		return re.ReplaceAllFunc(b, func(m []byte) []byte {
			sub := re.FindSubmatchIndex(m)
			return append(append([]byte{}, m[:sub[3]]...), zeroAlnum(m[sub[4]:])...)
		})
	}
	return b
}

func zeroAlnum(b []byte) []byte {
	out := make([]byte, len(b))
	for i, c := range b {
		if c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' {
			c = '0'
		}
		out[i] = c
	}
	return out
}

// pciExtCapDSN is the PCIe extended capability ID of the Device Serial Number.
const pciExtCapDSN = 0x0003

// zeroDSN zeroes the 8-byte serial of a Device Serial Number capability in PCI config space
// (extended capabilities from offset 0x100: a 32-bit header of ID, version and next offset,
// then for the DSN the serial). Config space read without root stops at 64 bytes: nothing to do.
func zeroDSN(b []byte) []byte {
	out := append([]byte(nil), b...)
	seen := map[int]bool{}
	for off := 0x100; off >= 0x100 && off+12 <= len(out) && !seen[off]; {
		seen[off] = true
		h := binary.LittleEndian.Uint32(out[off:])
		if h == 0 || h == 0xffffffff {
			break
		}
		if h&0xffff == pciExtCapDSN {
			copy(out[off+4:off+12], make([]byte, 8))
		}
		off = int(h>>20) &^ 3
	}
	return out
}
