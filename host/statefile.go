package host

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrNotRegular is wrapped when what is at the path of one of vgpu-host's state or lock files
// is not a regular file: a symbolic link, a named pipe (FIFO), a socket, a device node or a
// directory. It maps to no exit code of its own: like any damaged state it is exit 1.
var ErrNotRegular = errors.New("not a regular file")

// OpenFile opens one of vgpu-host's state or lock files (a ledger, the vGPU state file,
// sriov.json, an mdevctl definition, a *.lock) under the root, and refuses anything but a
// regular file there:
//
//   - the path resolves inside the root (OpenInRoot): a link in the tree never leads out of it;
//   - the file itself is never followed if it is a symbolic link (O_NOFOLLOW), whatever the root:
//     vgpu-host writes these files itself, always as regular files, so a link where one
//     belongs was put there by something else (ledger.lock -> /etc/shadow would be truncated);
//   - the open never waits (O_NONBLOCK): opening a FIFO for reading blocks until a writer
//     comes, which held the ledger's lock and the agent's queue for ever;
//   - what was opened is checked with fstat(2) to be a regular file, so a FIFO, socket, device
//     or directory is an error naming the path, what it is and the fix, before any read.
//
// Errors from the open itself are *fs.PathError as from os.OpenFile (errors.Is(err,
// fs.ErrNotExist) works); what is not a regular file wraps ErrNotRegular.
func (r Root) OpenFile(path string, flag int, perm os.FileMode) (*os.File, error) {
	f, err := r.openIn(path, flag|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, perm)
	if err != nil {
		// ELOOP: the last component is a link (O_NOFOLLOW); EISDIR: a directory opened for
		// writing; ENXIO: a socket, or a FIFO opened O_WRONLY|O_NONBLOCK without a reader.
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EISDIR) || errors.Is(err, unix.ENXIO) {
			if st, lerr := r.Lstat(path); lerr == nil && !st.Mode().IsRegular() {
				return nil, notRegular(path, st.Mode())
			}
		}
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, notRegular(path, st.Mode())
	}
	return f, nil
}

// ReadFileLimit is ReadFileLimit for one of vgpu-host's state files under the root: it opens
// it with OpenFile (inside the root, never through a link, never waiting, a regular file only)
// and reads at most limit bytes.
func (r Root) ReadFileLimit(path string, limit int64) ([]byte, error) {
	f, err := r.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readLimit(f, path, limit)
}

// MkdirAll is os.MkdirAll for a state directory under the root: on a root that is not "/"
// every directory is resolved and created inside it (OpenInRoot, mkdirat(2)), so a symlinked
// component (var/lib -> /var/lib) can never have vgpu-host create directories on the real
// host; one that leads out of the root is refused as Root.CheckInside refuses it (ErrRefused).
func (r Root) MkdirAll(path string, perm os.FileMode) error {
	if r.IsReal() {
		return os.MkdirAll(path, perm)
	}
	if err := r.CheckInside(path); err != nil {
		return fmt.Errorf("create directory %s: %w", path, err)
	}
	rel, err := filepath.Rel(r.Dir(), filepath.Clean(path))
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return fmt.Errorf("create directory %s: not under the host root %s: %w", path, r.Dir(), ErrRefused)
	}
	cur := r.Dir()
	for _, c := range strings.Split(rel, "/") {
		if c == "." || c == "" {
			continue
		}
		next := filepath.Join(cur, c)
		d, err := r.openIn(next, unix.O_PATH|unix.O_DIRECTORY, 0)
		if errors.Is(err, fs.ErrNotExist) {
			parent, perr := r.openIn(cur, unix.O_PATH|unix.O_DIRECTORY, 0)
			if perr != nil {
				return fmt.Errorf("create directory %s: %w", path, perr)
			}
			merr := unix.Mkdirat(int(parent.Fd()), c, uint32(perm.Perm()))
			parent.Close()
			if merr != nil && !errors.Is(merr, unix.EEXIST) {
				return fmt.Errorf("create directory %s: mkdir %s: %w", path, next, merr)
			}
			d, err = r.openIn(next, unix.O_PATH|unix.O_DIRECTORY, 0)
		}
		if err != nil {
			return fmt.Errorf("create directory %s: %w", path, err)
		}
		d.Close()
		cur = next
	}
	return nil
}

// notRegular is the error for something other than a regular file where a state or lock file
// belongs: it says what is there and the fix.
func notRegular(path string, m fs.FileMode) error {
	what := fileKind(m)
	return fmt.Errorf("%s is %s, where vgpu-host keeps one of its state or lock files, which it only ever writes as a regular file; "+
		"something else put it there, and vgpu-host neither reads nor writes through it: remove it (rm -r %s) and run again: %w", path, what, path, ErrNotRegular)
}

// unixMode converts st_mode's file type to fs.FileMode's.
func unixMode(m uint32) fs.FileMode {
	switch m & unix.S_IFMT {
	case unix.S_IFLNK:
		return fs.ModeSymlink
	case unix.S_IFIFO:
		return fs.ModeNamedPipe
	case unix.S_IFSOCK:
		return fs.ModeSocket
	case unix.S_IFCHR:
		return fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		return fs.ModeDevice
	case unix.S_IFDIR:
		return fs.ModeDir
	}
	return 0
}

// ReadRegularFileLimit reads a file a user names (a public key file a spec lists) like
// ReadFileLimit, but only a regular file: the open never waits (O_NONBLOCK) and what was opened
// must be a regular file, so a FIFO, socket, device or directory named there is an error
// naming it instead of a read that waits for ever. Links are followed: a user's
// ~/.ssh/id.pub may be one.
func ReadRegularFileLimit(path string, limit int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is %s, not a regular file: name the file itself: %w", path, fileKind(st.Mode()), ErrNotRegular)
	}
	return readLimit(f, path, limit)
}

// fileKind says in words what kind of file m is, for messages.
func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m.IsDir():
		return "a directory"
	}
	return "not a regular file (mode " + m.String() + ")"
}
