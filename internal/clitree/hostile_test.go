package clitree

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
)

// TestDamagedLedgerNullEntry: a ledger whose VM entry is null made every ledger command panic
// (nil pointer, exit 2). Now status lists the intact entries and exits 1 naming the file and
// the fix; apply and destroy stop with the same error and change nothing.
func TestDamagedLedgerNullEntry(t *testing.T) {
	tr := hosttest.New(t)
	fakeLibvirt(t)
	path := tr.Root.StateDir("ledger.json")
	doc := `{"version":1,"vms":{"x":null,"good":{"name":"good","phase":"applied","claims":[{"kind":"pci","id":"0000:41:00.0"}]}}}`
	tr.WriteFile("var/lib/vgpu-host/ledger.json", doc)

	out, err := runErr(t, "--host-root", tr.Dir(), "-o", "json", "status")
	if code := exitCode(err); code != 1 {
		t.Fatalf("status exit %d, want 1: %v\n%s", code, err, out)
	}
	for _, want := range []string{path, `"x"`, "null", "move the file aside"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("status error does not say %q: %v", want, err)
		}
	}
	var st []map[string]any
	if jerr := json.Unmarshal([]byte(out), &st); jerr != nil || len(st) != 1 || st[0]["name"] != "good" {
		t.Errorf("status did not list the intact entry: %v\n%s", jerr, out)
	}

	spec := deviceFreeVM(t, t.TempDir(), "x")
	for _, args := range [][]string{{"apply", spec}, {"destroy", "x"}} {
		_, err := runErr(t, append([]string{"--host-root", tr.Dir()}, args...)...)
		if code := exitCode(err); code != 1 || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: exit %d, %v", args[0], code, err)
		}
	}
	if b, _ := os.ReadFile(path); string(b) != doc {
		t.Errorf("the damaged ledger was rewritten:\n%s", b)
	}
}

// TestMdevDefineParentEscape: `mdev define --parent ../../..` wrote a file outside
// /etc/mdevctl.d. Every name from input is checked before it is joined into a path.
func TestMdevDefineParentEscape(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	tr.Mbochs()
	withKernel(t, tr)
	id := "0b6c4a8e-1e4f-4b7a-9a43-5f2f3b1e9d10"
	for _, args := range [][]string{
		{"mdev", "define", "--parent", "../../..", "--type", "x", id},
		{"mdev", "define", "--parent", "..", "--type", "x", id},
		{"mdev", "define", "--parent", "a/b", "--type", "x", id},
		{"mdev", "define", "--parent", "mbochs", "--type", "../../x", id},
		{"mdev", "create", "--parent", "mbochs", "--type", "small", "--name", "../vm"},
	} {
		_, err := runErr(t, append([]string{"--host-root", tr.Dir()}, args...)...)
		if code := exitCode(err); code != 2 {
			t.Errorf("%v: exit %d, want 2: %v", args, code, err)
		}
	}
	var outside []string
	_ = filepath.WalkDir(tr.Dir(), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, id) {
			outside = append(outside, p)
		}
		return nil
	})
	if len(outside) > 0 {
		t.Errorf("definitions written: %v", outside)
	}
}

// TestHostRestoreGoesOnPastBadFiles: `host restore` stopped at the first file it could not
// read, although the documentation says it goes on. A damaged sriov.json and a damaged mdevctl
// definition are now two failed steps naming their files; the good definitions are restored,
// and the exit code is non-zero.
func TestHostRestoreGoesOnPastBadFiles(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	tr.Mbochs()
	withKernel(t, tr)
	good := []string{"1b6c4a8e-1e4f-4b7a-9a43-5f2f3b1e9d10", "9b6c4a8e-1e4f-4b7a-9a43-5f2f3b1e9d10"}
	badID := "5b6c4a8e-1e4f-4b7a-9a43-5f2f3b1e9d10"
	for _, id := range good {
		tr.WriteFile("etc/mdevctl.d/mbochs/"+id, `{"mdev_type": "mbochs-small", "start": "auto", "attrs": []}`)
	}
	tr.WriteFile("etc/mdevctl.d/mbochs/"+badID, `{"mdev_type": `)
	tr.WriteFile("etc/vgpu-host/sriov.json", `{"version": 1, "pfs": [`)

	out, err := runErr(t, "--host-root", tr.Dir(), "-o", "json", "host", "restore")
	if code := exitCode(err); code == 0 {
		t.Fatalf("restore with damaged files exit 0:\n%s", out)
	}
	var steps []map[string]string
	if jerr := json.Unmarshal([]byte(out), &steps); jerr != nil {
		t.Fatalf("not JSON: %v\n%s", jerr, out)
	}
	failed := map[string]string{}
	applied := 0
	for _, s := range steps {
		switch s["result"] {
		case "failed":
			failed[s["target"]] = s["error"]
		case "applied":
			applied++
		}
	}
	for _, f := range []string{tr.Root.Etc("vgpu-host", "sriov.json"), tr.Root.Etc("mdevctl.d", "mbochs", badID)} {
		if why, ok := failed[f]; !ok || !strings.Contains(why, f) {
			t.Errorf("no failed step for %s (with the file in its reason): %v", f, failed)
		}
	}
	if applied != 2 {
		t.Errorf("%d steps applied, want the 2 good definitions: %s", applied, out)
	}
	for _, id := range good {
		if !host.Exists(tr.Root.Sys("bus", "mdev", "devices", id)) {
			t.Errorf("good definition %s was not restored", id)
		}
	}
}

// TestPersistRefusesEtcLinkOutOfRoot: `vf enable --persist` under a --host-root whose etc is a
// symlink out of the tree wrote sriov.json through the link, onto another file system.
func TestPersistRefusesEtcLinkOutOfRoot(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	tr.SRIOVPF(hosttest.PCI{Addr: "0000:00:0a.0", Vendor: 0x1b36, Device: 0x0010, Class: 0x010802, Driver: "nvme"},
		hosttest.VFSpec{Total: 2, VFDevice: 0x0010, VFDriver: "nvme"}, 0)
	withKernel(t, tr)
	outside := t.TempDir()
	if err := os.RemoveAll(tr.Root.Path("etc")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, tr.Root.Path("etc")); err != nil {
		t.Fatal(err)
	}
	_, err := runErr(t, "--host-root", tr.Dir(), "vf", "enable", "0000:00:0a.0", "--count", "1", "--persist")
	if err == nil || !strings.Contains(err.Error(), "outside the host root") {
		t.Fatalf("persist through an etc link out of the root: %v", err)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Fatalf("written outside the root: %v", ents)
	}
}
