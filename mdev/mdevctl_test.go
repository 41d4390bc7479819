package mdev

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/internal/testenv"
)

// TestMdevctlReadsDefinitions lets the real mdevctl judge the files Define writes. mdevctl
// 1.2.0 always reads /etc/mdevctl.d (no root override), so the test bind-mounts the fake
// tree's directory over it inside a private mount namespace (unshare -m): the machine's own
// /etc/mdevctl.d is never touched.
func TestMdevctlReadsDefinitions(t *testing.T) {
	testenv.RequireRoot(t)
	for _, tool := range []string{"mdevctl", "unshare"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (make deps)", tool)
		}
	}
	tr := hosttest.New(t)
	tr.IntelGVTg()
	tr.Mbochs()
	m, _ := newMgr(tr)
	if _, err := m.Define(Definition{UUID: "83c32df7-d52e-4ec1-9668-1f3c7e4df107", Parent: "0000:00:02.0", Type: "GVTg_V5_4"}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Define(Definition{UUID: "5cf14a12-a437-4c82-a13f-70e945782d7b", Parent: "mbochs", Type: "mbochs-small", Start: "manual"}); err != nil {
		t.Fatal(err)
	}
	dir := tr.Root.Etc("mdevctl.d")
	for _, d := range []string{"scripts.d/callouts", "scripts.d/notifiers"} { // mdevctl insists on them
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c",
		`mount --bind "$1" /etc/mdevctl.d && exec mdevctl list --defined --dumpjson`, "sh", dir).CombinedOutput()
	if err != nil {
		t.Skipf("cannot run mdevctl in a private mount namespace here: %v: %s", err, out)
	}
	// [{"PARENT": [{"UUID": {"mdev_type": ..., "start": ..., "attrs": [...]}}]}]
	var got []map[string][]map[string]mdevctlFile
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("mdevctl output: %v\n%s", err, out)
	}
	seen := map[string]mdevctlFile{}
	for _, byParent := range got {
		for parent, devs := range byParent {
			for _, d := range devs {
				for id, f := range d {
					seen[parent+"/"+id] = f
				}
			}
		}
	}
	if f := seen["0000:00:02.0/83c32df7-d52e-4ec1-9668-1f3c7e4df107"]; f.MdevType != "i915-GVTg_V5_4" || f.Start != "auto" {
		t.Fatalf("mdevctl sees %+v\n%s", seen, out)
	}
	if f := seen["mbochs/5cf14a12-a437-4c82-a13f-70e945782d7b"]; f.MdevType != "mbochs-small" || f.Start != "manual" {
		t.Fatalf("mdevctl sees %+v\n%s", seen, out)
	}
}
