package filelock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
