package vfio

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
)

// bind --persist and the boot's PersistedBindings with something other than a file where a
// driverctl override or the softdep file belongs: a FIFO (a read of it waited for ever), a
// link, a directory, and a link in the tree that leads /etc out of the host root (the read
// went through it and the write was refused only after the group had moved). Each is an error
// naming the path, within a second, before any sysfs write; nothing is written outside the
// root, and the FIFO is never opened for reading in a way that waits.
func TestPersistFilesHostile(t *testing.T) {
	t.Parallel()
	outside := t.TempDir() // stands for the real host's /etc: nothing may appear here
	cases := []struct {
		name  string
		plant func(t *testing.T, root host.Root, gpu host.Address)
		want  error
		says  string
	}{
		{"fifo driverctl override", func(t *testing.T, root host.Root, gpu host.Address) {
			mkfifo(t, DriverctlPath(root, gpu))
		}, host.ErrNotRegular, "a named pipe (FIFO)"},
		{"fifo softdep file", func(t *testing.T, root host.Root, _ host.Address) {
			mkfifo(t, SoftdepPath(root))
		}, host.ErrNotRegular, "a named pipe (FIFO)"},
		{"link driverctl override", func(t *testing.T, root host.Root, gpu host.Address) {
			os.WriteFile(filepath.Join(outside, "target"), []byte("vfio-pci\n"), 0o644)
			symlink(t, filepath.Join(outside, "target"), DriverctlPath(root, gpu))
		}, host.ErrNotRegular, "a symbolic link"},
		{"directory softdep file", func(t *testing.T, root host.Root, _ host.Address) {
			if err := os.MkdirAll(SoftdepPath(root), 0o755); err != nil {
				t.Fatal(err)
			}
		}, host.ErrNotRegular, "a directory"},
		{"modprobe.d out of the root", func(t *testing.T, root host.Root, _ host.Address) {
			os.RemoveAll(root.Etc("modprobe.d"))
			symlink(t, outside, root.Etc("modprobe.d"))
		}, host.ErrRefused, "outside the host root"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr, k, b, gpu, audio := consumer(t, "")
			if err := os.MkdirAll(tr.Root.Etc("driverctl.d"), 0o755); err != nil {
				t.Fatal(err)
			}
			os.MkdirAll(tr.Root.Etc("modprobe.d"), 0o755)
			c.plant(t, tr.Root, gpu)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			start := time.Now()
			_, err := b.Bind(ctx, []host.Address{gpu}, BindOptions{Persist: true})
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.says) || time.Since(start) > time.Second {
				t.Fatalf("bind --persist: %v after %s, want %v saying %q", err, time.Since(start), c.want, c.says)
			}
			if w := k.Writes(); len(w) != 0 {
				t.Errorf("bind --persist that could not persist wrote sysfs first: %v", w)
			}
			if tr.Driver(audio) != "snd_hda_intel" {
				t.Errorf("audio moved to %s", tr.Driver(audio))
			}
			ents, _ := os.ReadDir(outside)
			for _, e := range ents {
				if e.Name() != "target" {
					t.Errorf("a file appeared outside the host root: %s", e.Name())
				}
			}
		})
	}
	// The boot's read of the persisted bindings: a FIFO where an override belongs is an error
	// naming it, not a wait.
	tr, _, b, gpu, _ := consumer(t, "")
	if _, err := b.Bind(context.Background(), []host.Address{gpu}, BindOptions{Persist: true}); err != nil {
		t.Fatal(err)
	}
	p := DriverctlPath(tr.Root, gpu)
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	mkfifo(t, p)
	done := make(chan error, 1)
	go func() { _, err := PersistedBindings(tr.Root); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, host.ErrNotRegular) || !strings.Contains(err.Error(), p) {
			t.Errorf("PersistedBindings with a FIFO override: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("PersistedBindings waits on a FIFO where a driverctl override belongs")
	}
}

func mkfifo(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, p string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}
