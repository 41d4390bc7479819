// Package filelock is vgpu-host's one file lock: flock(2) on a lock file beside the state it
// guards, with a timeout, and an error on timeout that names the lock file and the pid of the
// process holding it.
//
// Every read-modify-write of a state file (the allocation ledger, the vfio ledger, the vGPU
// state file, /etc/vgpu-host/sriov.json, the mdevctl definitions) holds one of these locks.
// The lock is a separate file because state files are replaced by rename on every save, and a
// lock on a replaced inode would protect nothing. The kernel drops a flock when its holder dies
// (kill -9), so a crashed run never blocks the next one; the lock file itself stays (removing it
// while another process opens it would let two holders in).
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

// Acquire takes the lock at path (creating the file and its directory), waiting up to timeout
// for it: 0 tries once, a negative timeout waits as long as it takes. An exclusive holder writes
// its pid into the file, so a process that times out can name it. Call release to unlock.
func Acquire(path string, mode Mode, timeout time.Duration) (release func(), err error) {
	if mode == Shared {
		return acquireShared(path, timeout)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := flock(f, mode, timeout); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("lock %s: %s (waited %s): %w: %w", path, holder(path), timeout, ErrTimeout, host.ErrBusy)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if mode == Exclusive {
		// Best effort: the pid is for the message of the next process only.
		if f.Truncate(0) == nil {
			_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
		}
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

// acquireShared takes a shared lock without creating anything: a reader (plan, status) must
// leave no file behind. A lock file that does not exist yet means no writer ever ran: there is
// nothing to wait for, and the state files are replaced atomically, so reading them unlocked
// then still sees whole files.
func acquireShared(path string, timeout time.Duration) (func(), error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return func() {}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := flock(f, Shared, timeout); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("lock %s: %s (waited %s): %w: %w", path, holder(path), timeout, ErrTimeout, host.ErrBusy)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

// With runs fn while holding the lock at path.
func With(path string, mode Mode, timeout time.Duration, fn func() error) error {
	release, err := Acquire(path, mode, timeout)
	if err != nil {
		return err
	}
	defer release()
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

// holder describes who holds the lock at path, from the pid its last exclusive holder wrote.
func holder(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "held by another process"
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
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
