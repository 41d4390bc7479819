package vfio

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
)

// FuzzLedgerFile: /var/lib/vgpu-host/vfio.json as found on disk (it records the original
// driver of every function vgpu-host bound). Invariant: no panic; a file that is not usable is
// an error naming it and is left as it is; one that loads saves and loads back to the same
// entries. Seeds: a ledger written by a real bind on a fake tree, and damaged ones.
func FuzzLedgerFile(f *testing.F) {
	prev := "options x\n"
	l := Bindings{Version: 1, Devices: map[string]Binding{
		"0000:01:00.0": {Address: host.MustParseAddress("0000:01:00.0"), Group: 12, Driver: "nouveau", Module: "nouveau", BoundAt: time.Unix(1700000000, 0).UTC()},
		"0000:01:00.1": {Address: host.MustParseAddress("0000:01:00.1"), Group: 12, Driver: "snd_hda_intel", Override: "", Owner: "vm1", Persist: true},
	}, Files: map[string]PersistedFile{"/etc/driverctl.d/pci-0000:01:00.0": {Address: host.MustParseAddress("0000:01:00.0"), Previous: &prev}}}
	b, _ := json.Marshal(l)
	f.Add(b)
	f.Add([]byte(`{"version":1,"devices":{"x":{"address":"zz"}}}`))
	f.Add([]byte(`{"version":1,"devices":{"0000:01:00.0":{"address":"0000:01:00.0","driver":"../../../../etc"}}}`))
	f.Add([]byte(`{"version":1,"devices":null,"files":{"a":{"previous":null}}}`))
	f.Add([]byte(`{"version":99}`))
	tr := hosttest.New(f) // one per fuzz worker: each input replaces the file first
	f.Fuzz(func(t *testing.T, data []byte) {
		p := LedgerPath(tr.Root)
		writeFuzzFile(t, tr.Root.Path("var/lib/vgpu-host/vfio.json"), data)
		l, err := LoadLedger(tr.Root)
		if err != nil {
			if !strings.Contains(err.Error(), p) {
				t.Fatalf("error does not name the file: %v", err)
			}
			if got, _ := os.ReadFile(p); string(got) != string(data) {
				t.Fatal("a ledger that did not load was changed")
			}
			return
		}
		entries := l.Entries()
		for _, e := range entries {
			_, _ = l.Lookup(e.Address)
		}
		if err := l.save(tr.Root); err != nil {
			t.Fatalf("save: %v", err)
		}
		back, err := LoadLedger(tr.Root)
		if err != nil {
			t.Fatalf("what vgpu-host saved does not load: %v", err)
		}
		if len(back.Entries()) != len(entries) {
			t.Fatalf("%d entries after a save, want %d", len(back.Entries()), len(entries))
		}
	})
}

// writeFuzzFile writes one input where the code under test reads it (the tree's own WriteFile
// would fail the whole fuzz target, not the input).
func writeFuzzFile(t *testing.T, path string, data []byte) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}
