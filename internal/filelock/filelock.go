// Package filelock is vgpu-host's one file lock: flock(2) on a lock file beside the state it
// guards, with a timeout, and an error on timeout that names the lock file and the pid of the
// process holding it.
//
// Every read-modify-write of a state file (the allocation ledger, the vfio ledger, the vGPU
// state file, /etc/vgpu-host/sriov.json, the mdevctl definitions) holds one of these locks.
// The lock is a separate file because state files are replaced by rename on every save, and a
// lock on a replaced inode would protect nothing. The kernel drops a flock when its holder dies
// (kill -9), so a crashed run never blocks the next one. A lock file stays, unless its holder
// removes it (Lock.RemoveAndRelease: a VM's lock once the VM is gone), which AcquireIn makes
// safe. Lock files are opened as state files are: inside the host root, never through a
// symbolic link or a FIFO (host.Root.OpenFile).
//
//	$ cat /var/lib/vgpu-host/ledger.lock
//	4711
package filelock

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-host/vgpu-host/host"
)

// Mode is how a lock is held.
type Mode int

const (
	// Shared lets other Shared holders in (readers).
	Shared Mode = syscall.LOCK_SH
	// Exclusive keeps everyone else out (writers).
	Exclusive Mode = syscall.LOCK_EX
)

// DefaultTimeout is how long a state-file transaction waits for another vgpu-host process.
// Transactions hold their lock for milliseconds, so waiting this long means the holder is stuck.
const DefaultTimeout = 2 * time.Minute

// ErrTimeout is returned (wrapped, and wrapping host.ErrBusy) when the lock was not free
// within the timeout.
var ErrTimeout = errors.New("lock held by another process")

// Sibling returns the lock file for a state file: path with its extension replaced by ".lock"
// (ledger.json -> ledger.lock).
func Sibling(path string) string {
	return strings.TrimSuffix(path, filepath.Ext(path)) + ".lock"
}

// Acquire is AcquireIn on the real root, for a lock that is not under a host root (a test
// double's own file). Call release to unlock.
func Acquire(path string, mode Mode, timeout time.Duration) (release func(), err error) {
	l, err := AcquireIn(host.Root{}, path, mode, timeout)
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

// Lock is a held lock.
type Lock struct {
	f    *os.File // nil: a shared lock on a lock file that did not exist (nothing to hold)
	root host.Root
	path string
}

// maxRelinks bounds how often AcquireIn retries a lock file removed under it.
const maxRelinks = 100

// AcquireIn takes the lock at path under root (creating the file and its directory), waiting
// up to timeout for it: 0 tries once, a negative timeout waits as long as it takes. An
// exclusive holder writes its pid into the file, so a process that times out can name it.
//
// The lock file is opened as every state file is (host.Root.OpenFile): resolved inside the
// root, never through a symbolic link, never waiting on a FIFO, a regular file or an error
// naming what is there instead; its directory is created inside the root (Root.MkdirAll).
//
// A holder may remove the lock file (Lock.RemoveAndRelease). So that this never lets two
// holders in, AcquireIn checks, once it holds the flock, that the file it locked is still the
// one linked at path (same device and inode): a process that opened the file before its holder
// unlinked it, and got the flock after, holds a lock on an orphaned inode that nobody else will
// ever open again; it lets go and starts over with the file now at path. The holder unlinks
// only while it holds the flock, so whoever holds the flock on the inode linked at path holds
// the lock, and there is at most one.
func AcquireIn(root host.Root, path string, mode Mode, timeout time.Duration) (*Lock, error) {
	if mode == Exclusive {
		if err := root.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
	}
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	for range maxRelinks {
		f, err := open(root, path, mode)
		if err != nil {
			return nil, err
		}
		if f == nil {
			return &Lock{root: root, path: path}, nil
		}
		wait := timeout
		if timeout > 0 {
			wait = max(time.Until(deadline), 0)
		}
		if err := flock(f, mode, wait); err != nil {
			who := holder(f)
			f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				return nil, fmt.Errorf("lock %s: %s (waited %s): %w: %w", path, who, timeout, ErrTimeout, host.ErrBusy)
			}
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if linked, err := stillLinked(root, path, f); err != nil || !linked {
			f.Close()
			if err != nil {
				return nil, fmt.Errorf("lock %s: %w", path, err)
			}
			continue // removed by its last holder: lock the file now at path
		}
		if mode == Exclusive {
			// Best effort: the pid is for the message of the next process only.
			if f.Truncate(0) == nil {
				_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
			}
		}
		return &Lock{f: f, root: root, path: path}, nil
	}
	return nil, fmt.Errorf("lock %s: the lock file was removed and created again %d times while waiting for it", path, maxRelinks)
}

// open opens the lock file: created for an exclusive lock; for a shared one nil, nil when it
// does not exist. A reader (plan, status) must leave no file behind; a lock file that does not
// exist yet means no writer ever ran: there is nothing to wait for, and the state files are
// replaced atomically, so reading them unlocked then still sees whole files.
func open(root host.Root, path string, mode Mode) (*os.File, error) {
	if mode == Exclusive {
		f, err := root.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		return f, nil
	}
	f, err := root.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return f, nil
}

// stillLinked reports whether f is the file linked at path now (not one a holder removed).
func stillLinked(root host.Root, path string, f *os.File) (bool, error) {
	var held, now syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &held); err != nil {
		return false, err
	}
	if held.Nlink == 0 {
		return false, nil
	}
	g, err := host.OpenInRoot(root.Dir(), path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer g.Close()
	if err := syscall.Fstat(int(g.Fd()), &now); err != nil {
		return false, err
	}
	return held.Dev == now.Dev && held.Ino == now.Ino, nil
}

// Release unlocks.
func (l *Lock) Release() {
	if l.f == nil {
		return
	}
	_ = syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	l.f.Close()
	l.f = nil
}

// RemoveAndRelease removes the lock file, then unlocks: for a lock named after something that
// is gone (a VM destroyed), so that lock files do not pile up. It must hold the lock
// exclusively: it unlinks while it holds the flock, and every AcquireIn checks after its flock
// that its file is still linked, so a process waiting on the removed file starts over on a new
// one instead of sharing the lock with the next holder. A failed removal leaves the file (and
// is returned): it is only a lock file.
func (l *Lock) RemoveAndRelease() error {
	if l.f == nil {
		return nil
	}
	defer l.Release()
	if linked, err := stillLinked(l.root, l.path, l.f); err != nil || !linked {
		return err
	}
	if err := l.root.Remove(l.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove lock file %s: %w", l.path, err)
	}
	return nil
}

// With runs fn while holding the lock at path, on the real root (Acquire).
func With(path string, mode Mode, timeout time.Duration, fn func() error) error {
	return WithIn(host.Root{}, path, mode, timeout, fn)
}

// WithIn runs fn while holding the lock at path under root (AcquireIn).
func WithIn(root host.Root, path string, mode Mode, timeout time.Duration, fn func() error) error {
	l, err := AcquireIn(root, path, mode, timeout)
	if err != nil {
		return err
	}
	defer l.Release()
	return fn()
}

// flock takes the lock, polling a non-blocking flock until timeout (EWOULDBLOCK when it passes).
func flock(f *os.File, mode Mode, timeout time.Duration) error {
	fd := int(f.Fd())
	if timeout < 0 {
		for {
			err := syscall.Flock(fd, int(mode))
			if !errors.Is(err, syscall.EINTR) {
				return err
			}
		}
	}
	deadline := time.Now().Add(timeout)
	wait := 5 * time.Millisecond
	for {
		err := syscall.Flock(fd, int(mode)|syscall.LOCK_NB)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, syscall.EINTR):
			continue
		case !errors.Is(err, syscall.EWOULDBLOCK):
			return err
		case !time.Now().Before(deadline):
			return err
		}
		time.Sleep(min(wait, time.Until(deadline)+time.Millisecond))
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// holder describes who holds the lock on f, from the pid its last exclusive holder wrote.
func holder(f *os.File) string {
	b := make([]byte, 32)
	n, _ := f.ReadAt(b, 0)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b[:n])))
	if err != nil || pid <= 0 {
		return "held by another process (readers hold it shared and leave no pid)"
	}
	if err := syscall.Kill(pid, 0); err != nil && errors.Is(err, syscall.ESRCH) {
		return fmt.Sprintf("held by another process (its last writer, pid %d, has exited: a reader holds it shared)", pid)
	}
	// The lock's holder is a process of this machine, whatever --host-root says.
	if c := host.ProcessName(host.Root{}, pid); c != "" {
		return fmt.Sprintf("held by pid %d (%s)", pid, c)
	}
	return fmt.Sprintf("held by pid %d", pid)
}
