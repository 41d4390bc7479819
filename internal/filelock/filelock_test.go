package filelock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
)

// flock locks belong to an open file description, so two Acquire calls in one process contend
// exactly as two processes do.
func TestTimeoutNamesFileAndHolder(t *testing.T) {
	p := filepath.Join(t.TempDir(), "state", "x.lock")
	release, err := Acquire(p, Exclusive, 0)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	_, err = Acquire(p, Exclusive, 150*time.Millisecond)
	if err == nil {
		t.Fatal("second exclusive lock succeeded")
	}
	if d := time.Since(t0); d < 150*time.Millisecond || d > 2*time.Second {
		t.Errorf("waited %s, want about 150ms", d)
	}
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, host.ErrBusy) {
		t.Errorf("error does not wrap ErrTimeout and host.ErrBusy: %v", err)
	}
	if want := fmt.Sprintf("held by pid %d", os.Getpid()); !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not name %s and %q", err, p, want)
	}
	if _, err := Acquire(p, Shared, 0); err == nil {
		t.Error("shared lock granted while held exclusively")
	}
	release()
	r2, err := Acquire(p, Exclusive, 0)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	r2()
}

func TestSharedHoldersShare(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.lock")
	if err := With(p, Exclusive, 0, func() error { return nil }); err != nil { // a writer made it
		t.Fatal(err)
	}
	r1, err := Acquire(p, Shared, 0)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := Acquire(p, Shared, 0)
	if err != nil {
		t.Fatalf("second shared lock: %v", err)
	}
	if _, err := Acquire(p, Exclusive, 20*time.Millisecond); err == nil {
		t.Error("exclusive lock granted while held shared")
	}
	r1()
	r2()
	if err := With(p, Exclusive, 0, func() error { return nil }); err != nil {
		t.Fatal(err)
	}
}

// TestWaitsForRelease: a waiter gets the lock as soon as the holder lets go.
func TestWaitsForRelease(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.lock")
	release, err := Acquire(p, Exclusive, 0)
	if err != nil {
		t.Fatal(err)
	}
	go func() { time.Sleep(100 * time.Millisecond); release() }()
	if err := With(p, Exclusive, 5*time.Second, func() error { return nil }); err != nil {
		t.Fatalf("waiter: %v", err)
	}
}

func TestSibling(t *testing.T) {
	for in, want := range map[string]string{"/a/ledger.json": "/a/ledger.lock", "/a/b": "/a/b.lock"} {
		if got := Sibling(in); got != want {
			t.Errorf("Sibling(%s) = %s, want %s", in, got, want)
		}
	}
}

// TestSharedCreatesNothing: a reader leaves no file behind where no writer ever ran.
func TestSharedCreatesNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	release, err := Acquire(filepath.Join(dir, "x.lock"), Shared, 0)
	if err != nil {
		t.Fatal(err)
	}
	release()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("a shared lock created %s (%v)", dir, err)
	}
}

// TestLockFileNotFollowedOutOfRoot: a lock file that is a symlink to a file outside the host
// root had that file truncated to the pid; a FIFO there hung the shared lock's open. Both are
// now refused at once with an error naming the path, and the target is unchanged; a lock
// directory linked out of the root is refused before anything is created.
func TestLockFileNotFollowedOutOfRoot(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "shadow")
	if err := os.WriteFile(outside, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"symlink", "fifo", "directory"} {
		for _, mode := range []Mode{Exclusive, Shared} {
			root, err := host.NewRoot(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			p := root.StateDir("ledger.lock")
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			switch kind {
			case "symlink":
				err = os.Symlink(outside, p)
			case "fifo":
				err = syscall.Mkfifo(p, 0o644)
			case "directory":
				err = os.Mkdir(p, 0o755)
			}
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				l, err := AcquireIn(root, p, mode, time.Second)
				if err == nil {
					l.Release()
				}
				done <- err
			}()
			select {
			case err = <-done:
			case <-time.After(5 * time.Second):
				t.Fatalf("lock (mode %d) on a %s hangs", mode, kind)
			}
			if !errors.Is(err, host.ErrNotRegular) || !strings.Contains(err.Error(), p) {
				t.Errorf("lock (mode %d) on a %s: %v, want an error naming %s", mode, kind, err, p)
			}
		}
	}
	if b, _ := os.ReadFile(outside); string(b) != "secret\n" {
		t.Errorf("the file outside the root was written: %q", b)
	}

	root, err := host.NewRoot(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	away := t.TempDir()
	if err := os.MkdirAll(root.Path("var", "lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(away, root.StateDir()); err != nil {
		t.Fatal(err)
	}
	if _, err := AcquireIn(root, root.StateDir("vms", "x.lock"), Exclusive, 0); !errors.Is(err, host.ErrRefused) {
		t.Errorf("lock under var/lib/vgpu-host -> %s: %v", away, err)
	}
	if ents, _ := os.ReadDir(away); len(ents) != 0 {
		t.Errorf("created outside the root: %v", ents)
	}
}

// TestRemoveAndReleaseKeepsOneHolder: removing a lock file that a waiter has already opened
// must not let that waiter and a newcomer (who creates a new file) both hold the lock.
func TestRemoveAndReleaseKeepsOneHolder(t *testing.T) {
	root, err := host.NewRoot(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p := root.StateDir("vms", "vm1.lock")
	a, err := AcquireIn(root, p, Exclusive, 0)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   *Lock
		err error
	}
	waiter := make(chan result, 1)
	go func() {
		l, err := AcquireIn(root, p, Exclusive, 5*time.Second)
		waiter <- result{l, err}
	}()
	time.Sleep(100 * time.Millisecond) // the waiter has opened the file and polls its flock
	if err := a.RemoveAndRelease(); err != nil {
		t.Fatal(err)
	}
	c, err := AcquireIn(root, p, Exclusive, 0)
	if err == nil {
		select {
		case r := <-waiter:
			t.Fatalf("the waiter holds the lock together with the newcomer (%v)", r.err)
		case <-time.After(300 * time.Millisecond):
		}
		c.Release()
		r := <-waiter
		if r.err != nil {
			t.Fatalf("waiter after the newcomer: %v", r.err)
		}
		r.l.Release()
	} else {
		if !errors.Is(err, ErrTimeout) {
			t.Fatalf("newcomer: %v", err)
		}
		r := <-waiter
		if r.err != nil {
			t.Fatalf("waiter: %v", r.err)
		}
		r.l.Release()
	}
	if _, err := os.Stat(p); err != nil {
		t.Errorf("the lock file now in use is not at %s: %v", p, err)
	}
}
