package clitree

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/agent/reconcile"
	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
)

// TestHostRestoreBindsPersistedGroups: `host restore` is the boot reconcile (package
// agent/reconcile): after a "reboot" that put a group bound with --persist back on its boot
// drivers, restore binds the whole group again as its last step, and its table ends with the
// summary line; a second restore finds it already bound.
func TestHostRestoreBindsPersistedGroups(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	gpu, audio := tr.ConsumerGPU("0000:00:04.0", "0000:01:00.0", "")
	withKernel(t, tr)
	r := tr.Dir()
	if out, code := run(t, "--host-root", r, "bind", gpu.String(), "--persist"); code != 0 {
		t.Fatalf("bind --persist exit %d: %s", code, out)
	}
	// The reboot: both functions back on their boot drivers, no override.
	for a, drv := range map[host.Address]string{gpu: "nouveau", audio: "snd_hda_intel"} {
		tr.Unbind(a)
		tr.Bind(a, drv)
		tr.WriteFile("sys/bus/pci/devices/"+a.String()+"/driver_override", "(null)\n")
	}
	out, code := run(t, "--host-root", r, "host", "restore", "-o", "json")
	var steps []reconcile.Step
	if code != 0 || json.Unmarshal([]byte(out), &steps) != nil || len(steps) != 1 {
		t.Fatalf("restore exit %d: %s", code, out)
	}
	if s := steps[0]; s.Kind != reconcile.KindVFIO || s.Result != reconcile.Applied || s.Target != gpu.String()+","+audio.String() || s.Took == "" {
		t.Fatalf("step %+v", s)
	}
	for _, a := range []host.Address{gpu, audio} {
		if d := tr.Driver(a); d != "vfio-pci" {
			t.Errorf("%s on %q after restore", a, d)
		}
	}
	out, code = run(t, "--host-root", r, "host", "restore")
	if code != 0 || !strings.Contains(out, "already") || !strings.Contains(out, "reconciled 1 steps in ") {
		t.Fatalf("second restore exit %d: %s", code, out)
	}
}
