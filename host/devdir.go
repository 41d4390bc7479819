package host

import (
	"bytes"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// devDir is a directory read one file after another (a PCI function's, an mdev type's), opened
// once (O_PATH) so that every attribute is opened relative to it: the kernel resolves
// ROOT/sys/bus/pci/devices/ADDR, a symlink into the device hierarchy
// (devices/pci0000:00/0000:00:01.0/0000:01:00.0/...), once per function instead of once per
// file. On the 64-GPU host that path walk was most of Scan's system time.
//
// Errors name the full path exactly as a read of the full path does (the inventory's
// warnings do not change). A directory that cannot be opened falls back to full paths, so
// that every read fails, or succeeds, as it did before.
type devDir struct {
	fd  int    // the open directory, or atCWD: names are then joined to dir
	dir string // the directory's path, for messages and the fallback
	t   *tree  // the root the directory is under, nil for "/": reads resolve inside it (devDir.openAt)
	// links: the directory's entries are links out of it (sys/bus/pci/devices/ADDR ->
	// ../../../devices/...), so under a tree a name is resolved from the root at once, not
	// first tried beneath the directory (EXDEV, one system call more for every function).
	links bool
	rel   string // under a tree, dir relative to the root ("." for the root; "" when not under it)
}

// openat is openat(2) with O_CLOEXEC, retried on EINTR. The path is passed to the kernel
// from a buffer on the stack (cString): unix.Openat copies it to the heap first, which for
// Scan's 5,400 opens on the 64-GPU host was 7,000 allocations.
func openat(dirfd int, path string, flags int) (int, error) {
	return openatJoin(dirfd, path, "", flags)
}

// openatJoin is openat of dir/name (dir alone when name is ""), the path joined in the
// stack buffer it is passed to the kernel from: Scan opens "ADDR/uevent" relative to the
// devices directory for every function, and joining it on the heap first was one allocation
// each (756 on the 64-GPU host).
func openatJoin(dirfd int, dir, name string, flags int) (int, error) {
	var buf [256]byte
	p, ok := cString(buf[:], dir, name)
	if !ok {
		for {
			fd, err := unix.Openat(dirfd, joinRel(dir, name), flags|unix.O_CLOEXEC, 0)
			if err != unix.EINTR {
				return fd, err
			}
		}
	}
	for {
		fd, _, errno := unix.Syscall6(unix.SYS_OPENAT, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(flags|unix.O_CLOEXEC), 0, 0, 0)
		switch errno {
		case 0:
			return int(fd), nil
		case unix.EINTR:
			continue
		}
		return -1, errno
	}
}

// readlinkat is readlink(2) of name relative to dirfd into buf, retried on EINTR, with the
// path passed from the stack as openat passes it.
func readlinkat(dirfd int, path string, buf []byte) (int, error) {
	return readlinkatJoin(dirfd, path, "", buf)
}

// readlinkatJoin is readlinkat of dir/name (dir alone when name is ""), joined as
// openatJoin joins it.
func readlinkatJoin(dirfd int, dir, name string, buf []byte) (int, error) {
	var pbuf [256]byte
	p, ok := cString(pbuf[:], dir, name)
	if !ok {
		for {
			n, err := unix.Readlinkat(dirfd, joinRel(dir, name), buf)
			if err != unix.EINTR {
				return n, err
			}
		}
	}
	for {
		n, _, errno := unix.Syscall6(unix.SYS_READLINKAT, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), 0, 0)
		switch errno {
		case 0:
			return int(n), nil
		case unix.EINTR:
			continue
		}
		return 0, errno
	}
}

// joinRel is dir/name, or dir when name is "" (the path openatJoin and readlinkatJoin open).
func joinRel(dir, name string) string {
	if name == "" {
		return dir
	}
	return dir + "/" + name
}

// cString copies the parts joined as joinRel joins them (each after the first added with a "/"
// unless it is "") into buf with a terminating NUL and returns its first byte, or false when
// they do not fit or one holds a NUL itself (the caller then lets x/sys copy the path, and
// refuse it with EINVAL as it always did).
func cString(buf []byte, parts ...string) (*byte, bool) {
	n := 0
	for i, part := range parts {
		if strings.IndexByte(part, 0) >= 0 {
			return nil, false
		}
		if i > 0 {
			if part == "" {
				continue
			}
			if n >= len(buf) {
				return nil, false
			}
			buf[n] = '/'
			n++
		}
		if n+len(part) >= len(buf) {
			return nil, false
		}
		n += copy(buf[n:], part)
	}
	if n >= len(buf) {
		return nil, false
	}
	buf[n] = 0
	return &buf[0], true
}

func (d devDir) close() {
	if d.fd != atCWD {
		unix.Close(d.fd)
	}
}

// at returns the directory descriptor and the name to open relative to it for name (a file
// or a relative path such as "nvidia/current_vgpu_type").
func (d devDir) at(name string) (int, string) {
	if d.fd == atCWD {
		return atCWD, filepath.Join(d.dir, name)
	}
	return d.fd, name
}

// path is the full path of name, for messages.
func (d devDir) path(name string) string { return filepath.Join(d.dir, name) }

// str is readAttr of dir/name.
func (d devDir) str(name string) (string, error) {
	v, err := d.strRaw(name)
	if err != nil {
		return "", d.attrErr(name, err)
	}
	return v, nil
}

// strRaw is str with the bare error of open(2) or read(2), for a caller to whom a missing
// attribute is no error (readAttrRaw); attrErr is the error str would have returned.
func (d devDir) strRaw(name string) (string, error) {
	var buf [4096]byte
	b, err := d.attrInto(name, &buf)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// attrInto is readAttrInto of dir/name.
func (d devDir) attrInto(name string, buf *[4096]byte) ([]byte, error) {
	fd, err := d.openAt(name, "", unix.O_RDONLY|unix.O_NONBLOCK) // a FIFO in a hostile tree never waits
	if err != nil {
		return nil, err
	}
	return readAttrFD(fd, buf)
}

// strUnless is strRaw of dir/name, but "" without a copy when the file holds exactly unset
// (trimmed): driver_override reads "(null)" on nearly every function Scan reads.
func (d devDir) strUnless(name, unset string) (string, error) {
	var buf [4096]byte
	b, err := d.attrInto(name, &buf)
	if err != nil || string(b) == unset {
		return "", err
	}
	return string(b), nil
}

// attrErr is the error str returns for name when reading it failed with err (strRaw's).
func (d devDir) attrErr(name string, err error) error {
	return fmt.Errorf("read %s: %w", d.path(name), err)
}

// hex is readHexAttr of dir/name.
func (d devDir) hex(name string) (uint32, error) {
	s, err := d.str(name)
	if err != nil {
		return 0, err
	}
	return parseHexLazy(func() string { return d.path(name) }, s) // joining the path costs
}

// int is readIntAttr of dir/name. The number is parsed where it was read, with no string
// made of it (numa_node, current_vgpu_type and sriov_* on every function Scan reads).
func (d devDir) int(name string) (int64, error) {
	var buf [4096]byte
	b, err := d.attrInto(name, &buf)
	if err != nil {
		return 0, d.attrErr(name, err)
	}
	if v, ok := atoiBytes(b); ok {
		return v, nil
	}
	return parseIntLazy(func() string { return d.path(name) }, string(b))
}

// linkBase is LinkBase of dir/name, with the same errors.
func (d devDir) linkBase(name string) (string, error) {
	v, err := d.linkBaseRaw(name, "")
	if err != nil {
		return "", wrapLinkErr(d.path(name), err)
	}
	return v, nil
}

// linkBaseRaw is linkBase of dir/name/sub (dir/name when sub is "") with readlink(2)'s bare
// error (a syscall.Errno): callers to whom a missing link is no error (optionalLink, Scan's
// first pass) build no message for it, 330 of them on the 64-GPU host (a VF's driver, a
// function's physfn). The target is read into a buffer on the stack, and only its last
// element is copied out.
func (d devDir) linkBaseRaw(name, sub string) (string, error) {
	var stack [256]byte
	buf := stack[:]
	for {
		n, err := d.readlinkAt(name, sub, buf)
		if err != nil {
			return "", err
		}
		if n < len(buf) {
			return baseOf(buf[:n]), nil
		}
		buf = make([]byte, 2*len(buf))
	}
}

// baseOf is filepath.Base(string(b)) copying only the last element out of b.
func baseOf(b []byte) string {
	if len(b) == 0 {
		return "."
	}
	for len(b) > 0 && b[len(b)-1] == '/' {
		b = b[:len(b)-1]
	}
	if i := bytes.LastIndexByte(b, '/'); i >= 0 {
		b = b[i+1:]
	}
	if len(b) == 0 {
		return "/"
	}
	return string(b)
}

// wrapLinkErr is LinkBase's error for path: os.Readlink's *fs.PathError wrapped as LinkBase
// wraps it.
func wrapLinkErr(path string, err error) error {
	return fmt.Errorf("read link %s: %w", path, &fs.PathError{Op: "readlink", Path: path, Err: err})
}

// file reads all of dir/name, with os.ReadFile's errors (a *fs.PathError with Op "open" or
// "read" and the full path). A short read is the end, as in readAttrAt: a sysfs attribute
// (at most a page) or a small regular file comes in one read.
func (d devDir) file(name string) ([]byte, error) {
	var page [4096]byte // most files fit: read there, keep a copy of the right size
	b, err := d.fileIn(name, "", &page)
	if err != nil {
		return nil, err
	}
	return append([]byte{}, b...), nil
}

// fileIn is file of name/sub (name when sub is "") reading into page: the bytes it returns are
// page's when the file is shorter than a page (a sysfs attribute always is), else a slice of
// their own. Callers that parse the bytes and keep none of them (uevent, resource) read with a
// page on their stack: on the 64-GPU host the copies file kept were a tenth of inspect's
// memory, every fresh page of it a page fault. Scan's first pass reads "ADDR"/"uevent" from
// the devices directory, the two joined on the stack (openatJoin).
func (d devDir) fileIn(name, sub string, page *[4096]byte) ([]byte, error) {
	f, err := d.openAt(name, sub, unix.O_RDONLY|unix.O_NONBLOCK) // a FIFO in a hostile tree never waits
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: d.path(joinRel(name, sub)), Err: err}
	}
	defer unix.Close(f)
	var b []byte
	for {
		space := page[:]
		if b != nil {
			if len(b) == cap(b) {
				b = append(b, 0)[:len(b)]
			}
			space = b[len(b):cap(b)]
		}
		n, err := unix.Read(f, space)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: d.path(joinRel(name, sub)), Err: err}
		}
		switch {
		case b == nil && n < len(space):
			return page[:n], nil
		case b == nil:
			b = append(make([]byte, 0, 2*len(page)), page[:n]...)
		default:
			b = b[:len(b)+n]
			if n < len(space) {
				return b, nil
			}
			if len(b) > maxAttrFile {
				return nil, tooLargeHostFile(d.path(joinRel(name, sub)), maxAttrFile)
			}
		}
	}
}

// sub opens the directory name under d (a function under the devices directory); it falls
// back to the full path when that fails, as Root.devDir does.
func (d devDir) sub(name string) devDir {
	fd, err := d.openAt(name, "", unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		fd = atCWD
	}
	s := devDir{fd: fd, dir: d.path(name), t: d.t}
	if d.t != nil && d.rel != "" {
		s.rel = joinRel(d.rel, name)
	}
	return s
}

// names lists the directory dir/name (the directory itself for "."), sorted, as os.ReadDir
// would name them, with os.ReadDir's errors.
func (d devDir) names(name string) ([]string, error) {
	f, err := d.openAt(name, "", unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: d.path(name), Err: err}
	}
	defer unix.Close(f)
	out, err := readNames(f, d.path(name), -1)
	sort.Strings(out)
	return out, err
}

// readNames reads the names in the open directory fd (path for errors), all of them or the
// first max, without "." and "..".
func readNames(fd int, path string, max int) ([]string, error) {
	var out []string
	buf := make([]byte, 8192)
	for max < 0 || len(out) < max {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return out, &fs.PathError{Op: "readdirent", Path: path, Err: err}
		}
		if n <= 0 {
			break
		}
		left := -1
		if max >= 0 {
			left = max - len(out)
		}
		_, _, out = unix.ParseDirent(buf[:n], left, out)
	}
	return out, nil
}
