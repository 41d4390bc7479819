package ledger

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
)

var (
	gpuA = Claim{Kind: KindPCI, ID: "0000:41:00.0", Detail: "gpu"}
	gpuB = Claim{Kind: KindPCI, ID: "0000:42:00.0"}
	mdev = Claim{Kind: KindMdev, ID: "83c32df7-d52e-4ec1-9668-1f3c7e4df107", Detail: "nvidia-471"}
)

// counting wraps a ledger's writes and removals to count them.
func counting(l *Ledger) (writes, removes *[]string) {
	writes, removes = new([]string), new([]string)
	l.WriteFile = func(p string, data []byte, perm os.FileMode) error {
		*writes = append(*writes, filepath.Base(p))
		return renameNoSync(p, data, perm)
	}
	l.Remove = func(p string) error { *removes = append(*removes, filepath.Base(p)); return os.Remove(p) }
	return writes, removes
}

// TestLayout: one file per VM under ledger/vms and the claims index, readable with plain JSON
// (what jq sees); a journal step rewrites that VM's file only; a claim writes the index first.
func TestLayout(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := OpenPath(filepath.Join(dir, "ledger.json"))
	writes, removes := counting(l)
	if err := l.Update(func(b *Book) error { return b.Claim("a", gpuA, mdev) }); err != nil {
		t.Fatal(err)
	}
	if want := []string{"claims.json", "a.json"}; !slices.Equal(*writes, want) {
		t.Fatalf("a claim wrote %v, want %v (the index, the commit point, first)", *writes, want)
	}
	var idx struct {
		Claims map[string]string `json:"claims"`
	}
	readJSON(t, filepath.Join(dir, "ledger", "claims.json"), &idx)
	if want := map[string]string{"pci:0000:41:00.0": "a", "mdev:" + mdev.ID: "a"}; !maps.Equal(idx.Claims, want) {
		t.Fatalf("claims.json .claims = %v, want %v", idx.Claims, want)
	}
	var vm struct {
		Version int     `json:"version"`
		Name    string  `json:"name"`
		Claims  []Claim `json:"claims"`
	}
	readJSON(t, filepath.Join(dir, "ledger", "vms", "a.json"), &vm)
	if vm.Version != FormatVersion || vm.Name != "a" || len(vm.Claims) != 2 || vm.Claims[1].Detail != "nvidia-471" {
		t.Fatalf("vms/a.json = %+v", vm)
	}

	// A journal step: one VM file, no index.
	*writes = nil
	if err := l.Update(func(b *Book) error { b.Entry("a").Record("define", "a", nil); return nil }); err != nil {
		t.Fatal(err)
	}
	if want := []string{"a.json"}; !slices.Equal(*writes, want) {
		t.Fatalf("a journal step wrote %v, want %v", *writes, want)
	}
	// A VM without devices: its file only; a transaction that changes nothing writes nothing.
	*writes = nil
	if err := l.Update(func(b *Book) error { b.Entry("v").Phase = PhaseApplied; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := l.Update(func(b *Book) error { _ = b.VM("a"); _ = b.Names(); return nil }); err != nil {
		t.Fatal(err)
	}
	if want := []string{"v.json"}; !slices.Equal(*writes, want) {
		t.Fatalf("wrote %v, want %v", *writes, want)
	}
	// Released by a destroy: the index, then the file goes.
	*writes = nil
	if err := l.Update(func(b *Book) error { b.Delete("a"); return nil }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(*writes, []string{"claims.json"}) || !slices.Equal(*removes, []string{"a.json"}) {
		t.Fatalf("destroy wrote %v and removed %v", *writes, *removes)
	}
	b, err := l.Read()
	if err != nil || !slices.Equal(b.Names(), []string{"v"}) || b.Holder(gpuA) != "" || len(b.AllClaims()) != 0 {
		t.Fatalf("after destroy: %v %v %v", err, b.Names(), b.AllClaims())
	}
	if _, err := os.Stat(filepath.Join(dir, "ledger", "vms", "a.json")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a.json still there: %v", err)
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestTransactionReadsOnlyWhatItNeeds: with many VMs, a transaction on one VM and a claim
// check open no other VM file. Every other VM file is made unreadable garbage: the
// transaction still works, which it could not if it read them; Read, which shows them all,
// names the first damaged one.
func TestTransactionReadsOnlyWhatItNeeds(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := OpenPath(filepath.Join(dir, "ledger.json"))
	counting(l)
	if err := l.Update(func(b *Book) error {
		for i := range 300 {
			b.Entry(fmt.Sprintf("vm-%03d", i)).Phase = PhaseApplied
		}
		return b.Claim("vm-007", gpuA)
	}); err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		if i != 1 {
			if err := os.WriteFile(l.VMPath(fmt.Sprintf("vm-%03d", i)), []byte("{garbage"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	err := l.Update(func(b *Book) error {
		if h := b.Holder(gpuA); h != "vm-007" {
			return fmt.Errorf("holder of %s = %q, want vm-007", gpuA.ID, h)
		}
		if err := b.Claim("vm-001", gpuA); !errors.Is(err, host.ErrBusy) {
			return fmt.Errorf("claim of a held GPU: %v", err)
		}
		if err := b.Claim("vm-001", gpuB); err != nil {
			return err
		}
		b.Entry("vm-001").Record("define", "vm-001", nil)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.View(func(b *Book) error {
		if b.Len() != 300 || b.VM("vm-001") == nil || b.Holder(gpuB) != "vm-001" {
			return fmt.Errorf("view: %d VMs, holder of %s %q", b.Len(), gpuB.ID, b.Holder(gpuB))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	b, err := l.Read()
	if err == nil || !strings.Contains(err.Error(), l.VMPath("vm-000")) || b == nil || b.VM("vm-001") == nil || b.Len() != 1 {
		t.Fatalf("Read of a ledger with damaged VM files: %v, intact %v", err, b.Names())
	}
}

// TestDamagedFiles: each kind of damage to a VM file or the index stops the transactions that
// need it with an error naming the file and the fix, and leaves the file as it was; damage to
// one VM does not stop a transaction on another, and Read lists the intact VMs.
func TestDamagedFiles(t *testing.T) {
	t.Parallel()
	big := `{"name":"x","claims":[],"journal":[{"n":1,"action":"` + strings.Repeat("a", host.MaxStateFileSize) + `"}]}`
	for name, tc := range map[string]struct {
		file, content, want string
	}{
		"vm empty":        {"vms/x.json", "", "move the file aside"},
		"vm garbage":      {"vms/x.json", "\x00\x00", "move the file aside"},
		"vm truncated":    {"vms/x.json", `{"version":2,"name":"x","claims":[{"kind":"pci","id":"0000:41`, "move the file aside"},
		"vm null":         {"vms/x.json", "null", "null"},
		"vm other name":   {"vms/x.json", `{"version":2,"name":"y"}`, `not of "x"`},
		"vm too large":    {"vms/x.json", big, "larger than the limit"},
		"vm too new":      {"vms/x.json", `{"version":99,"name":"x"}`, "newer than this vgpu-host"},
		"index garbage":   {"claims.json", "{", "delete it"},
		"index empty":     {"claims.json", "", "delete it"},
		"index null":      {"claims.json", `{"version":2,"claims":null}`, "null"},
		"index bad key":   {"claims.json", `{"version":2,"claims":{"x":"a"}}`, "kind:id"},
		"index null vm":   {"claims.json", `{"version":2,"claims":{},"redo":{"x":null}}`, "null"},
		"index too new":   {"claims.json", `{"version":99,"claims":{}}`, "newer than this vgpu-host"},
		"index too large": {"claims.json", `{"version":2,"claims":{},"x":"` + strings.Repeat("a", host.MaxStateFileSize) + `"}`, "larger than the limit"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			l := OpenPath(filepath.Join(dir, "ledger.json"))
			counting(l)
			if err := l.Update(func(b *Book) error {
				b.Entry("good").Phase = PhaseApplied
				return errors.Join(b.Claim("x", gpuA), b.Claim("good", gpuB))
			}); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "ledger", tc.file)
			if err := os.WriteFile(path, []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
			check := func(what string, err error) {
				t.Helper()
				if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("%s: %v; want an error naming %s and saying %q", what, err, path, tc.want)
				}
			}
			b, err := l.Read()
			check("Read", err)
			called := false
			check("Update of x", l.Update(func(b *Book) error { called = true; b.Entry("x").Phase = PhaseApplied; return nil }))
			if strings.HasPrefix(tc.file, "vms/") {
				if b == nil || b.VM("good") == nil || b.Holder(gpuB) != "good" {
					t.Errorf("Read did not keep the intact VM: %v", b)
				}
				if err := l.Update(func(b *Book) error { b.Entry("good").Record("x", "y", nil); return b.Claim("other", gpuA) }); !errors.Is(err, host.ErrBusy) {
					t.Errorf("claim of the damaged VM's device: %v, want busy (the index still knows it)", err)
				}
				if err := l.Update(func(b *Book) error { b.Entry("good").Record("x", "y", nil); return nil }); err != nil {
					t.Errorf("a transaction on another VM: %v", err)
				}
			} else if called {
				t.Error("the transaction ran on a damaged index")
			}
			if got, _ := os.ReadFile(path); string(got) != tc.content {
				t.Errorf("the damaged file was rewritten")
			}
		})
	}
}

// TestIndexRebuilt: a missing claims.json (deleted by the operator after repairing a VM file)
// is rebuilt from the VM files: readers answer from the rebuilt one, the next transaction
// writes it.
func TestIndexRebuilt(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := OpenPath(filepath.Join(dir, "ledger.json"))
	if err := l.Update(func(b *Book) error { return errors.Join(b.Claim("a", gpuA), b.Claim("b", gpuB, mdev)) }); err != nil {
		t.Fatal(err)
	}
	want := files(t, dir)["ledger/claims.json"]
	if err := os.Remove(l.IndexPath()); err != nil {
		t.Fatal(err)
	}
	b, err := l.Read()
	if err != nil || b.Holder(gpuA) != "a" || b.Holder(mdev) != "b" {
		t.Fatalf("read without the index: %v %v", err, b.AllClaims())
	}
	if _, err := os.Stat(l.IndexPath()); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a reader wrote the index")
	}
	if err := l.Update(func(b *Book) error { return nil }); err != nil {
		t.Fatal(err)
	}
	var got, exp index
	_ = json.Unmarshal([]byte(files(t, dir)["ledger/claims.json"]), &got)
	_ = json.Unmarshal([]byte(want), &exp)
	if !maps.Equal(got.Claims, exp.Claims) {
		t.Fatalf("rebuilt index %v, want %v", got.Claims, exp.Claims)
	}
	// Two VM files claiming one device cannot be indexed: the error names both.
	e := b.VM("a")
	e.Claims = append(e.Claims, mdev)
	data, _ := json.Marshal(e)
	if err := os.WriteFile(l.VMPath("a"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	_ = os.Remove(l.IndexPath())
	if _, err := l.Read(); err == nil || !strings.Contains(err.Error(), l.VMPath("a")) || !strings.Contains(err.Error(), l.VMPath("b")) {
		t.Fatalf("rebuild with a device claimed twice: %v", err)
	}
}

// crashChild runs one transaction in a child process and exits with 137, as kill -9 would
// (no deferred cleanup), at the point LEDGER_TEST_CRASH_AT names.
func crashChild(op string) {
	at := os.Getenv("LEDGER_TEST_CRASH_AT")
	l := OpenPath(os.Getenv("LEDGER_TEST_PATH"))
	l.CrashAt = func(p string) {
		if p == at {
			os.Exit(137)
		}
	}
	var err error
	switch op {
	case "claim":
		err = l.Update(func(b *Book) error { b.Entry("c").Record("define", "c", nil); return b.Claim("c", mdev) })
	case "move": // two VMs in one transaction: a releases gpuA, b takes it
		err = l.Update(func(b *Book) error { b.Release("a", gpuA); return b.Claim("b", gpuA) })
	case "destroy":
		err = l.Update(func(b *Book) error { b.Delete("a"); return nil })
	case "migrate":
		err = l.Update(func(b *Book) error { return nil })
	}
	if at == "never" && err == nil {
		os.Exit(0)
	}
	fmt.Fprintln(os.Stderr, "the transaction ended without reaching", at, err)
	os.Exit(1)
}

// crashIn runs op in a child process that dies at point.
func crashIn(t *testing.T, path, op, point string) {
	t.Helper()
	c := exec.Command(os.Args[0], "-test.run=^$")
	c.Env = append(os.Environ(), "LEDGER_TEST_CRASH_OP="+op, "LEDGER_TEST_CRASH_AT="+point, "LEDGER_TEST_PATH="+path)
	out, err := c.CombinedOutput()
	if point == "never" {
		if err != nil {
			t.Fatalf("%s: %v\n%s", op, err, out)
		}
		return
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 137 {
		t.Fatalf("%s did not die at %s: %v\n%s", op, point, err, out)
	}
}

// state is what the ledger says: each VM's claim keys and journal length.
func state(t *testing.T, l *Ledger) map[string]string {
	t.Helper()
	b, err := l.Read()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	claims := 0
	for _, n := range b.Names() {
		e := b.VM(n)
		claims += len(e.Claims)
		var keys []string
		for _, c := range e.Claims {
			keys = append(keys, c.Key())
			if h := b.Holder(c); h != n {
				t.Fatalf("%s claims %s but the index says %q holds it", n, c.Key(), h)
			}
		}
		out[n] = fmt.Sprintf("%v journal %d", keys, len(e.Journal))
	}
	if got := len(b.AllClaims()); got != claims {
		t.Fatalf("the index has %d claims, the VMs %v", got, out)
	}
	return out
}

// TestCrashBetweenWrites: a transaction that writes the index and VM files, killed after its
// commit point (the index) and before its VM files, is complete for every reader, and the next
// transaction writes the VM files out. Killed before the commit point (while writing the
// index's temporary file, as the failing-write test shows) it never happened.
func TestCrashBetweenWrites(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ op, point string }{
		{"claim", "index-written"},
		{"move", "index-written"},
		{"move", "vm-written"},
		{"destroy", "index-written"},
	} {
		t.Run(tc.op+"-"+tc.point, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "ledger.json")
			l := OpenPath(path)
			if err := l.Update(func(b *Book) error {
				b.Entry("b").Phase = PhaseApplied
				return b.Claim("a", gpuA)
			}); err != nil {
				t.Fatal(err)
			}
			// What the transaction gives when it is not interrupted, in another ledger.
			ref := OpenPath(filepath.Join(t.TempDir(), "ledger.json"))
			for _, d := range []string{"ledger/claims.json", "ledger/vms/a.json", "ledger/vms/b.json"} {
				data, _ := os.ReadFile(filepath.Join(dir, d))
				if err := os.MkdirAll(filepath.Dir(filepath.Join(filepath.Dir(ref.legacy), d)), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(filepath.Dir(ref.legacy), d), data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			crashIn(t, ref.legacy, tc.op, "never")
			want := state(t, ref)

			crashIn(t, path, tc.op, tc.point)
			if _, err := os.Stat(l.VMPath("c")); tc.op == "claim" && !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the killed transaction wrote its VM file: %v", err)
			}
			if got := state(t, l); !maps.Equal(got, want) {
				t.Fatalf("after the crash the ledger reads\n%v\nwant\n%v", got, want)
			}
			// The next transaction that writes the index writes the VM files out first.
			if err := l.Update(func(b *Book) error { return b.Claim("d", Claim{Kind: KindPCI, ID: "0000:43:00.0"}) }); err != nil {
				t.Fatal(err)
			}
			want["d"] = "[pci:0000:43:00.0] journal 0"
			if got := state(t, l); !maps.Equal(got, want) {
				t.Fatalf("after the next transaction\n%v\nwant\n%v", got, want)
			}
			var idx index
			readJSON(t, l.IndexPath(), &idx)
			for name := range want {
				if name == "d" {
					continue
				}
				_, gen, exists, err := l.readVMFile(name)
				if err != nil || !exists || gen >= idx.Generation {
					t.Errorf("VM file %s: exists %v generation %d (index %d): %v", name, exists, gen, idx.Generation, err)
				}
			}
			if _, err := os.Stat(l.VMPath("a")); tc.op == "destroy" && !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the destroyed VM's file is still there: %v", err)
			}
			if tmp, _ := filepath.Glob(filepath.Join(dir, "ledger", ".*tmp*")); len(tmp) > 0 {
				t.Errorf("temporary files left: %v", tmp)
			}
		})
	}
}

// TestJournalStepAfterCrashWins: a VM whose newest state is a redo copy (its writer died) and
// that is then changed alone keeps the newer change: the redo copy never shadows it.
func TestJournalStepAfterCrashWins(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.json")
	l := OpenPath(path)
	if err := l.Update(func(b *Book) error { b.Entry("c").Phase = PhaseApplied; return nil }); err != nil {
		t.Fatal(err)
	}
	crashIn(t, path, "claim", "index-written")
	for i := range 3 {
		if err := l.Update(func(b *Book) error { b.VM("c").Record("step", fmt.Sprint(i), nil); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if got := state(t, l)["c"]; got != "[mdev:"+mdev.ID+"] journal 4" {
		t.Fatalf("c = %s", got)
	}
	if err := l.Update(func(b *Book) error { b.Delete("c"); return nil }); err != nil {
		t.Fatal(err)
	}
	if got := state(t, l); len(got) != 0 {
		t.Fatalf("after delete: %v", got)
	}
}

const oldDoc = `{
  "version": 1,
  "vms": {
    "a": {"name": "a", "spec_hash": "h1", "uri": "qemu:///system", "phase": "applied",
          "claims": [{"kind": "pci", "id": "0000:41:00.0", "detail": "gpu"}, {"kind": "mdev", "id": "83c32df7-d52e-4ec1-9668-1f3c7e4df107"}],
          "journal": [{"n": 1, "action": "define", "target": "a", "status": "done", "at": "2026-01-02T03:04:05Z"}],
          "updated_at": "2026-01-02T03:04:05Z"},
    "v": {"name": "v", "phase": "applied", "claims": [], "journal": [], "updated_at": "2026-01-02T03:04:05Z"}
  }
}
`

// TestMigrateOldLedger: a ledger.json from an older vgpu-host is read as it is (nothing
// written by a reader) and migrated by the first transaction, which keeps it as
// ledger.json.v1; a migration killed at any point is redone by the next transaction.
func TestMigrateOldLedger(t *testing.T) {
	t.Parallel()
	for _, point := range []string{"", "migrate-vms-written", "migrate-index-written"} {
		t.Run("crash-at-"+point, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "ledger.json")
			if err := os.WriteFile(path, []byte(oldDoc), 0o644); err != nil {
				t.Fatal(err)
			}
			l := OpenPath(path)
			want := map[string]string{"a": "[pci:0000:41:00.0 mdev:" + mdev.ID + "] journal 1", "v": "[] journal 0"}
			if got := state(t, l); !maps.Equal(got, want) {
				t.Fatalf("old ledger reads %v, want %v", got, want)
			}
			if _, err := os.Stat(filepath.Join(dir, "ledger")); !errors.Is(err, os.ErrNotExist) {
				t.Fatal("a reader migrated the ledger")
			}
			if point != "" {
				crashIn(t, path, "migrate", point)
				if got, _ := os.ReadFile(path); string(got) != oldDoc {
					t.Fatal("a killed migration changed ledger.json")
				}
				if got := state(t, l); !maps.Equal(got, want) {
					t.Fatalf("after a killed migration the ledger reads %v, want %v", got, want)
				}
			}
			if err := l.Update(func(b *Book) error { return b.Claim("n", gpuB) }); err != nil {
				t.Fatal(err)
			}
			want["n"] = "[pci:0000:42:00.0] journal 0"
			if got := state(t, l); !maps.Equal(got, want) {
				t.Fatalf("migrated ledger reads %v, want %v", got, want)
			}
			if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("ledger.json still there: %v", err)
			}
			if got, _ := os.ReadFile(path + ".v1"); string(got) != oldDoc {
				t.Fatalf("backup ledger.json.v1 = %q", got)
			}
			b, _ := l.Read()
			if e := b.VM("a"); e.SpecHash != "h1" || e.URI != "qemu:///system" || e.Claims[0].Detail != "gpu" || e.Journal[0].Status != StepDone {
				t.Fatalf("migrated entry lost fields: %+v", e)
			}
			if err := l.Update(func(b *Book) error { return b.Claim("x", gpuA) }); !errors.Is(err, host.ErrBusy) {
				t.Fatalf("claim of a migrated claim: %v", err)
			}
		})
	}
}

// TestMigrateRefusesDamage: an old ledger.json that cannot become VM files (a VM name that is
// no file name, a device claimed twice) stops the migration naming the file; nothing changes.
func TestMigrateRefusesDamage(t *testing.T) {
	t.Parallel()
	for name, doc := range map[string]string{
		"bad name": `{"version":1,"vms":{"../x":{"name":"../x","claims":[]}}}`,
		"twice":    `{"version":1,"vms":{"a":{"claims":[{"kind":"pci","id":"x"}]},"b":{"claims":[{"kind":"pci","id":"x"}]}}}`,
		"null":     `{"version":1,"vms":{"a":null}}`,
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "ledger.json")
			if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
				t.Fatal(err)
			}
			err := OpenPath(path).Update(func(b *Book) error { return nil })
			if err == nil || !strings.Contains(err.Error(), path) {
				t.Fatalf("migration of %s: %v", name, err)
			}
			if got := files(t, dir); len(got) != 1 || got["ledger.json"] != doc {
				t.Fatalf("files after a refused migration: %v", got)
			}
		})
	}
}

// TestStaleTempFilesInLedgerDir: a writer killed before its rename leaves ".NAME.json.tmp*" in
// ledger/ (every ledger file's temporary file is made there, never among the VM files); the
// next transaction removes it.
func TestStaleTempFilesInLedgerDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := OpenPath(filepath.Join(dir, "ledger.json"))
	if err := l.Update(func(b *Book) error { return b.Claim("a", gpuA) }); err != nil {
		t.Fatal(err)
	}
	if err := l.Update(func(b *Book) error { b.VM("a").Record("define", "a", nil); return nil }); err != nil {
		t.Fatal(err)
	}
	if tmp, _ := filepath.Glob(filepath.Join(dir, "ledger", "vms", ".*")); len(tmp) > 0 {
		t.Fatalf("temporary files among the VM files: %v", tmp)
	}
	stale := filepath.Join(dir, "ledger", ".a.json.tmp4711")
	if err := os.WriteFile(stale, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := l.Update(func(b *Book) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stale temporary file still there: %v", err)
	}
}
