// Package snapshot writes the part of a host that vgpu-host reads as a tar archive: what a user
// attaches to a bug report, and what a test replays with --host-root (docs/snapshot.md). It is
// the one implementation of the rules the shared fixtures were taken by (ghw's SNAPSHOT.md):
// regular files by content, symlinks as symlinks, directories as directories; write-only
// attributes (bind, new_id, create, remove, …) and BAR, ROM and VPD files skipped.
//
// It only reads. Every file is opened with O_NONBLOCK and read in a goroutine under a deadline,
// since a sysfs read can block on the device: one that does is left behind and listed as
// skipped. Files over MaxFile are skipped, and the archive stops with an error at MaxTotal.
// Serial numbers and UUIDs are zeroed (Scrub). Character devices vgpu-host looks for
// (/dev/kvm, /dev/vfio/N, /dev/dri/renderD*) become empty regular files, which is all
// vgpu-host asks of them (that they exist).
package snapshot

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
)

// Trees are the directories vgpu-host reads, relative to the host root, as globs. Each is
// copied whole, without following symlinks.
var Trees = []string{
	"sys/devices/pci*",
	"sys/bus/pci/devices", "sys/bus/pci/drivers", "sys/bus/pci/slots",
	"sys/kernel/iommu_groups", "sys/class/iommu", "sys/devices/virtual/iommu",
	"sys/class/mdev_bus", "sys/bus/mdev",
	"sys/bus/usb/devices", "sys/class/net", "sys/class/block",
	"sys/module/vfio*", "sys/module/mdev", "sys/module/nvidia*", "sys/module/kvm*",
	"sys/devices/system/cpu/cpu[0-9]*/topology",
	"sys/devices/system/node/node[0-9]*",
}

// ParentsOf are globs whose matches' parent directories are copied whole: the mdev parents
// outside PCI (mbochs, mdpy, mtty), as vgpu-host finds them.
var ParentsOf = []string{"sys/devices/virtual/*/*/mdev_supported_types"}

// Files are single files vgpu-host reads, relative to the host root (missing ones are left out).
var Files = []string{
	"proc/cpuinfo", "proc/cmdline", "proc/interrupts", "proc/mounts", "proc/net/route", "proc/net/ipv6_route",
	"sys/devices/system/cpu/online", "sys/devices/system/cpu/possible", "sys/devices/system/cpu/present",
	"sys/devices/system/node/online", "sys/devices/system/node/possible",
}

// Devices are the device nodes vgpu-host checks for, as globs; each becomes an empty file.
var Devices = []string{"dev/kvm", "dev/vfio/*", "dev/dri/renderD*"}

// VFIOList is the listing of /dev/vfio the fixtures carry (`ls -l /dev/vfio` there).
const VFIOList = "dev/vfio.list"

// Limits of a snapshot.
const (
	MaxFile  = 1 << 20  // a larger file is skipped
	MaxTotal = 64 << 20 // the archive's file contents stop here, with an error
	// ReadTimeout is how long one file may take to read before it is skipped.
	ReadTimeout = 2 * time.Second
)

// ErrTooLarge is returned when the files to archive pass MaxTotal.
var ErrTooLarge = errors.New("snapshot too large")

// Options are a snapshot's inputs beyond the host root.
type Options struct {
	// Extra are files to add at the archive's top level, by name (nvml-facts.json).
	Extra map[string][]byte
	// ReadTimeout overrides ReadTimeout (tests).
	ReadTimeout time.Duration
	// Now is the modification time of every entry (default: the time Write starts).
	Now time.Time
}

// Skipped is a file left out, and why.
type Skipped struct {
	Path string `json:"path"`
	Why  string `json:"why"`
}

// Report says what a snapshot holds.
type Report struct {
	Entries int       `json:"entries"`
	Bytes   int64     `json:"bytes"`
	Skipped []Skipped `json:"skipped"`
}

// Write archives root's Trees, ParentsOf, Files and Devices, and opt.Extra, to w as tar, in a
// stable order. It writes nothing under root.
func Write(ctx context.Context, root host.Root, w io.Writer, opt Options) (Report, error) {
	if opt.ReadTimeout == 0 {
		opt.ReadTimeout = ReadTimeout
	}
	if opt.Now.IsZero() {
		opt.Now = time.Now()
	}
	s := &snap{root: root, tw: tar.NewWriter(w), opt: opt, dirs: map[string]bool{}, rep: Report{Skipped: []Skipped{}}}
	if err := s.all(ctx); err != nil {
		return s.rep, err
	}
	if err := s.tw.Close(); err != nil {
		return s.rep, fmt.Errorf("write snapshot: %w", err)
	}
	return s.rep, nil
}

type snap struct {
	root host.Root
	tw   *tar.Writer
	opt  Options
	dirs map[string]bool // written directories
	seen map[string]bool // written entries
	rep  Report
}

func (s *snap) all(ctx context.Context) error {
	s.seen = map[string]bool{}
	var trees []string
	for _, g := range Trees {
		m, _ := filepath.Glob(s.root.Path(g))
		trees = append(trees, m...)
	}
	for _, g := range ParentsOf {
		m, _ := filepath.Glob(s.root.Path(g))
		for _, p := range m {
			trees = append(trees, filepath.Dir(p))
		}
	}
	sort.Strings(trees)
	for _, t := range trees {
		if !s.inside(t) {
			continue
		}
		if err := s.tree(ctx, t); err != nil {
			return err
		}
	}
	for _, f := range Files {
		p := s.root.Path(f)
		if st, err := os.Lstat(p); err == nil && st.Mode().IsRegular() && s.inside(p) {
			if err := s.file(ctx, p, st); err != nil {
				return err
			}
		}
	}
	if err := s.devices(); err != nil {
		return err
	}
	names := make([]string, 0, len(s.opt.Extra))
	for n := range s.opt.Extra {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := s.put(&tar.Header{Typeflag: tar.TypeReg, Name: n, Mode: 0o644}, s.opt.Extra[n]); err != nil {
			return err
		}
	}
	return nil
}

// rel is p relative to the root, with slashes, as the archive names it.
func (s *snap) rel(p string) string {
	r, err := filepath.Rel(s.root.Dir(), p)
	if err != nil {
		return p
	}
	return filepath.ToSlash(r)
}

// tree copies the tree at dir without following symlinks.
func (s *snap) tree(ctx context.Context, dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if cerr := ctx.Err(); cerr != nil {
			return fmt.Errorf("snapshot %s: %w", s.rel(p), cerr)
		}
		if err != nil {
			s.skip(p, err.Error())
			if d != nil && d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		st, err := d.Info()
		if err != nil {
			s.skip(p, err.Error())
			return nil
		}
		switch {
		case st.IsDir():
			return s.dir(p)
		case st.Mode()&fs.ModeSymlink != 0:
			t, err := os.Readlink(p)
			if err != nil {
				s.skip(p, err.Error())
				return nil
			}
			return s.put(&tar.Header{Typeflag: tar.TypeSymlink, Name: s.rel(p), Linkname: t, Mode: 0o777}, nil)
		case st.Mode().IsRegular():
			return s.file(ctx, p, st)
		}
		return nil
	})
}

// Unreadable reports whether a file is left out by name or mode: write-only attributes (no
// read bit) and the files whose reads map or fetch device memory (BARs, the ROM, VPD).
func Unreadable(name string, mode fs.FileMode) bool {
	if mode.Perm()&0o444 == 0 {
		return true
	}
	if name == "rom" || name == "vpd" {
		return true
	}
	n, ok := strings.CutPrefix(name, "resource")
	return ok && n != "" && n[0] >= '0' && n[0] <= '9'
}

// file copies one regular file, scrubbed, unless it is left out.
func (s *snap) file(ctx context.Context, p string, st fs.FileInfo) error {
	name := filepath.Base(p)
	if Unreadable(name, st.Mode()) {
		return nil
	}
	b, err := readBounded(ctx, p, s.opt.ReadTimeout)
	if err != nil {
		s.skip(p, err.Error())
		return nil
	}
	b = Scrub(s.rel(p), b)
	if s.rep.Bytes+int64(len(b)) > MaxTotal {
		return fmt.Errorf("snapshot %s: %w: over %d MiB of files", s.root.Dir(), ErrTooLarge, MaxTotal>>20)
	}
	s.rep.Bytes += int64(len(b))
	return s.put(&tar.Header{Typeflag: tar.TypeReg, Name: s.rel(p), Mode: int64(st.Mode().Perm() | 0o600)}, b)
}

// errSlow and errLarge say why a file was skipped. errLarge's text is MaxFile's, written out
// (TestErrLargeSaysMaxFile): errors.New is data, fmt.Errorf would run at every start.
var (
	errSlow  = errors.New("read timed out")
	errLarge = errors.New("larger than 1024 KiB")
)

// readBounded reads at most MaxFile bytes of p within timeout. The read runs in a goroutine:
// a sysfs read that blocks in the kernel cannot be interrupted, so on timeout it is left
// behind (its goroutine ends when the kernel answers) and the file is skipped.
func readBounded(ctx context.Context, p string, timeout time.Duration) ([]byte, error) {
	type result struct {
		b   []byte
		err error
	}
	ch := make(chan result, 1)
	go func() {
		f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
		if err != nil {
			ch <- result{nil, err}
			return
		}
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, MaxFile+1))
		if err == nil && len(b) > MaxFile {
			err = errLarge
		}
		ch <- result{b, err}
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case r := <-ch:
		if r.err != nil {
			var pe *fs.PathError
			if errors.As(r.err, &pe) {
				return nil, pe.Err
			}
		}
		return r.b, r.err
	case <-t.C:
		return nil, errSlow
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// devices writes Devices as empty files and VFIOList.
func (s *snap) devices() error {
	var list strings.Builder
	for _, g := range Devices {
		m, _ := filepath.Glob(s.root.Path(g))
		for _, p := range m {
			st, err := os.Lstat(p)
			if err != nil || st.IsDir() || !s.inside(p) {
				continue
			}
			if strings.HasPrefix(s.rel(p), "dev/vfio/") {
				fmt.Fprintf(&list, "%s %s\n", st.Mode(), filepath.Base(p))
			}
			if err := s.put(&tar.Header{Typeflag: tar.TypeReg, Name: s.rel(p), Mode: 0o600}, nil); err != nil {
				return err
			}
		}
	}
	if list.Len() == 0 {
		if b, err := readBounded(context.Background(), s.root.Path(VFIOList), s.opt.ReadTimeout); err == nil {
			list.Write(b) // a snapshot of a snapshot keeps the listing
		}
	}
	if list.Len() > 0 {
		return s.put(&tar.Header{Typeflag: tar.TypeReg, Name: VFIOList, Mode: 0o644}, []byte(list.String()))
	}
	return nil
}

// dir writes the directory p (and its parents) once.
func (s *snap) dir(p string) error {
	name := s.rel(p)
	if name == "." || s.dirs[name] {
		return nil
	}
	if parent := filepath.Dir(p); parent != p {
		if err := s.dir(parent); err != nil {
			return err
		}
	}
	s.dirs[name] = true
	return s.put(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: 0o755}, nil)
}

// put writes one entry, its parent directories first; an entry already written is not
// written again (trees overlap: sys/class/net links into sys/devices).
func (s *snap) put(h *tar.Header, body []byte) error {
	name := strings.TrimSuffix(h.Name, "/")
	if s.seen[name] {
		return nil
	}
	s.seen[name] = true
	if dir := filepath.Dir(filepath.FromSlash(name)); dir != "." && h.Typeflag != tar.TypeDir {
		if err := s.dir(s.root.Path(dir)); err != nil {
			return err
		}
	}
	h.ModTime, h.Size, h.Format = s.opt.Now, int64(len(body)), tar.FormatPAX
	if h.Typeflag != tar.TypeReg {
		h.Size = 0
	}
	if err := s.tw.WriteHeader(h); err != nil {
		return fmt.Errorf("write snapshot entry %s: %w", h.Name, err)
	}
	if _, err := s.tw.Write(body); err != nil {
		return fmt.Errorf("write snapshot entry %s: %w", h.Name, err)
	}
	s.rep.Entries++
	return nil
}

// inside reports whether p, its links resolved, is under the root (Root.CheckInside): a tree,
// file or device node whose path a link in a fake root or a snapshot leads out of it, to this
// machine's files, is left out, with the reason. The walk below a tree follows no link, and a
// file is opened O_NOFOLLOW, so the start of each is what needs checking.
func (s *snap) inside(p string) bool {
	if err := s.root.CheckInside(p); err != nil {
		s.skip(p, err.Error())
		return false
	}
	return true
}

func (s *snap) skip(p, why string) {
	s.rep.Skipped = append(s.rep.Skipped, Skipped{Path: s.rel(p), Why: why})
}
