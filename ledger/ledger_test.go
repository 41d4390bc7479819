package ledger

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
)

func TestClaimIsExclusive(t *testing.T) {
	t.Parallel()
	l := OpenPath(filepath.Join(t.TempDir(), "ledger.json"))
	gpu := Claim{Kind: KindPCI, ID: "0000:41:00.0"}
	if err := l.Update(func(b *Book) error { return b.Claim("a", gpu) }); err != nil {
		t.Fatal(err)
	}
	err := l.Update(func(b *Book) error { return b.Claim("b", Claim{Kind: KindPCI, ID: "0000:42:00.0"}, gpu) })
	if !errors.Is(err, host.ErrBusy) {
		t.Fatalf("second claim: %v, want ErrBusy", err)
	}
	b, err := l.Read()
	if err != nil {
		t.Fatal(err)
	}
	if b.VM("b") != nil {
		t.Fatalf("a refused claim still created an entry: %+v", b.VM("b"))
	}
	if err := l.Update(func(b *Book) error { return b.Claim("a", gpu) }); err != nil {
		t.Fatalf("re-claim by the holder: %v", err)
	}
	b, _ = l.Read()
	if n := len(b.VM("a").Claims); n != 1 {
		t.Fatalf("holder has %d claims after re-claim, want 1", n)
	}
	if err := l.Update(func(b *Book) error { b.Release("a"); return nil }); err != nil {
		t.Fatal(err)
	}
	if err := l.Update(func(b *Book) error { return b.Claim("b", gpu) }); err != nil {
		t.Fatalf("claim after release: %v", err)
	}
}

func TestJournal(t *testing.T) {
	t.Parallel()
	var e VM
	n1 := e.Record("bind-group", "0000:41:00.0", nil)
	n2 := e.Record("define", "vm", nil)
	e.Mark(n1, StepDone)
	e.Mark(n2, StepUndone)
	live := e.Live()
	if len(live) != 1 || live[0].N != n1 || live[0].Status != StepDone {
		t.Fatalf("Live = %+v", live)
	}
}

func TestFailedUpdateWritesNothing(t *testing.T) {
	t.Parallel()
	l := OpenPath(filepath.Join(t.TempDir(), "ledger.json"))
	boom := errors.New("boom")
	if err := l.Update(func(b *Book) error { b.Entry("x"); return boom }); !errors.Is(err, boom) {
		t.Fatal(err)
	}
	if _, err := os.Stat(l.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("ledger written despite the error: %v", err)
	}
}

// raceClaim is what each contender does: claim the first free device of four.
func raceClaim(l *Ledger, vm string) error {
	return l.Update(func(b *Book) error {
		for i := 0; i < 4; i++ {
			c := Claim{Kind: KindPCI, ID: fmt.Sprintf("0000:4%d:00.0", i)}
			if b.Holder(c) == "" {
				return b.Claim(vm, c)
			}
		}
		return fmt.Errorf("no device free for %s: %w", vm, host.ErrBusy)
	})
}

// TestMain lets the test binary act as a contender process (see TestRaceProcesses).
func TestMain(m *testing.M) {
	if op := os.Getenv("LEDGER_TEST_CRASH_OP"); op != "" {
		crashChild(op) // see crashIn
	}
	if p := os.Getenv("LEDGER_TEST_CONTENDER"); p != "" {
		if err := raceClaim(OpenPath(p), "vm-"+os.Getenv("LEDGER_TEST_NAME")); err != nil {
			if errors.Is(err, host.ErrBusy) {
				os.Exit(5)
			}
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func checkFour(t *testing.T, l *Ledger) {
	t.Helper()
	b, err := l.Read()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, n := range b.Names() {
		for _, c := range b.VM(n).Claims {
			if other, dup := seen[c.Key()]; dup {
				t.Fatalf("%s held by %s and %s", c.Key(), other, n)
			}
			seen[c.Key()] = n
		}
	}
	if b.Len() != 4 || len(seen) != 4 {
		t.Fatalf("%d VMs hold %d devices, want 4 and 4: %v", b.Len(), len(seen), seen)
	}
}

func TestRaceGoroutines(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "ledger.json")
	var wg sync.WaitGroup
	errs := make([]error, 16)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = raceClaim(OpenPath(path), "vm-"+strconv.Itoa(i)) // separate opens: separate flocks
		}()
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, host.ErrBusy):
			t.Fatalf("loser failed without ErrBusy: %v", err)
		}
	}
	if won != 4 {
		t.Fatalf("%d winners, want 4", won)
	}
	checkFour(t, OpenPath(path))
}

func TestRaceProcesses(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "ledger.json")
	cmds := make([]*exec.Cmd, 16)
	for i := range cmds {
		c := exec.Command(os.Args[0], "-test.run=^$")
		c.Env = append(os.Environ(), "LEDGER_TEST_CONTENDER="+path, "LEDGER_TEST_NAME="+strconv.Itoa(i))
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[i] = c
	}
	won, busy := 0, 0
	for _, c := range cmds {
		err := c.Wait()
		var ee *exec.ExitError
		switch {
		case err == nil:
			won++
		case errors.As(err, &ee) && ee.ExitCode() == 5:
			busy++
		default:
			t.Fatalf("contender: %v", err)
		}
	}
	if won != 4 || busy != 12 {
		t.Fatalf("won %d busy %d, want 4 and 12", won, busy)
	}
	checkFour(t, OpenPath(path))
}

// TestDamagedLedgerIsNeverReplaced: a truncated or garbled ledger.json stops every reader and
// writer with an error naming the file and the fix; nothing starts from an empty ledger (which
// would give the devices other VMs hold to the next claim) and the file is left as it was.
func TestDamagedLedgerIsNeverReplaced(t *testing.T) {
	t.Parallel()
	for name, content := range map[string]string{"empty": "", "truncated": `{"version": 1, "vms": {"a": {"name": "a", "claims": [{"kind": "pci", "id": "0000:41`, "garbage": "\x00\x00\x00"} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ledger.json")
			if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			l := OpenPath(path)
			if _, err := l.Read(); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "move the file aside") {
				t.Fatalf("Read of a %s ledger: %v", name, err)
			}
			called := false
			err := l.Update(func(b *Book) error { called = true; return b.Claim("b", Claim{Kind: KindPCI, ID: "0000:41:00.0"}) })
			if err == nil || called {
				t.Fatalf("Update of a %s ledger ran the transaction (called=%v): %v", name, called, err)
			}
			if got, _ := os.ReadFile(path); string(got) != content {
				t.Fatalf("the damaged ledger was rewritten: %q", got)
			}
		})
	}
}

// TestFailedWriteLosesNothing: a write that fails (a full disk) returns the error with the
// path, and the previous ledger is still there, complete.
func TestFailedWriteLosesNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := OpenPath(filepath.Join(dir, "ledger.json"))
	gpu := Claim{Kind: KindPCI, ID: "0000:41:00.0"}
	if err := l.Update(func(b *Book) error { return b.Claim("a", gpu) }); err != nil {
		t.Fatal(err)
	}
	before := files(t, dir)
	l.WriteFile = func(p string, data []byte, perm os.FileMode) error {
		return fmt.Errorf("write %s: %w", p, syscall.ENOSPC)
	}
	for name, tx := range map[string]func(b *Book) error{
		"claim":   func(b *Book) error { return b.Claim("b", Claim{Kind: KindPCI, ID: "0000:42:00.0"}) },
		"journal": func(b *Book) error { b.VM("a").Record("define", "a", nil); return nil },
	} {
		err := l.Update(tx)
		if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), l.Path()) || !strings.Contains(err.Error(), "intact") {
			t.Fatalf("%s with a full disk: %v", name, err)
		}
		if after := files(t, dir); !maps.Equal(after, before) {
			t.Fatalf("%s: ledger changed by a failed write:\n%v\n%v", name, before, after)
		}
	}
	l.WriteFile = nil
	b, err := l.Read()
	if err != nil || b.Holder(gpu) != "a" || b.VM("b") != nil || len(b.VM("a").Journal) != 0 {
		t.Fatalf("after a failed write: %v %+v", err, b)
	}
}

// files returns every file under dir (but the lock) with its content.
func files(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(p, ".lock") {
			return err
		}
		b, err := os.ReadFile(p)
		out[strings.TrimPrefix(p, dir+"/")] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestLockVM(t *testing.T) {
	t.Parallel()
	l := OpenPath(filepath.Join(t.TempDir(), "ledger.json"))
	unlock, err := l.LockVM("vm1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.LockVM("vm1"); !errors.Is(err, host.ErrBusy) || !strings.Contains(err.Error(), "vm1.lock") {
		t.Fatalf("second lock of vm1: %v, want ErrBusy naming the lock file", err)
	}
	u2, err := l.LockVM("vm2")
	if err != nil {
		t.Fatalf("lock of another VM: %v", err)
	}
	u2()
	unlock()
	u3, err := l.LockVM("vm1")
	if err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	u3()
	if _, err := l.LockVM("../x"); !errors.Is(err, host.ErrInvalid) {
		t.Fatalf("lock of ../x: %v", err)
	}
}

// TestStaleTempFilesRemoved: a writer killed between writing its temporary file and the rename
// leaves .ledger.json.tmpNNN; the next transaction removes it.
func TestStaleTempFilesRemoved(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := OpenPath(filepath.Join(dir, "ledger.json"))
	stale := filepath.Join(dir, ".ledger.json.tmp123")
	if err := os.WriteFile(stale, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := l.Update(func(b *Book) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("stale temporary ledger file still there: %v", err)
	}
}

// TestReadCreatesNothing: read-only commands (plan, status) read the ledger without creating
// it, its lock or its directory.
func TestReadCreatesNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := OpenPath(filepath.Join(dir, "state", "ledger.json"))
	b, err := l.Read()
	if err != nil || b.Len() != 0 {
		t.Fatalf("read of no ledger: %+v %v", b, err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("a read created %v", ents)
	}
	if err := l.Update(func(b *Book) error { return b.Claim("vm", Claim{Kind: KindPCI, ID: "0000:01:00.0"}) }); err != nil {
		t.Fatal(err)
	}
	if b, err := l.Read(); err != nil || b.Holder(Claim{Kind: KindPCI, ID: "0000:01:00.0"}) != "vm" {
		t.Fatalf("read after a write: %v", err)
	}
}

// TestReadRemovesStaleTemps: a destroy of a VM that a killed apply never recorded only reads
// the ledger; it must still clear the dead writer's temporary file (found by the kill -9 test
// on the real libvirtd). A read with no lock file (no writer ever ran) removes nothing.
func TestReadRemovesStaleTemps(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := OpenPath(filepath.Join(dir, "ledger.json"))
	stale := filepath.Join(dir, ".ledger.json.tmp123")
	if err := os.WriteFile(stale, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Read(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); err != nil {
		t.Fatalf("without a lock file (no lock held) the read removed %s: %v", stale, err)
	}
	if err := l.Update(func(b *Book) error { return nil }); err != nil { // creates the lock file
		t.Fatal(err)
	}
	if err := os.WriteFile(stale, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Read(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("stale temporary ledger file still there after a read: %v", err)
	}
}

// TestLockVMFileRemovedWhenVMGone: vms/NAME.lock stayed for every VM name ever tried. The
// lock file is now removed on unlock when the ledger has no entry for the VM, and kept while
// it has one.
func TestLockVMFileRemovedWhenVMGone(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := OpenPath(filepath.Join(dir, "ledger.json"))
	lockFile := func(vm string) string { return filepath.Join(dir, "vms", vm+".lock") }
	cycle := func(vm string) {
		t.Helper()
		unlock, err := l.LockVM(vm)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(lockFile(vm)); err != nil {
			t.Fatalf("no lock file while %s is locked: %v", vm, err)
		}
		unlock()
	}
	cycle("never-applied")
	if _, err := os.Stat(lockFile("never-applied")); !os.IsNotExist(err) {
		t.Errorf("the lock file of a VM the ledger does not know stayed: %v", err)
	}
	if err := l.Update(func(b *Book) error { b.Entry("kept"); return nil }); err != nil {
		t.Fatal(err)
	}
	cycle("kept")
	if _, err := os.Stat(lockFile("kept")); err != nil {
		t.Errorf("the lock file of a VM in the ledger was removed: %v", err)
	}
	if err := l.Update(func(b *Book) error { b.Delete("kept"); return nil }); err != nil {
		t.Fatal(err)
	}
	cycle("kept")
	if _, err := os.Stat(lockFile("kept")); !os.IsNotExist(err) {
		t.Errorf("the lock file of a destroyed VM stayed: %v", err)
	}
}

// TestLedgerStateFilesNotFollowed: under a fake host root, a ledger file or lock file that is
// a symlink to a file outside the root was read (or truncated to the pid), and a FIFO in its
// place hung the transaction. Each is now an error naming the path, at once.
func TestLedgerStateFilesNotFollowed(t *testing.T) {
	t.Parallel()
	for _, file := range []string{"ledger.lock", "ledger.json", "ledger/claims.json", "ledger/vms/vm1.json", "vms/vm1.lock"} {
		for _, kind := range []string{"symlink", "fifo"} {
			t.Run(file+"/"+kind, func(t *testing.T) {
				outside := filepath.Join(t.TempDir(), "shadow")
				if err := os.WriteFile(outside, []byte(`{"version":2,"claims":{}}`), 0o600); err != nil {
					t.Fatal(err)
				}
				root, err := host.NewRoot(t.TempDir())
				if err != nil {
					t.Fatal(err)
				}
				l := Open(root)
				if err := l.Update(func(b *Book) error { b.Entry("vm1"); return nil }); err != nil {
					t.Fatal(err)
				}
				p := root.StateDir(file)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				_ = os.Remove(p)
				if kind == "symlink" {
					err = os.Symlink(outside, p)
				} else {
					err = syscall.Mkfifo(p, 0o644)
				}
				if err != nil {
					t.Fatal(err)
				}
				done := make(chan error, 1)
				go func() {
					if file == "vms/vm1.lock" {
						unlock, err := l.LockVM("vm1")
						if err == nil {
							unlock()
						}
						done <- err
						return
					}
					_, err := l.Read()
					done <- errors.Join(err, l.Update(func(b *Book) error { b.VM("vm1"); return nil }))
				}()
				select {
				case err = <-done:
				case <-time.After(5 * time.Second):
					t.Fatalf("hangs on a %s at %s", kind, p)
				}
				if !errors.Is(err, host.ErrNotRegular) || !strings.Contains(err.Error(), p) {
					t.Errorf("a %s at %s: %v", kind, p, err)
				}
				if b, _ := os.ReadFile(outside); string(b) != `{"version":2,"claims":{}}` {
					t.Errorf("the file outside the root was written: %q", b)
				}
			})
		}
	}
}

// ClaimHolders names the VMs holding a claim, from the claims index, in a View as in an
// Update: not a VM without claims, not one whose claims were released.
func TestClaimHolders(t *testing.T) {
	t.Parallel()
	l := OpenPath(filepath.Join(t.TempDir(), "ledger.json"))
	if err := l.Update(func(b *Book) error {
		b.Entry("plain")
		if err := b.Claim("gpu", Claim{Kind: KindPCI, ID: "0000:41:00.0"}, Claim{Kind: KindPCI, ID: "0000:41:00.1"}); err != nil {
			return err
		}
		return b.Claim("gone", Claim{Kind: KindMdev, ID: "83c32df7-d52e-4ec1-9668-1f3c7e4df107"})
	}); err != nil {
		t.Fatal(err)
	}
	if err := l.Update(func(b *Book) error { b.Release("gone"); return nil }); err != nil {
		t.Fatal(err)
	}
	var got map[string]bool
	if err := l.View(func(b *Book) error { got = b.ClaimHolders(); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !got["gpu"] {
		t.Fatalf("ClaimHolders = %v, want only gpu", got)
	}
}
