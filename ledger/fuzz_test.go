package ledger

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// FuzzLedger: /var/lib/vgpu-host/ledger.json as found on disk. Invariant: no panic (a null VM
// entry used to be a nil-pointer panic in every command); a document Read cannot use is an
// error naming the file, and Update leaves such a file exactly as it was; one Read accepts
// takes a claim, is written and reads back. Seeds: ledgers built by the package's own
// transactions, and damaged ones.
func FuzzLedger(f *testing.F) {
	b := NewBook()
	_ = b.Claim("vm1", Claim{Kind: KindPCI, ID: "0000:41:00.0"}, Claim{Kind: KindMdev, ID: "83c32df7-d52e-4ec1-9668-1f3c7e4df107", Detail: "nvidia-471"})
	e := b.Entry("vm1")
	n := e.Record("create-overlay", "vm1-root.qcow2", map[string]string{"pool": "vgpu-host"})
	e.Mark(n, StepDone)
	e.Phase, e.UpdatedAt = PhaseApplied, time.Unix(1700000000, 0).UTC()
	good, _ := json.MarshalIndent(map[string]any{"version": 1, "vms": map[string]*VM{"vm1": e}}, "", "  ")
	f.Add(good)
	f.Add([]byte(`{"version":1,"vms":{"x":null}}`))
	f.Add([]byte(`{"version":1,"vms":{"x":{"claims":null,"journal":[{"n":1,"params":null}]}}}`))
	f.Add([]byte(`{"version":1,"vms":null}`))
	f.Add([]byte(`{"version":2}`))
	f.Add([]byte(`{"vms":{"a":{"claims":[{"kind":"pci","id":"x"}]},"b":{"claims":[{"kind":"pci","id":"x"}]}}}`))
	f.Add([]byte(``))
	p := filepath.Join(f.TempDir(), "ledger.json") // one per fuzz worker: each input replaces it
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		l := OpenPath(p)
		l.WriteFile = renameNoSync // host.WriteFileAtomic's fsyncs would make each input ~20 ms
		book, rerr := l.Read()
		if rerr != nil && !strings.Contains(rerr.Error(), p) {
			t.Fatalf("error does not name the file: %v", rerr)
		}
		if book != nil {
			for _, name := range book.Names() {
				_ = book.VM(name).Live()
				_ = book.Holder(Claim{Kind: KindPCI, ID: name})
			}
		}
		uerr := l.Update(func(b *Book) error {
			return b.Claim("fuzz-vm", Claim{Kind: KindPCI, ID: "0000:ff:1f.7"})
		})
		if rerr != nil {
			if uerr == nil {
				t.Fatalf("Update wrote over a ledger Read refused: %v", rerr)
			}
			if got, _ := os.ReadFile(p); string(got) != string(data) {
				t.Fatal("a damaged ledger was changed")
			}
			return
		}
		if uerr != nil {
			return // e.g. the claim is another VM's in this document
		}
		back, err := l.Read()
		if err != nil {
			t.Fatalf("what Update wrote does not read back: %v", err)
		}
		if back.Holder(Claim{Kind: KindPCI, ID: "0000:ff:1f.7"}) != "fuzz-vm" {
			t.Fatal("the claim was lost")
		}
	})
}

// renameNoSync replaces path by rename, like host.WriteFileAtomic, without its fsyncs.
func renameNoSync(path string, data []byte, perm os.FileMode) error {
	tmp := path + ".fuzz-tmp"
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(tmp, data, perm); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
