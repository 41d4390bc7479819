package host

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// tree is a host root other than "/" (a snapshot, a fake tree, a --host-root), held open so
// that every read under it resolves inside it, as if it were "/" (a chroot): a symlink in the
// tree, absolute (sys/bus/pci/devices/ADDR -> /sys/devices/...) or with enough "..", never
// leads the read out of it to this machine's files. Reads on the real root ("/") have no tree
// and read the paths as they are.
//
// Paths are resolved by openat2(2) with RESOLVE_IN_ROOT from the root's descriptor, opened once
// per tree (the same one system call per read as an open of the whole path), or by the walk
// OpenInRoot falls back to where the kernel lacks openat2 (before Linux 5.6).
type tree struct {
	dir  string // the root, absolute and clean
	walk bool   // resolve by the component walk even where openat2 works (the fallback's tests)
	once sync.Once
	fd   int // the root opened O_PATH, closed when the tree is collected (or by close)
	err  error
	done runtime.Cleanup
}

// tree is r's tree for reads, or nil on the real root.
func (r Root) tree() *tree {
	if r.IsReal() {
		return nil
	}
	if r.t != nil && r.t.walk == r.walk {
		return r.t
	}
	return &tree{dir: r.Dir(), walk: r.walk} // a Root built without NewRoot, or a test's walk
}

// rootFD is the root's descriptor, opened on first use.
func (t *tree) rootFD() (int, error) {
	t.once.Do(func() {
		t.fd, t.err = unix.Open(t.dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if t.err == nil {
			t.done = runtime.AddCleanup(t, func(fd int) { unix.Close(fd) }, t.fd)
		}
	})
	return t.fd, t.err
}

// close closes the root's descriptor now, for a tree held for one open (openInRoot).
func (t *tree) close() {
	t.once.Do(func() { t.err = errNotInRoot }) // never opened: nothing to close, and no later open
	if t.err == nil {
		t.done.Stop()
		unix.Close(t.fd)
		t.err = errNotInRoot
	}
}

// errNotInRoot is the error for a path a read under a tree was given that is not under its root
// (a bug: every path read under a root is built from it).
var errNotInRoot = errors.New("not under the host root")

// rel is path relative to the root, or false when it is not under it.
func (t *tree) rel(path string) (string, bool) {
	path = filepath.Clean(path)
	if path == t.dir {
		return ".", true
	}
	if rel, ok := strings.CutPrefix(path, t.dir); ok && strings.HasPrefix(rel, "/") {
		return rel[1:], true
	}
	return "", false
}

// open opens path (under the root) with open(2)'s flags, resolving it inside the root: the
// descriptor, or the bare errno (or errNotInRoot).
func (t *tree) open(path string, flags int) (int, error) {
	rel, ok := t.rel(path)
	if !ok {
		return -1, errNotInRoot
	}
	return t.openRel(rel, "", "", flags)
}

// openRel is open of dir/name/sub relative to the root (dir "." for the root itself; name and
// sub left out when ""), joined on the stack.
func (t *tree) openRel(dir, name, sub string, flags int) (int, error) {
	if dir == "" {
		return -1, errNotInRoot // a devDir whose directory is not under the root
	}
	if !t.walk {
		fd, err := t.openat2(dir, name, sub, flags, 0)
		if !noOpenat2(err) {
			return fd, err
		}
	}
	resolved, err := walkInRoot(t.dir, joinRel(joinRel(dir, name), sub), flags&unix.O_NOFOLLOW != 0)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return -1, err
	}
	// The last component was resolved by the walk: do not follow a link swapped in since.
	return openat(atCWD, resolved, flags|unix.O_NOFOLLOW)
}

// openat2 is openat2(2) of dir/name/sub (openat2Join) from the root's descriptor with
// RESOLVE_IN_ROOT, and mode for O_CREAT.
func (t *tree) openat2(dir, name, sub string, flags int, mode uint32) (int, error) {
	rfd, err := t.rootFD()
	if err != nil {
		return -1, err
	}
	fd, err := openat2Join(rfd, dir, name, sub, flags, mode, unix.RESOLVE_IN_ROOT)
	runtime.KeepAlive(t)
	return fd, err
}

// openFile is os.OpenFile of path inside the root (OpenInRoot, Root.openIn: a state or lock
// file, a sysfs write): openat2 from the root's descriptor, or the component walk where openat2
// is missing (noOpenat2) or walk is set. Errors are *os.PathError naming path.
func (t *tree) openFile(path string, flag int, perm os.FileMode) (*os.File, error) {
	rel, ok := t.rel(path)
	if !ok {
		return nil, &os.PathError{Op: "open", Path: path, Err: fmt.Errorf("not under the host root %s", t.dir)}
	}
	if !t.walk {
		fd, err := t.openat2(rel, "", "", flag, uint32(perm.Perm()))
		if !noOpenat2(err) {
			if err != nil {
				return nil, &os.PathError{Op: "open", Path: path, Err: err}
			}
			return os.NewFile(uintptr(fd), filepath.Join(t.dir, rel)), nil
		}
	}
	resolved, err := walkInRoot(t.dir, rel, flag&unix.O_NOFOLLOW != 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	// The last component was resolved by the walk: do not follow a link swapped in since.
	return os.OpenFile(resolved, flag|unix.O_NOFOLLOW, perm)
}

// noOpenat2 reports whether err from openat2(2) says the call is not there: ENOSYS before
// Linux 5.6, or EPERM from a seccomp filter that predates it (older container runtimes' default
// profiles). The caller then resolves the path by the walk, whose own open gives the real error
// if there is one.
func noOpenat2(err error) bool {
	return errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM)
}

// openat2Join is openat2(2) of dir/name/sub (name and sub left out when "") relative to dirfd
// with resolve's RESOLVE_* flags (and RESOLVE_NO_MAGICLINKS: /proc/PID/fd/N-style links never
// resolve), retried on EINTR and on the EAGAIN a rename racing RESOLVE_IN_ROOT can give. The
// path is joined in a buffer on the stack and passed from there, as openatJoin passes it:
// unix.Openat2 copies it to the heap, one allocation for each of Scan's thousands of reads.
func openat2Join(dirfd int, dir, name, sub string, flags int, mode uint32, resolve uint64) (int, error) {
	how := unix.OpenHow{Flags: uint64(flags) | unix.O_CLOEXEC, Resolve: resolve | unix.RESOLVE_NO_MAGICLINKS}
	if flags&unix.O_CREAT != 0 {
		how.Mode = uint64(mode)
	}
	var buf [512]byte
	p, ok := cString(buf[:], dir, name, sub)
	if !ok { // too long, or a NUL: x/sys copies it (and refuses a NUL with EINVAL)
		for {
			fd, err := unix.Openat2(dirfd, joinRel(joinRel(dir, name), sub), &how)
			if err != unix.EINTR && err != unix.EAGAIN {
				return fd, err
			}
		}
	}
	for {
		fd, _, errno := unix.Syscall6(unix.SYS_OPENAT2, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(&how)), unsafe.Sizeof(how), 0, 0)
		switch errno {
		case 0:
			return int(fd), nil
		case unix.EINTR, unix.EAGAIN:
			continue
		}
		return -1, errno
	}
}

// openAt opens name/sub (name alone when sub is "") of d with open(2)'s flags. On the real root
// it is openat(2) relative to d's descriptor. Under a tree, it is opened relative to d's
// descriptor with RESOLVE_BENEATH (an attribute, nvidia/current_vgpu_type: one system call, as
// before), and resolved from the root, inside it, when a link on the way leads above d (EXDEV)
// or d's entries are such links (links).
func (d devDir) openAt(name, sub string, flags int) (int, error) {
	fd, rel := d.at(name)
	if d.t == nil {
		return openatJoin(fd, rel, sub, flags)
	}
	if d.beneath(fd) {
		f, err := openat2Join(fd, rel, sub, "", flags, 0, unix.RESOLVE_BENEATH)
		if err != unix.EXDEV && !noOpenat2(err) {
			return f, err
		}
	}
	return d.t.openRel(d.rel, name, sub, flags)
}

// beneath reports whether, under a tree, a read of d open at fd is first tried beneath it.
func (d devDir) beneath(fd int) bool { return fd != atCWD && !d.links && !d.t.walk }

// readlinkAt is readlink(2) of name/sub of d into buf. Under a tree, the directories on the way
// to the link are resolved inside the root; the link itself is never followed.
func (d devDir) readlinkAt(name, sub string, buf []byte) (int, error) {
	fd, rel := d.at(name)
	if d.t == nil || fd != atCWD && sub == "" && !strings.Contains(rel, "/") {
		return readlinkatJoin(fd, rel, sub, buf) // no directory to follow on the way
	}
	lfd := -1
	var err error = unix.EXDEV
	if d.beneath(fd) {
		lfd, err = openat2Join(fd, rel, sub, "", unix.O_PATH|unix.O_NOFOLLOW, 0, unix.RESOLVE_BENEATH)
	}
	if err == unix.EXDEV || noOpenat2(err) {
		lfd, err = d.t.openRel(d.rel, name, sub, unix.O_PATH|unix.O_NOFOLLOW)
	}
	if err != nil {
		return 0, err
	}
	defer unix.Close(lfd)
	return readlinkat(lfd, "", buf)
}

// open is openat(2) of path (under the root) with flags: resolved inside the root under a
// tree, as it is on the real root.
func (r Root) open(path string, flags int) (int, error) {
	if t := r.tree(); t != nil {
		return t.open(path, flags)
	}
	return openat(atCWD, path, flags)
}

// dirAt is the devDir of dir (under the root) open at fd (atCWD: not open).
func (r Root) dirAt(fd int, dir string) devDir {
	d := devDir{fd: fd, dir: dir, t: r.tree()}
	if d.t != nil {
		d.rel, _ = d.t.rel(dir) // "" when it is not under the root: every read fails (errNotInRoot)
	}
	return d
}

// devDir opens dir (under the root) for reading one file after another (O_PATH); close it
// with close. A directory that cannot be opened is read by full paths (pathDir), so that every
// read fails, or succeeds, as it would.
func (r Root) devDir(dir string) devDir {
	fd, err := r.open(dir, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return r.pathDir(dir)
	}
	return r.dirAt(fd, dir)
}

// pathDir is dir under the root not opened, for a single read: opening it would cost more than
// it saves.
func (r Root) pathDir(dir string) devDir { return r.dirAt(atCWD, dir) }

// listable opens dir under the root for reading its entries (not O_PATH) and reports whether
// it has any, with os.ReadDir's errors. The descriptor stays usable as a devDir for reads below
// it.
func (r Root) listable(dir string) (devDir, bool, error) {
	fd, err := r.open(dir, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return r.pathDir(dir), false, &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	names, err := readNames(fd, dir, 1)
	return r.dirAt(fd, dir), len(names) > 0, err
}

// readAttr is readAttr of path under the root.
func (r Root) readAttr(path string) (string, error) {
	return r.pathDir(filepath.Dir(path)).str(filepath.Base(path))
}

// readString is ReadString of path under the root.
func (r Root) readString(path string) (string, error) {
	b, err := r.ReadHostFile(path, 0)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// readInt is ReadInt of path under the root.
func (r Root) readInt(path string) (int64, error) {
	s, err := r.readString(path)
	if err != nil {
		return 0, err
	}
	return parseInt(path, s)
}

// readHex is ReadHex of path under the root.
func (r Root) readHex(path string) (uint32, error) {
	s, err := r.readString(path)
	if err != nil {
		return 0, err
	}
	return parseHex(path, s)
}

// ReadHostFile is ReadHostFile of path under the root: under a tree it resolves inside it.
func (r Root) ReadHostFile(path string, limit int) ([]byte, error) {
	t := r.tree()
	if t == nil {
		return ReadHostFile(path, limit)
	}
	fd, err := t.open(path, unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return readHostFD(fd, path, limit)
}

// openHostFile is openHostFile of path under the root.
func (r Root) openHostFile(path string) (*os.File, error) {
	t := r.tree()
	if t == nil {
		return openHostFile(path)
	}
	fd, err := t.open(path, unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// Readlink is os.Readlink of path under the root: the directories on the way resolve inside
// it, and the link itself is read, not followed.
func (r Root) Readlink(path string) (string, error) {
	if r.tree() == nil {
		return os.Readlink(path)
	}
	var stack [256]byte
	buf := stack[:]
	for {
		n, err := r.pathDir(path).readlinkAt("", "", buf)
		if err != nil {
			return "", &fs.PathError{Op: "readlink", Path: path, Err: err}
		}
		if n < len(buf) {
			return string(buf[:n]), nil
		}
		buf = make([]byte, 2*len(buf))
	}
}

// linkBase is LinkBase of path under the root.
func (r Root) linkBase(path string) (string, error) {
	t, err := r.Readlink(path)
	if err != nil {
		return "", fmt.Errorf("read link %s: %w", path, err)
	}
	return filepath.Base(t), nil
}

// Stat is os.Stat of path under the root (links followed, inside it).
func (r Root) Stat(path string) (fs.FileInfo, error) {
	if r.tree() == nil {
		return os.Stat(path)
	}
	return r.statIn(path, "stat", 0)
}

// Lstat is os.Lstat of path under the root (the directories on the way followed inside it, the
// last component not).
func (r Root) Lstat(path string) (fs.FileInfo, error) {
	if r.tree() == nil {
		return os.Lstat(path)
	}
	return r.statIn(path, "lstat", unix.O_NOFOLLOW)
}

func (r Root) statIn(path, op string, nofollow int) (fs.FileInfo, error) {
	fd, err := r.tree().open(path, unix.O_PATH|nofollow)
	if err != nil {
		return nil, &fs.PathError{Op: op, Path: path, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &fs.PathError{Op: op, Path: path, Err: err}
	}
	return statInfo{name: filepath.Base(path), st: st}, nil
}

// Exists is Exists of path under the root: under a tree, the links on the way resolve inside it.
func (r Root) Exists(path string) bool {
	_, err := r.Stat(path)
	return err == nil
}

// ReadDir is os.ReadDir of dir under the root: the entries sorted by name.
func (r Root) ReadDir(dir string) ([]fs.DirEntry, error) {
	t := r.tree()
	if t == nil {
		return os.ReadDir(dir)
	}
	fd, err := t.open(dir, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	f := os.NewFile(uintptr(fd), dir)
	defer f.Close()
	ents, err := f.ReadDir(-1)
	sort.Slice(ents, func(i, j int) bool { return ents[i].Name() < ents[j].Name() })
	return ents, err
}

// glob is filepath.Glob of pattern's last element in dir under the root.
func (r Root) glob(dir, pattern string) []string {
	ents, err := r.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if ok, _ := filepath.Match(pattern, e.Name()); ok {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out
}

// statInfo is the fs.FileInfo of a stat(2) under a tree.
type statInfo struct {
	name string
	st   unix.Stat_t
}

func (s statInfo) Name() string       { return s.name }
func (s statInfo) Size() int64        { return s.st.Size }
func (s statInfo) Mode() fs.FileMode  { return unixMode(s.st.Mode) | fs.FileMode(s.st.Mode&0o777) }
func (s statInfo) ModTime() time.Time { return time.Unix(s.st.Mtim.Unix()) }
func (s statInfo) IsDir() bool        { return s.Mode().IsDir() }
func (s statInfo) Sys() any           { return &s.st }

// readHexAttr is readHexAttr of path under the root.
func (r Root) readHexAttr(path string) (uint32, error) {
	s, err := r.readAttr(path)
	if err != nil {
		return 0, err
	}
	return parseHex(path, s)
}
