package clitree

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/mdev"
)

// unitKeys returns KEY=VALUE lines of a unit file by key (comments and sections dropped).
func unitKeys(t *testing.T, text string) map[string]string {
	t.Helper()
	keys := map[string]string{}
	for _, ln := range strings.Split(text, "\n") {
		if k, v, ok := strings.Cut(ln, "="); ok && !strings.HasPrefix(ln, "#") {
			keys[k] = v
		}
	}
	return keys
}

// TestAgentUnitIsTheRestoreUnitsAlternative: deploy/systemd/vgpu-host-agent.service, which
// make install and the Debian package ship, is ordered exactly like vgpu-host-restore.service
// (after module loading and the vGPU manager, before libvirt and its guests), conflicts with
// it, and only reports ready when the agent says so (Type=notify), with its socket directory.
func TestAgentUnitIsTheRestoreUnitsAlternative(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "systemd", "vgpu-host-agent.service"))
	if err != nil {
		t.Fatal(err)
	}
	agent := unitKeys(t, string(b))
	restore := unitKeys(t, mdev.SystemdUnit("/usr/bin/vgpu-host"))
	for _, k := range []string{"After", "Before", "WantedBy"} {
		if agent[k] != restore[k] {
			t.Errorf("%s=%s in the agent unit, %s in the restore unit", k, agent[k], restore[k])
		}
	}
	want := map[string]string{
		"Type": "notify", "ExecStart": "/usr/bin/vgpu-host agent", "Conflicts": mdev.UnitName,
		"RuntimeDirectory": "vgpu-host", "Restart": "on-failure",
	}
	for k, v := range want {
		if agent[k] != v {
			t.Errorf("%s=%q, want %q", k, agent[k], v)
		}
	}
	// Hardening must not make /sys or /etc read-only: the agent writes both.
	for k, bad := range map[string]string{"ProtectKernelTunables": "yes", "ProtectSystem": "full", "PrivateDevices": "yes"} {
		if agent[k] == bad || (k == "ProtectSystem" && agent[k] == "strict") {
			t.Errorf("%s=%s would stop the agent writing sysfs or /etc", k, agent[k])
		}
	}
}
