package host

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// OpenInRoot opens path, an absolute path under root, resolving every component inside root:
// a symlink (absolute or with "..") can never lead out of it, as if root were "/" (a chroot).
// This is what keeps a sysfs snapshot or a fake tree given as --host-root from redirecting
// vgpu-host's writes to the real host:
//
//	ROOT/sys/bus/pci/devices/0000:01:00.0/driver_override -> /etc/shadow
//
// opens ROOT/etc/shadow, never /etc/shadow. On the real root ("/") it is os.OpenFile. It uses
// openat2(2) with RESOLVE_IN_ROOT (Linux 5.6+), and an equivalent walk of the components where
// the kernel lacks it.
func OpenInRoot(root, path string, flag int, perm os.FileMode) (*os.File, error) {
	return openInRoot(root, path, flag, perm, false)
}

// openIn is OpenInRoot under r, from the root's descriptor its reads hold open (tree), by the
// component walk when r says so (Root.walk).
func (r Root) openIn(path string, flag int, perm os.FileMode) (*os.File, error) {
	if t := r.tree(); t != nil {
		return t.openFile(path, flag, perm)
	}
	return os.OpenFile(path, flag, perm)
}

// openInRoot is OpenInRoot, by the component walk alone when walk is set: a tree held for this
// one open.
func openInRoot(root, path string, flag int, perm os.FileMode, walk bool) (*os.File, error) {
	root = filepath.Clean(root)
	if root == "/" {
		return os.OpenFile(path, flag, perm)
	}
	t := &tree{dir: root, walk: walk}
	defer t.close()
	return t.openFile(path, flag, perm)
}

// walkInRoot resolves rel under root one component at a time, following symlinks as the
// kernel would if root were "/": an absolute target restarts at root, ".." stops at root.
// It returns the resolved path (under root); the last component is not followed if it does
// not exist, or if nofollow is set (O_NOFOLLOW: the open that follows then fails with ELOOP).
func walkInRoot(root, rel string, nofollow bool) (string, error) {
	todo := strings.Split(rel, "/")
	var done []string // resolved components below root
	links := 0
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(done) > 0 {
				done = done[:len(done)-1]
			}
			continue
		}
		p := filepath.Join(root, filepath.Join(done...), c)
		st, err := os.Lstat(p)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) && len(todo) == 0 {
				done = append(done, c)
				break
			}
			return "", err
		}
		if st.Mode()&os.ModeSymlink == 0 || (nofollow && len(todo) == 0) {
			done = append(done, c)
			continue
		}
		if links++; links > 40 {
			return "", syscall.ELOOP
		}
		target, err := os.Readlink(p)
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(target) {
			done = nil
		}
		todo = append(strings.Split(target, "/"), todo...)
	}
	return filepath.Join(root, filepath.Join(done...)), nil
}

// CheckInside returns an error when path, resolved through the symlinks that exist so far, is
// not under the root: a snapshot or fake tree whose etc or var/lib is a symlink to the real
// /etc would otherwise have vgpu-host's state files written on the real host. On the real root
// every path is inside. Errors wrap ErrRefused.
func (r Root) CheckInside(path string) error {
	if r.IsReal() {
		return nil
	}
	root, err := filepath.EvalSymlinks(r.Dir())
	if err != nil {
		return fmt.Errorf("resolve host root %s: %w", r.Dir(), err)
	}
	p, rest := filepath.Clean(path), ""
	for {
		real, err := filepath.EvalSymlinks(p)
		if err == nil {
			p = filepath.Join(real, rest)
			break
		}
		if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("resolve %s: %w", path, err)
		}
		parent := filepath.Dir(p)
		if parent == p {
			break
		}
		rest, p = filepath.Join(filepath.Base(p), rest), parent
	}
	if rel, err := filepath.Rel(root, p); err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return fmt.Errorf("%s resolves to %s, outside the host root %s (a symlink in the tree points out of it): %w", path, p, r.Dir(), ErrRefused)
	}
	return nil
}

// WriteFileAtomic is WriteFileAtomic for a file under the root: it refuses (CheckInside) a
// path that symlinks lead out of the root.
func (r Root) WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	if err := r.CheckInside(path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return WriteFileAtomic(path, data, perm)
}

// Remove is os.Remove for a file under the root: it refuses (CheckInside) a path that
// symlinks lead out of the root, so a fake tree never deletes the real host's files.
func (r Root) Remove(path string) error {
	if err := r.CheckInside(path); err != nil {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return os.Remove(path)
}
