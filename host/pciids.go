package host

import (
	"bytes"
	"io"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
)

// pciIDsPaths are where Debian's pci.ids package (and other distributions) install the PCI ID
// database, relative to a root. Scan looks under the host root first, then on this machine.
var pciIDsPaths = []string{"usr/share/misc/pci.ids", "usr/share/hwdata/pci.ids", "usr/share/pci.ids"}

// PCIIDs resolves vendor, device, subsystem and class names from a pci.ids file. It reads the
// file once, on the first lookup, and then finds each name by searching the raw bytes for the
// one line it needs: no map of all ~36,000 lines is ever built (ghw's pci.New() builds one on
// every call, ~40 ms), so a scan pays only for the IDs present on the host. The zero value and
// a nil *PCIIDs answer "" for every lookup. Safe for concurrent use.
type PCIIDs struct {
	paths []string
	// root holds the first inRoot of paths, read inside it; the others are this machine's.
	root   Root
	inRoot int
	once   sync.Once
	data   []byte
	path   string
	err    error

	mu     sync.Mutex
	memo   map[idsKey]string         // lookups already answered: a host has many functions with the same IDs
	blocks map[string]*vendorSection // vendor ID -> its section, found or being found

	classOnce  sync.Once
	classStart int // offset of the device-class section ("C 00  ..."), at the end of the file

	// gaps are the stretches of data that the searches for vendors' lines found none in,
	// so that no byte of the file is searched twice (topLine).
	gaps gapMemo
}

// vendorSection is a vendor's section, being found until done closes.
type vendorSection struct {
	done chan struct{}
	b    []byte
}

// vendorBlock returns the section of vendor (its line and its devices), nil when absent. A
// vendor's section is found once: Intel's and NVIDIA's hold thousands of lines, and walking
// them again for every device ID made names cost more than the rest of a scan. A lookup of a
// section another goroutine is finding waits for it.
func (p *PCIIDs) vendorBlock(vendor string) []byte {
	vendor = strings.ToLower(vendor)
	p.mu.Lock()
	if f, ok := p.blocks[vendor]; ok {
		p.mu.Unlock()
		<-f.done
		return f.b
	}
	f := p.newSection(vendor)
	p.mu.Unlock()
	p.find(vendor, f)
	return f.b
}

// newSection records that vendor's section is being found; p.mu is held.
func (p *PCIIDs) newSection(vendor string) *vendorSection {
	f := &vendorSection{done: make(chan struct{})}
	if p.blocks == nil {
		p.blocks = map[string]*vendorSection{}
	}
	p.blocks[vendor] = f
	return f
}

// find finds vendor's section into f and closes f.done.
func (p *PCIIDs) find(vendor string, f *vendorSection) {
	data := p.load()
	if vs := vendorLineIn(data, vendor, &p.gaps); vs >= 0 {
		f.b = data[vs:]
		if end := topLine(data, vs+1, len(data), &p.gaps); end >= 0 {
			f.b = data[vs:end]
		}
	}
	close(f.done)
}

// classSection returns the device-class part of the file ("C 00  Unclassified device" to the
// end), so that class lookups do not search the ~1.3 MB of vendors before it.
func (p *PCIIDs) classSection() []byte {
	data := p.load()
	p.classOnce.Do(func() {
		p.classStart = -1
		if i := bytes.LastIndex(data, []byte("\nC 00  ")); i >= 0 { // at the end: search from there
			p.classStart = i
		} else if i := bytes.Index(data, []byte("\nC ")); i >= 0 {
			p.classStart = i
		}
	})
	if p.classStart < 0 {
		return nil
	}
	return data[p.classStart:]
}

// idsKey is a lookup the memo answers: the kind ('v'endor, 'd'evice, 's'ubsystem, 'c'lass)
// and the IDs asked for. A struct of the strings the caller has: a key joined into one string
// was an allocation per lookup, four per device named (2,400 on the 64-GPU host).
type idsKey struct {
	kind       byte
	a, b, c, d string
}

// cached answers key from the memo or computes it with f.
func (p *PCIIDs) cached(key idsKey, f func() string) string {
	if p == nil {
		return ""
	}
	p.mu.Lock()
	v, ok := p.memo[key]
	p.mu.Unlock()
	if ok {
		return v
	}
	v = f()
	p.mu.Lock()
	if p.memo == nil {
		p.memo = map[idsKey]string{}
	}
	p.memo[key] = v
	p.mu.Unlock()
	return v
}

// NewPCIIDs returns a lazy resolver that uses the first readable pci.ids among root's
// usr/share/misc/pci.ids (and the other usual places), then this machine's.
func NewPCIIDs(root Root) *PCIIDs {
	var paths []string
	for _, p := range pciIDsPaths {
		paths = append(paths, root.Path(p))
	}
	if !root.IsReal() {
		for _, p := range pciIDsPaths {
			paths = append(paths, string(os.PathSeparator)+p)
		}
	}
	return &PCIIDs{paths: paths, root: root, inRoot: len(pciIDsPaths)}
}

// NewPCIIDsFile returns a lazy resolver that reads exactly the file at path.
func NewPCIIDsFile(path string) *PCIIDs { return &PCIIDs{paths: []string{path}} }

func (p *PCIIDs) load() []byte {
	if p == nil {
		return nil
	}
	p.once.Do(func() {
		for i, path := range p.paths {
			root := Root{}
			if i < p.inRoot {
				root = p.root
			}
			b, mapped, err := mapFile(root, path)
			if err == nil {
				p.data, p.path = b, path
				if mapped {
					runtime.AddCleanup(p, func(b []byte) { _ = syscall.Munmap(b) }, b)
				}
				return
			}
			if p.err == nil {
				p.err = err
			}
		}
	})
	return p.data
}

// mapFile maps the file at path read-only (mapped true), or reads it when it cannot be
// mapped. A scan reads a few pages of pci.ids's 1.3 MB (the sections of the vendors present
// and the class section at the end); reading it all cost more than the lookups. Updates of
// pci.ids replace the file (a new inode), so a mapping never sees it change.
func mapFile(root Root, path string) (data []byte, mapped bool, err error) {
	f, err := root.openHostFile(path)
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, false, err
	}
	if n := st.Size(); st.Mode().IsRegular() && n > 0 && n < 1<<30 {
		if b, err := syscall.Mmap(int(f.Fd()), 0, int(n), syscall.PROT_READ, syscall.MAP_SHARED); err == nil {
			return b, true, nil
		}
	}
	b, err := io.ReadAll(f)
	return b, false, err
}

// Path returns the pci.ids file in use ("" when none was found); it triggers the load.
func (p *PCIIDs) Path() string {
	p.load()
	if p == nil {
		return ""
	}
	return p.path
}

// Vendor returns the vendor name for a 4-hex-digit vendor ID such as "10de", or "".
func (p *PCIIDs) Vendor(vendor string) string {
	return p.cached(idsKey{kind: 'v', a: vendor}, func() string {
		_, name := findLine(p.vendorBlock(vendor), 0, []byte("\n"+strings.ToLower(vendor)+"  "))
		return name
	})
}

// Device returns the device name for vendor and device IDs, or "".
func (p *PCIIDs) Device(vendor, device string) string {
	return p.cached(idsKey{kind: 'd', a: vendor, b: device}, func() string { return p.device(vendor, device) })
}

func (p *PCIIDs) device(vendor, device string) string {
	block := p.vendorBlock(vendor)
	return lineName(block, deviceLine(block, strings.ToLower(device)), len("\n\t0000  "))
}

// Subsystem returns the subsystem name for a device's subsystem vendor/device IDs, or "".
func (p *PCIIDs) Subsystem(vendor, device, subVendor, subDevice string) string {
	return p.cached(idsKey{kind: 's', a: vendor, b: device, c: subVendor, d: subDevice}, func() string { return p.subsystem(vendor, device, subVendor, subDevice) })
}

func (p *PCIIDs) subsystem(vendor, device, subVendor, subDevice string) string {
	vblock := p.vendorBlock(vendor)
	ds := deviceLine(vblock, strings.ToLower(device))
	if ds < 0 {
		return ""
	}
	dblock := sectionOf(vblock, ds, 1)
	_, name := findLine(dblock, 0, []byte("\n\t\t"+strings.ToLower(subVendor)+" "+strings.ToLower(subDevice)+"  "))
	return name
}

// Class returns the name of a 6-hex-digit class code such as "030200": the subclass name
// ("3D controller") as lspci prints it, else the base class name, else "".
func (p *PCIIDs) Class(class string) string {
	return p.cached(idsKey{kind: 'c', a: class}, func() string { return p.class(class) })
}

func (p *PCIIDs) class(class string) string {
	class = strings.ToLower(class)
	if len(class) < 4 {
		return ""
	}
	data := p.classSection()
	cs, cname := findLine(data, 0, []byte("\nC "+class[:2]+"  "))
	if cs < 0 {
		return ""
	}
	block := sectionOf(data, cs, 0)
	if _, sub := findLine(block, 0, []byte("\n\t"+class[2:4]+"  ")); sub != "" {
		return sub
	}
	return cname
}

// findLine finds the line starting with key (which begins with "\n") and returns the offset
// of that "\n" in data and the rest of the line (the name); -1 and "" when absent.
func findLine(data []byte, from int, key []byte) (int, string) {
	if len(data) == 0 {
		return -1, ""
	}
	i := bytes.Index(data[from:], key)
	if i < 0 {
		return -1, ""
	}
	i += from
	rest := data[i+len(key):]
	end := bytes.IndexByte(rest, '\n')
	if end < 0 {
		end = len(rest)
	}
	return i, string(bytes.TrimSpace(rest[:end])) // trimmed first: one copy of the right size
}

// lineName is the name on the line whose newline is at offset i of data, after a key of n
// bytes (the newline, the ID and two spaces), as findLine returns it; "" when i is -1.
func lineName(data []byte, i, n int) string {
	if i < 0 || i+n > len(data) {
		return ""
	}
	rest := data[i+n:]
	end := bytes.IndexByte(rest, '\n')
	if end < 0 {
		end = len(rest)
	}
	return string(bytes.TrimSpace(rest[:end]))
}

// deviceLine returns the offset of the newline before device's line ("\n\t2206  GA102 …") in
// a vendor's section (vendorBlock), -1 when absent. Like vendorLine it bisects, since pci.ids
// lists a vendor's devices in ascending ID order too: a search of Intel's 400 KB section, line
// by line for the newline that starts the key, was most of the names' cost on a small host,
// and more for an ID not in the file. device is four lower-case hex digits.
func deviceLine(block []byte, device string) int {
	first := bytes.IndexByte(block[min(1, len(block)):], '\n') // the end of the vendor's own line
	if first < 0 {
		return -1
	}
	return bisectLines(block, first+1, nextDeviceLine, 2, device)
}

// bisectLines finds, in data[from:], the line whose newline is at an offset next returns and
// whose 4-digit ID (at that offset + at) is id, the IDs of those lines being in ascending
// order: vendorLine and deviceLine. It returns the offset, or -1.
func bisectLines(data []byte, from int, next func(data []byte, from, to int) int, at int, id string) int {
	lo, hi := from, len(data)
	for lo < hi {
		mid := lo + (hi-lo)/2
		i := next(data, mid, hi)
		if i < 0 {
			hi = mid // no such line in [mid, hi): it is before mid
			continue
		}
		switch got := string(data[i+at : i+at+4]); {
		case got == id:
			return i
		case got < id:
			lo = i + 1
		default:
			hi = mid // i is the first such line after mid, and it is past id
		}
	}
	return -1
}

// nextDeviceLine returns the offset of the first newline in [from, to) that starts a device
// line (a tab, four lower-case hex digits, two spaces), or -1 when there is none before to or
// before the end of the vendor's section (a line indented by no tab that is not a comment).
func nextDeviceLine(data []byte, from, to int) int {
	for i := from; i < to; {
		j := bytes.IndexByte(data[i:to], '\n')
		if j < 0 {
			return -1
		}
		i += j
		line := data[i+1:]
		switch {
		case len(line) >= 7 && line[0] == '\t' && line[5] == ' ' && line[6] == ' ' && isLowerHex(line[1:5]):
			return i
		case len(line) > 0 && line[0] != '\t' && line[0] != '#' && line[0] != '\n':
			return -1 // the next vendor, or the classes
		}
		i++
	}
	return -1
}

// vendorLine returns the offset of the newline before vendor's line ("\n1af4  Red Hat, Inc."),
// or -1, by bisection: pci.ids lists vendors in ascending ID order (the database is kept so),
// so ~20 probes replace a search through up to 1.3 MB, which was most of `inspect` on a small
// host, and an ID not in the file (QEMU's 1234) costs no more. vendor is four lower-case hex
// digits.
func vendorLine(data []byte, vendor string) int { return vendorLineIn(data, vendor, nil) }

// vendorLineIn is vendorLine searching between probes with the memo m (nil: none).
func vendorLineIn(data []byte, vendor string, m *gapMemo) int {
	return bisectLines(data, 0, func(data []byte, from, to int) int { return nextVendorLineIn(data, from, to, m) }, 1, vendor)
}

// nextVendorLine returns the offset of the first newline in [from, to) that starts a vendor
// line (four lower-case hex digits, two spaces), or -1. The class section ("C 00  …") ends
// the vendors.
func nextVendorLine(data []byte, from, to int) int { return nextVendorLineIn(data, from, to, nil) }

// nextVendorLineIn is nextVendorLine with the memo m (nil: none). A vendor's line is a
// top-level line (topLine), so only those are looked at.
func nextVendorLineIn(data []byte, from, to int, m *gapMemo) int {
	for i := from; i < to; {
		i = topLine(data, i, to, m)
		if i < 0 {
			return -1
		}
		if line := data[i+1:]; len(line) >= 6 && line[4] == ' ' && line[5] == ' ' && isLowerHex(line[:4]) {
			return i
		} else if len(line) >= 2 && line[0] == 'C' && line[1] == ' ' {
			return -1
		}
		i++
	}
	return -1
}

// topLine returns the offset of the first newline in [from, to) that starts a top-level line
// (neither indented, a comment nor blank: a vendor's line, the class section's), or -1; what
// sectionOf(data, start, 0) ends at. It walks the lines in between, and remembers in m (nil:
// nothing to remember) the stretch it found none in, then jumps over the stretches m knows:
// the probes of different vendors' bisections and the ends of their sections land in the
// same big sections (Intel's holds 8,500 lines, 370 KB), and on the real-kernel snapshots
// 1.75 MB were walked, line by line, for 550 KB of distinct lines.
func topLine(data []byte, from, to int, m *gapMemo) int {
	start, i := from, from
	defer func() { m.add(start, min(i, to)) }()
	for i < to {
		gapFrom, gapTo := m.next(i)
		if gapFrom <= i {
			i = gapTo // inside a known stretch: on from its end
			continue
		}
		end := min(to, gapFrom)
		for i < end {
			j := bytes.IndexByte(data[i:end], '\n')
			if j < 0 {
				i = end
				break
			}
			i += j
			if i+1 < len(data) && data[i+1] != '\t' && data[i+1] != '#' && data[i+1] != '\n' {
				return i
			}
			i++
		}
	}
	return -1
}

// gapMemo is a set of disjoint stretches [from, to) of one pci.ids file holding no newline
// that starts a top-level line, sorted. The zero value is empty; a nil *gapMemo holds nothing
// and remembers nothing. Safe for concurrent use (one PCIIDs answers every scan of a root).
type gapMemo struct {
	mu   sync.Mutex
	gaps [][2]int
}

// next returns the first stretch that ends after i (its from may be at or before i), or
// from = to = maxInt when there is none.
func (m *gapMemo) next(i int) (from, to int) {
	const none = int(^uint(0) >> 1)
	if m == nil {
		return none, none
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	k := sort.Search(len(m.gaps), func(k int) bool { return m.gaps[k][1] > i })
	if k == len(m.gaps) {
		return none, none
	}
	return m.gaps[k][0], m.gaps[k][1]
}

// add remembers [from, to), merged with the stretches it touches or overlaps.
func (m *gapMemo) add(from, to int) {
	if m == nil || from >= to {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	lo := sort.Search(len(m.gaps), func(k int) bool { return m.gaps[k][1] >= from })
	hi := lo
	for hi < len(m.gaps) && m.gaps[hi][0] <= to {
		from, to = min(from, m.gaps[hi][0]), max(to, m.gaps[hi][1])
		hi++
	}
	// In place: a new slice per stretch was two thirds of the lookups' allocations (67 of
	// 119 for a QEMU guest's IDs).
	if lo == hi {
		m.gaps = slices.Insert(m.gaps, lo, [2]int{from, to})
		return
	}
	m.gaps[lo] = [2]int{from, to}
	m.gaps = slices.Delete(m.gaps, lo+1, hi)
}

func isLowerHex(b []byte) bool {
	for _, c := range b {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// sectionOf returns data from the line at start to just before the next line indented by at
// most depth tabs (the next vendor for depth 0, the next device for depth 1). Comment lines
// ("#") inside a section do not end it.
func sectionOf(data []byte, start, depth int) []byte {
	i := start + 1
	for {
		j := bytes.IndexByte(data[i:], '\n')
		if j < 0 {
			return data[start:]
		}
		i += j + 1
		if i >= len(data) {
			return data[start:]
		}
		tabs := 0
		for i+tabs < len(data) && data[i+tabs] == '\t' {
			tabs++
		}
		if i+tabs >= len(data) {
			return data[start:]
		}
		if tabs <= depth && data[i+tabs] != '#' && data[i+tabs] != '\n' {
			return data[start : i-1]
		}
	}
}
