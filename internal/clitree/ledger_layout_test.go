package clitree

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/ledger"
)

// TestLedgerFilesThroughCLI: apply, status and destroy on the per-VM ledger files. A ledger.json
// from an older vgpu-host is listed by status as it is, migrated by the next apply (kept as
// ledger.json.v1), and its VM is then destroyed from the new files. A damaged VM file stops
// the commands on that VM only, naming the file and the fix; status lists the others.
func TestLedgerFilesThroughCLI(t *testing.T) {
	tr := hosttest.New(t)
	fakeLibvirt(t)
	specs := t.TempDir()
	old := `{"version":1,"vms":{"old":{"name":"old","phase":"applied","claims":[],"journal":[],"updated_at":"2026-01-02T03:04:05Z"}}}`
	tr.WriteFile("var/lib/vgpu-host/ledger.json", old)
	r := tr.Dir()
	out, code := run(t, "--host-root", r, "-o", "json", "status")
	if code != 0 || !strings.Contains(out, `"name": "old"`) {
		t.Fatalf("status of an old ledger: exit %d\n%s", code, out)
	}
	if out, code := run(t, "--host-root", r, "apply", deviceFreeVM(t, specs, "new")); code != 0 {
		t.Fatalf("apply: exit %d\n%s", code, out)
	}
	if b, err := os.ReadFile(tr.Root.StateDir("ledger.json.v1")); err != nil || string(b) != old {
		t.Fatalf("the old ledger was not kept as ledger.json.v1: %v %q", err, b)
	}
	l := ledger.Open(tr.Root)
	var e struct {
		Name  string `json:"name"`
		Phase string `json:"phase"`
	}
	for _, name := range []string{"old", "new"} {
		data, err := os.ReadFile(l.VMPath(name))
		if err != nil || json.Unmarshal(data, &e) != nil || e.Name != name || e.Phase != ledger.PhaseApplied {
			t.Fatalf("%s: %v %+v", l.VMPath(name), err, e)
		}
	}
	if out, code := run(t, "--host-root", r, "destroy", "old"); code != 0 {
		t.Fatalf("destroy of the migrated VM: exit %d\n%s", code, out)
	}

	tr.WriteFile("var/lib/vgpu-host/ledger/vms/x.json", "null")
	out, err := runErr(t, "--host-root", r, "-o", "json", "status")
	if code := exitCode(err); code != 1 || !strings.Contains(err.Error(), l.VMPath("x")) || !strings.Contains(err.Error(), "move the file aside") {
		t.Fatalf("status with a damaged VM file: exit %d %v", code, err)
	}
	if !strings.Contains(out, `"name": "new"`) {
		t.Errorf("status did not list the intact VM:\n%s", out)
	}
	if _, err := runErr(t, "--host-root", r, "destroy", "x"); exitCode(err) != 1 || !strings.Contains(err.Error(), l.VMPath("x")) {
		t.Errorf("destroy x: %v", err)
	}
	if out, code := run(t, "--host-root", r, "destroy", "new"); code != 0 {
		t.Errorf("destroy of another VM beside a damaged one: exit %d\n%s", code, out)
	}
	if b, _ := os.ReadFile(l.VMPath("x")); string(b) != "null" {
		t.Errorf("the damaged file was rewritten: %q", b)
	}
}
