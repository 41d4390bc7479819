// Package host is vgpu-host's view of a host: every path under /sys, /proc, /dev, /etc and
// /var/lib is resolved under a Root, so the same code runs against a real host ("/"), a
// sysfs snapshot from the real-kernel lab, or a fake tree built by a test.
package host

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Root is the directory under which every host path is resolved ("/" on a real host).
type Root struct {
	dir string
	// walk makes the root's opens resolve paths by the component walk even where openat2(2)
	// works (OpenInRoot's fallback): the tests of the fallback set it on the roots they build.
	walk bool
	// treeChecked: CheckTree passed (Checked), so the readers that call it again skip it.
	treeChecked bool
	// t holds a root other than "/" open for reads that resolve inside it (tree), shared by
	// the Root's copies.
	t *tree
}

// ErrNoRoot is returned by NewRoot when the host root does not exist or is not a directory.
var ErrNoRoot = errors.New("no such directory")

// NewRoot returns the Root for dir, which must be an existing directory.
func NewRoot(dir string) (Root, error) {
	if dir == "" {
		dir = "/"
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return Root{}, fmt.Errorf("resolve host root %q: %w", dir, err)
	}
	st, err := os.Stat(abs)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return Root{}, fmt.Errorf("open host root %s: %w; pass an existing directory to --host-root or VGPU_HOST_ROOT", abs, ErrNoRoot)
		}
		return Root{}, fmt.Errorf("open host root %s: %w", abs, err)
	}
	if !st.IsDir() {
		return Root{}, fmt.Errorf("open host root %s: %w (it is a file); pass a directory to --host-root or VGPU_HOST_ROOT", abs, ErrNoRoot)
	}
	if abs == "/" {
		return Root{dir: abs}, nil
	}
	return Root{dir: abs, t: &tree{dir: abs}}, nil
}

// ErrNotATree is returned by CheckTree for a host root that is not a host's tree.
var ErrNotATree = errors.New("not a host tree")

// treeDirs are the directories of a host tree that a host root other than "/" must not link
// out of.
var treeDirs = []string{"sys", "proc", "dev"}

// CheckTree returns an error, wrapping ErrNotATree, for a host root other than "/" that is
// plainly not the host tree its user meant, which every command would otherwise read as a host
// with no devices:
//
//   - it has no sys but the tree is next to it: its parent has sys (a snapshot's sys, proc or
//     dev given instead of the snapshot), or its only directory does (a tarball that unpacks
//     into one directory);
//   - it is a sys directory itself (it holds bus and devices);
//   - its sys, proc or dev is a symlink that leads out of it: reads through it would describe
//     this machine under the tree's name.
//
// A root without sys and nothing of the kind is a host with nothing (a fresh root that holds
// only vgpu-host's state: an empty inventory, as before). The error names the tree it means.
func (r Root) CheckTree() error {
	if r.IsReal() || r.treeChecked {
		return nil
	}
	dir := r.Dir()
	sysDir := false // ROOT/sys is a directory (not a link to one): isTreeDir(dir)
	for _, d := range treeDirs {
		p := r.Path(d)
		st, err := os.Lstat(p)
		if err != nil {
			continue
		}
		if st.Mode()&fs.ModeSymlink == 0 {
			sysDir = sysDir || d == "sys" && st.IsDir()
			continue
		}
		if err := r.CheckInside(p); err != nil {
			t, _ := os.Readlink(p)
			return fmt.Errorf("host root %s: %w: %s is a symlink to %s, out of the tree (it would describe this machine under the tree's name); copy what it holds into the tree, or use --host-root / for this machine", dir, ErrNotATree, p, t)
		}
	}
	if sysDir {
		return nil // a tree: three lstat calls
	}
	if _, err := os.Lstat(dir); err != nil {
		return nil // a root that went away: each reader reports that its own way (scan host root DIR: ...)
	}
	if isDir(filepath.Join(dir, "bus")) && isDir(filepath.Join(dir, "devices")) {
		return fmt.Errorf("host root %s: %w: it is a sys directory itself; pass the directory that holds sys (%s) to --host-root or VGPU_HOST_ROOT", dir, ErrNotATree, filepath.Dir(dir))
	}
	if near := nearTree(dir); near != "" {
		return fmt.Errorf("host root %s: %w: it has no sys directory, and %s next to it has; did you mean --host-root %s?", dir, ErrNotATree, near, near)
	}
	return nil
}

// Checked returns r once CheckTree has passed on it: the readers that check the tree again
// (Scan, the mdev and PCI listings) skip the check on it and its copies, so a command checks
// its root once (inspect on the real-kernel snapshot made 27 more system calls without it).
func (r Root) Checked() (Root, error) {
	if err := r.CheckTree(); err != nil {
		return r, err
	}
	r.treeChecked = true
	return r, nil
}

// isTreeDir reports whether d holds a sys directory (not a link to one).
func isTreeDir(d string) bool {
	st, err := os.Lstat(filepath.Join(d, "sys"))
	return err == nil && st.IsDir()
}

// isDir reports whether p is a directory (not a link to one).
func isDir(p string) bool {
	st, err := os.Lstat(p)
	return err == nil && st.IsDir()
}

// nearTree returns the host tree next to dir, a directory without sys, that its user probably
// meant: dir's parent (not "/") when it holds sys, or dir's only directory when that does; ""
// when there is none.
func nearTree(dir string) string {
	if parent := filepath.Dir(dir); parent != dir && parent != "/" && isTreeDir(parent) {
		return parent
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return ""
	}
	var only string
	for _, e := range ents {
		if e.IsDir() {
			if only != "" {
				return ""
			}
			only = filepath.Join(dir, e.Name())
		}
	}
	if only != "" && isTreeDir(only) {
		return only
	}
	return ""
}

// Dir returns the root directory.
func (r Root) Dir() string {
	if r.dir == "" {
		return "/"
	}
	return r.dir
}

// IsReal reports whether the root is this machine's real root, where changes touch the
// running host. Risky operations refuse to run on a real host without --force.
func (r Root) IsReal() bool { return r.Dir() == "/" }

// Path joins elem under the root: Path("sys", "bus", "pci") is ROOT/sys/bus/pci.
func (r Root) Path(elem ...string) string {
	return filepath.Join(append([]string{r.Dir()}, elem...)...)
}

// Sys returns ROOT/sys/elem...
func (r Root) Sys(elem ...string) string { return r.Path(append([]string{"sys"}, elem...)...) }

// Proc returns ROOT/proc/elem...
func (r Root) Proc(elem ...string) string { return r.Path(append([]string{"proc"}, elem...)...) }

// Dev returns ROOT/dev/elem...
func (r Root) Dev(elem ...string) string { return r.Path(append([]string{"dev"}, elem...)...) }

// Etc returns ROOT/etc/elem...
func (r Root) Etc(elem ...string) string { return r.Path(append([]string{"etc"}, elem...)...) }

// StateDir returns ROOT/var/lib/vgpu-host/elem..., where vgpu-host keeps its own state.
func (r Root) StateDir(elem ...string) string {
	return r.Path(append([]string{"var", "lib", "vgpu-host"}, elem...)...)
}

// PCIDevice returns ROOT/sys/bus/pci/devices/ADDR/elem...
func (r Root) PCIDevice(a Address, elem ...string) string {
	return r.Sys(append([]string{"bus", "pci", "devices", a.String()}, elem...)...)
}

// PCIDriver returns ROOT/sys/bus/pci/drivers/NAME/elem...
func (r Root) PCIDriver(name string, elem ...string) string {
	return r.Sys(append([]string{"bus", "pci", "drivers", name}, elem...)...)
}

// ReadString reads a sysfs-style attribute and trims surrounding whitespace. Errors name the path.
func ReadString(path string) (string, error) {
	b, err := ReadHostFile(path, 0)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// ReadInt reads a decimal (or 0x-prefixed hex) integer attribute such as numa_node or sriov_numvfs.
func ReadInt(path string) (int64, error) {
	s, err := ReadString(path)
	if err != nil {
		return 0, err
	}
	return parseInt(path, s)
}

// parseInt parses an integer attribute's value (decimal, or 0x-prefixed hex); path is for the error.
func parseInt(path, s string) (int64, error) {
	return parseIntLazy(func() string { return path }, s)
}

// parseIntLazy is parseInt that builds the path for the error only when there is one.
func parseIntLazy(path func() string, s string) (int64, error) {
	v, err := strconv.ParseInt(s, 0, 64)
	if err != nil {
		return 0, fmt.Errorf("read %s: not an integer: %s", path(), quoted(s))
	}
	return v, nil
}

// ReadHex reads a hex attribute such as vendor ("0x10de") or class ("0x030000").
func ReadHex(path string) (uint32, error) {
	s, err := ReadString(path)
	if err != nil {
		return 0, err
	}
	return parseHex(path, s)
}

// parseHex parses a hex attribute's value ("0x10de"); path is for the error.
func parseHex(path, s string) (uint32, error) {
	return parseHexLazy(func() string { return path }, s)
}

// parseHexLazy is parseHex that builds the path for the error only when there is one.
func parseHexLazy(path func() string, s string) (uint32, error) {
	v, err := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 32)
	if err != nil {
		return 0, fmt.Errorf("read %s: not a hex number: %s", path(), quoted(s))
	}
	return uint32(v), nil
}

// LinkBase returns the last element of a symlink's target: for ".../driver -> ../../bus/pci/drivers/nvme"
// it returns "nvme". A missing link returns "" and an error satisfying errors.Is(err, fs.ErrNotExist).
func LinkBase(path string) (string, error) {
	t, err := os.Readlink(path)
	if err != nil {
		return "", fmt.Errorf("read link %s: %w", path, err)
	}
	return filepath.Base(t), nil
}

// Exists reports whether path exists (following symlinks).
func Exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
