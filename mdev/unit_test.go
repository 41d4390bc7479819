package mdev

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/internal/testenv"
)

func TestInstallUnit(t *testing.T) {
	tr := hosttest.New(t)
	m, _ := newMgr(tr)
	wrote, err := m.InstallUnit("/usr/local/bin/vgpu-host")
	if err != nil || len(wrote) != 2 {
		t.Fatalf("install: %v %v", err, wrote)
	}
	b, _ := os.ReadFile(m.UnitPath())
	for _, want := range []string{"Type=oneshot", "Before=libvirtd.service virtqemud.service libvirt-guests.service",
		"After=systemd-modules-load.service", "ExecStart=/usr/local/bin/vgpu-host host restore", "WantedBy=multi-user.target"} {
		if !strings.Contains(string(b), want+"\n") && !strings.Contains(string(b), want+" ") {
			t.Fatalf("unit lacks %q:\n%s", want, b)
		}
	}
	if l, err := os.Readlink(tr.Root.Etc("systemd", "system", "multi-user.target.wants", UnitName)); err != nil || l != "../"+UnitName {
		t.Fatalf("wants link %q %v", l, err)
	}
	if again, err := m.InstallUnit("/usr/local/bin/vgpu-host"); err != nil || len(again) != 0 {
		t.Fatalf("second install wrote %v %v", again, err)
	}
	if _, err := m.InstallUnit("vgpu-host"); err == nil {
		t.Fatal("relative path accepted")
	}
}

// TestUnitVerifies lets systemd judge the unit file, when systemd-analyze is installed.
func TestUnitVerifies(t *testing.T) {
	sa := testenv.RequireTool(t, "systemd-analyze", "systemd")
	dir := t.TempDir()
	p := filepath.Join(dir, UnitName)
	if err := os.WriteFile(p, []byte(SystemdUnit("/bin/true")), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(sa, "verify", "--man=no", p).CombinedOutput()
	// Units named in After=/Before= that this machine lacks are fine; syntax errors are not.
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, UnitName) && !strings.Contains(line, "not found") && !strings.Contains(line, "Failed to load") && strings.TrimSpace(line) != "" {
			t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
		}
	}
}
