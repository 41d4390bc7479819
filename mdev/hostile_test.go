package mdev

import (
	"errors"
	"os"
	"strings"
	"testing"

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
