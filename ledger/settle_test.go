package ledger

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
)

// TestSettleSkipsOnlyTheDirectorySync: Settle writes what it changed like Update, and leaves
// out the directory's fsync only when one VM file is all it writes (a new one or an existing
// one); a change of claims or of several VMs (through the index) and every Update sync their
// directories.
func TestSettleSkipsOnlyTheDirectorySync(t *testing.T) {
	t.Parallel()
	var synced []string
	l := OpenPath(filepath.Join(t.TempDir(), "ledger.json"))
	l.SyncDir = func(dir string) { synced = append(synced, filepath.Base(dir)); host.SyncDir(dir) }
	step := func(what string, tx func(func(*Book) error) error, fn func(*Book) error, want ...string) {
		t.Helper()
		synced = nil
		if err := tx(fn); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if !slices.Equal(synced, want) {
			t.Errorf("%s synced directories %v, want %v", what, synced, want)
		}
	}
	gpu := Claim{Kind: KindPCI, ID: "0000:41:00.0"}
	var n int
	step("Update of a new ledger", l.Update, func(b *Book) error { n = b.Entry("a").Record("define", "a", nil); return nil }, "ledger", "vms")
	step("Settle of an existing file", l.Settle, func(b *Book) error { b.Entry("a").Mark(n, StepDone); return nil })
	step("Update of an existing file", l.Update, func(b *Book) error { b.Entry("a").Phase = PhaseApplied; return nil }, "vms")
	step("Settle that claims", l.Settle, func(b *Book) error { return b.Claim("a", gpu) }, "ledger", "vms")
	step("Settle of a new VM's file", l.Settle, func(b *Book) error { b.Entry("b").Record("define", "b", nil); return nil })
	step("Settle of two VMs", l.Settle, func(b *Book) error {
		b.Entry("a").Phase = ""
		b.Entry("b").Phase = PhaseApplied
		return nil
	}, "ledger", "vms", "vms")
	b, err := l.Read()
	if err != nil {
		t.Fatal(err)
	}
	a, bb := b.VM("a"), b.VM("b")
	if a == nil || a.Phase != "" || len(a.Claims) != 1 || len(a.Live()) != 1 || a.Live()[0].Status != StepDone ||
		bb == nil || bb.Phase != PhaseApplied || len(bb.Live()) != 1 {
		t.Fatalf("after the transactions the entries read %+v and %+v", a, bb)
	}
}
