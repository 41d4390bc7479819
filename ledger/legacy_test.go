package ledger

import (
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestStrayOldLedgerBesideNew: a v1 ledger.json beside a v2 ledger hid every VM from Read
// (status read the old document instead) and the next Update migrated it, dropping the
// running VM's entry. Now both stop with an error naming both files and the fix; Read still
// lists the ledger directory's VMs with it, and nothing is written.
func TestStrayOldLedgerBesideNew(t *testing.T) {
	t.Parallel()
	for name, stray := range map[string]string{
		"other VMs": oldDoc,
		"empty":     `{"version":1,"vms":{}}`,
		"same VM":   `{"version":1,"vms":{"n":{"name":"n","claims":[{"kind":"pci","id":"0000:42:00.0"}],"journal":[]}}}`,
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "ledger.json")
			l := OpenPath(path)
			if err := l.Update(func(b *Book) error { return b.Claim("n", gpuB) }); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(stray), 0o644); err != nil {
				t.Fatal(err)
			}
			before := files(t, dir)
			saysBoth := func(what string, err error) {
				t.Helper()
				if err == nil {
					t.Fatalf("%s: no error", what)
				}
				for _, s := range []string{path, filepath.Join(dir, "ledger"), "remove " + path, "still runs"} {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("%s: the error does not say %q: %v", what, s, err)
					}
				}
			}

			b, err := l.Read()
			saysBoth("read", err)
			if b == nil || !slicesEqual(b.Names(), []string{"n"}) || b.Holder(gpuB) != "n" {
				t.Fatalf("read lists %v, want the ledger directory's VM n", b)
			}
			saysBoth("view", l.View(func(b *Book) error { return nil }))
			saysBoth("update", l.Update(func(b *Book) error { return b.Claim("m", gpuA) }))
			if after := files(t, dir); !maps.Equal(before, after) {
				t.Fatalf("files changed:\nbefore %v\nafter  %v", before, after)
			}

			// Moved aside, the ledger directory is the ledger again.
			if err := os.Rename(path, path+".stray"); err != nil {
				t.Fatal(err)
			}
			if got := state(t, l); !maps.Equal(got, map[string]string{"n": "[pci:0000:42:00.0] journal 0"}) {
				t.Fatalf("after moving the stray aside the ledger reads %v", got)
			}
		})
	}
}

func slicesEqual(a, b []string) bool {
	return strings.Join(a, "\x00") == strings.Join(b, "\x00")
}
