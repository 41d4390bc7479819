package mdev

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
)

// TestInstallUnitRejectsControlCharacters: `host install-unit --exec` refused LF but took CR
// and other control characters, which systemd reads as line breaks or worse, so the unit could
// be made to run a second command as root at boot.
func TestInstallUnitRejectsControlCharacters(t *testing.T) {
	tr := hosttest.New(t)
	m, _ := newMgr(tr)
	for _, p := range []string{"/usr/bin/vgpu-host\rExecStartPre=/bin/sh", "/usr/bin/vgpu\x00host", "/usr/bin/vgpu\x1bhost", "/usr/bin/vgpu-host\n",
		"/usr/bin/a;b", `/usr/bin/a"b`, `/usr/bin/a\x`, "/usr/bin/\xff", "relative/vgpu-host", "/usr/bin/vgpu host"} {
		_, err := m.InstallUnit(p)
		if !errors.Is(err, host.ErrInvalid) {
			t.Errorf("%q: %v", p, err)
		}
	}
	if _, err := os.Stat(m.UnitPath()); !os.IsNotExist(err) {
		t.Fatalf("a unit was written: %v", err)
	}
	if _, err := m.InstallUnit("/usr/local/bin/vgpu-host"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(m.UnitPath()); !strings.Contains(string(b), "/usr/local/bin/vgpu-host") {
		t.Errorf("unit:\n%s", b)
	}
}

// TestInstallUnitHostileFiles: host install-unit with a FIFO where the unit belongs read it
// with os.ReadFile and waited for ever; with systemd/system a link out of the host root, the
// wants directory was made through it. Now the unit is read as a state file (an error naming
// the FIFO or link, at once), and the directory is made inside the root or refused.
func TestInstallUnitHostileFiles(t *testing.T) {
	t.Parallel()
	t.Run("fifo unit", func(t *testing.T) {
		tr := hosttest.New(t)
		m, _ := newMgr(tr)
		os.MkdirAll(filepath.Dir(m.UnitPath()), 0o755)
		if err := syscall.Mkfifo(m.UnitPath(), 0o644); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { _, err := m.InstallUnit("/usr/local/bin/vgpu-host"); done <- err }()
		select {
		case err := <-done:
			if !errors.Is(err, host.ErrNotRegular) || !strings.Contains(err.Error(), m.UnitPath()) {
				t.Errorf("install-unit over a FIFO: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("install-unit waits on a FIFO where the unit belongs")
		}
	})
	t.Run("systemd out of the root", func(t *testing.T) {
		tr := hosttest.New(t)
		m, _ := newMgr(tr)
		outside := t.TempDir() // stands for the real host's /etc/systemd
		os.MkdirAll(tr.Root.Etc(), 0o755)
		if err := os.Symlink(outside, tr.Root.Etc("systemd")); err != nil {
			t.Fatal(err)
		}
		_, err := m.InstallUnit("/usr/local/bin/vgpu-host")
		if !errors.Is(err, host.ErrRefused) {
			t.Errorf("install-unit through etc/systemd -> %s: %v", outside, err)
		}
		if ents, _ := os.ReadDir(outside); len(ents) != 0 {
			t.Errorf("install-unit wrote outside the host root: %v", ents)
		}
	})
}
