// Package cloudinit writes cloud-init NoCloud seed images: an ISO 9660 file system labelled
// "cidata" with user-data, meta-data and (optionally) network-config in its root directory.
//
// cloud-init finds the seed by its volume label and reads the files by their lowercase names
// with a hyphen, which plain ISO 9660 names cannot hold (d-characters: A-Z 0-9 _), so the
// image carries a Joliet supplementary volume descriptor (UCS-2 names) next to the primary
// one, as `genisoimage -V cidata -J` writes. Linux's isofs reads the Joliet names. Rock Ridge
// is not needed. The writer is deterministic: the same files give the same bytes.
package cloudinit

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sort"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// Label is the volume label cloud-init's NoCloud data source looks for.
const Label = "cidata"

// Seed is the content of a NoCloud seed.
type Seed struct {
	UserData      string
	MetaData      string
	NetworkConfig string // omitted from the image when empty
}

// Files returns the seed's files by name.
func (s Seed) Files() map[string][]byte {
	f := map[string][]byte{"user-data": []byte(s.UserData), "meta-data": []byte(s.MetaData)}
	if s.NetworkConfig != "" {
		f["network-config"] = []byte(s.NetworkConfig)
	}
	return f
}

// ISO returns the seed as an ISO 9660 image labelled "cidata".
func (s Seed) ISO() ([]byte, error) { return WriteISO(Label, s.Files()) }

const sector = 2048

// WriteISO builds an ISO 9660 image with a Joliet tree holding files in its root directory.
// Names must be at most 64 characters (Joliet's limit) and contain no '/'. It lays the image
// out sector by sector in the order ECMA-119 defines (97 lines), which reads best in one place.
func WriteISO(label string, files map[string][]byte) ([]byte, error) {
	names := make([]string, 0, len(files))
	for n := range files {
		// Joliet names are UCS-2: a name that is not UTF-8 would be written as U+FFFD and read
		// back as another name (found by FuzzSeedISO); Joliet forbids * / : ; ? \ and controls.
		if n == "" || len(n) > 64 || strings.ContainsAny(n, "*/:;?\\") || !utf8.ValidString(n) || strings.IndexFunc(n, unicode.IsControl) >= 0 {
			return nil, fmt.Errorf("iso file name %q: want 1-64 bytes of UTF-8 without control characters or * / : ; ? \\", n)
		}
		names = append(names, n)
	}
	sort.Strings(names)
	if len(label) > 16 {
		return nil, fmt.Errorf("iso volume label %q: at most 16 characters", label)
	}

	// Layout: 0-15 system area, 16 PVD, 17 Joliet SVD, 18 terminator, 19-22 path tables
	// (primary L/M, Joliet L/M), 23 primary root, 24 Joliet root, then file data.
	const pvdSec, svdSec, termSec, ptSec, rootSec, jrootSec, dataSec = 16, 17, 18, 19, 23, 24, 25
	extents := make([]uint32, len(names))
	next := uint32(dataSec)
	for i, n := range names {
		extents[i] = next
		next += uint32((len(files[n]) + sector - 1) / sector)
		if len(files[n]) == 0 {
			extents[i] = 0 // an empty file has no extent
		}
	}
	total := next

	img := make([]byte, int(total)*sector)
	put := func(sec uint32, b []byte) { copy(img[int(sec)*sector:], b) }

	// Short 8.3 primary names (upper-case d-characters), unique by construction of the index.
	primary := make([]string, len(names))
	for i, n := range names {
		primary[i] = shortName(n, i)
	}
	pOrder := sortedIndex(primary)

	rootDir := func(self uint32, ids [][]byte, order []int) []byte {
		var b bytes.Buffer
		b.Write(dirRecord([]byte{0}, self, sector, true))
		b.Write(dirRecord([]byte{1}, self, sector, true))
		for _, i := range order {
			b.Write(dirRecord(ids[i], extents[i], uint32(len(files[names[i]])), false))
		}
		return b.Bytes()
	}
	pIDs := make([][]byte, len(names))
	jIDs := make([][]byte, len(names))
	for i := range names {
		pIDs[i] = []byte(primary[i] + ";1")
		jIDs[i] = ucs2(names[i])
	}
	jOrder := make([]int, len(names))
	for i := range jOrder {
		jOrder[i] = i // names are sorted; UCS-2 of ASCII sorts the same
	}
	pRoot := rootDir(rootSec, pIDs, pOrder)
	jRoot := rootDir(jrootSec, jIDs, jOrder)
	if len(pRoot) > sector || len(jRoot) > sector {
		return nil, fmt.Errorf("iso: too many files for a one-sector root directory")
	}
	put(rootSec, pRoot)
	put(jrootSec, jRoot)

	// Path tables: one entry, the root (10 bytes).
	pathTable := func(loc uint32, bigEndian bool) []byte {
		b := make([]byte, 10)
		b[0] = 1
		if bigEndian {
			binary.BigEndian.PutUint32(b[2:], loc)
			binary.BigEndian.PutUint16(b[6:], 1)
		} else {
			binary.LittleEndian.PutUint32(b[2:], loc)
			binary.LittleEndian.PutUint16(b[6:], 1)
		}
		return b
	}
	put(ptSec, pathTable(rootSec, false))
	put(ptSec+1, pathTable(rootSec, true))
	put(ptSec+2, pathTable(jrootSec, false))
	put(ptSec+3, pathTable(jrootSec, true))

	put(pvdSec, volumeDescriptor(1, label, total, ptSec, ptSec+1, rootSec, false))
	put(svdSec, volumeDescriptor(2, label, total, ptSec+2, ptSec+3, jrootSec, true))
	term := make([]byte, 7)
	term[0] = 255
	copy(term[1:], "CD001")
	term[6] = 1
	put(termSec, term)

	for i, n := range names {
		if extents[i] != 0 {
			put(extents[i], files[n])
		}
	}
	return img, nil
}

// shortName maps "user-data" to "USER_DAT" (8 d-characters, no extension), made unique by i.
func shortName(n string, i int) string {
	var b strings.Builder
	for _, r := range strings.ToUpper(n) {
		if (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	s := b.String()
	suffix := fmt.Sprintf("%d", i)
	if len(s) > 8-len(suffix) {
		s = s[:8-len(suffix)]
	}
	return s + suffix + "."
}

func sortedIndex(ss []string) []int {
	idx := make([]int, len(ss))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return ss[idx[a]] < ss[idx[b]] })
	return idx
}

func ucs2(s string) []byte {
	u := utf16.Encode([]rune(s))
	b := make([]byte, 2*len(u))
	for i, c := range u {
		binary.BigEndian.PutUint16(b[2*i:], c)
	}
	return b
}

func both32(b []byte, v uint32) {
	binary.LittleEndian.PutUint32(b, v)
	binary.BigEndian.PutUint32(b[4:], v)
}

func both16(b []byte, v uint16) {
	binary.LittleEndian.PutUint16(b, v)
	binary.BigEndian.PutUint16(b[2:], v)
}

// recordingDate is fixed so images are reproducible: 2000-01-01 00:00:00 UTC.
var recordingDate = []byte{100, 1, 1, 0, 0, 0, 0}

func dirRecord(id []byte, extent, size uint32, dir bool) []byte {
	n := 33 + len(id)
	if n%2 == 1 {
		n++
	}
	b := make([]byte, n)
	b[0] = byte(n)
	both32(b[2:], extent)
	both32(b[10:], size)
	copy(b[18:], recordingDate)
	if dir {
		b[25] = 2
	}
	both16(b[28:], 1)
	b[32] = byte(len(id))
	copy(b[33:], id)
	return b
}

// volumeDescriptor writes a primary (type 1) or Joliet supplementary (type 2) descriptor.
func volumeDescriptor(typ byte, label string, total, ptL, ptM, root uint32, joliet bool) []byte {
	b := make([]byte, sector)
	b[0] = typ
	copy(b[1:], "CD001")
	b[6] = 1
	text := func(off, size int, s string) {
		if joliet {
			for i := 0; i+1 < size; i += 2 {
				binary.BigEndian.PutUint16(b[off+i:], ' ')
			}
			copy(b[off:off+size], ucs2(s))
			return
		}
		copy(b[off:off+size], fmt.Sprintf("%-*s", size, s))
	}
	text(8, 32, "LINUX")
	text(40, 32, label)
	both32(b[80:], total)
	if joliet {
		copy(b[88:], "%/E") // UCS-2 level 3
	}
	both16(b[120:], 1)
	both16(b[124:], 1)
	both16(b[128:], sector)
	both32(b[132:], 10)
	binary.LittleEndian.PutUint32(b[140:], ptL)
	binary.BigEndian.PutUint32(b[148:], ptM)
	copy(b[156:], dirRecord([]byte{0}, root, sector, true))
	for _, f := range [][2]int{{190, 128}, {318, 128}, {446, 128}, {574, 128}, {702, 37}, {739, 37}, {776, 37}} {
		text(f[0], f[1], "")
	}
	text(574, 128, "VGPU-HOST")
	date := []byte("2000010100000000\x00")
	copy(b[813:], date)
	copy(b[830:], date)
	copy(b[847:], "0000000000000000\x00")
	copy(b[864:], "0000000000000000\x00")
	b[881] = 1
	return b
}
