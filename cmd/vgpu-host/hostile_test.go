package main

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
