package ledger

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
)

func TestClaimIsExclusive(t *testing.T) {
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
	if b.VMs["b"] != nil {
		t.Fatalf("a refused claim still created an entry: %+v", b.VMs["b"])
	}
	if err := l.Update(func(b *Book) error { return b.Claim("a", gpu) }); err != nil {
		t.Fatalf("re-claim by the holder: %v", err)
	}
	b, _ = l.Read()
	if n := len(b.VMs["a"].Claims); n != 1 {
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
	for n, vm := range b.VMs {
		for _, c := range vm.Claims {
			if other, dup := seen[c.Key()]; dup {
				t.Fatalf("%s held by %s and %s", c.Key(), other, n)
			}
			seen[c.Key()] = n
		}
	}
	if len(b.VMs) != 4 || len(seen) != 4 {
		t.Fatalf("%d VMs hold %d devices, want 4 and 4: %v", len(b.VMs), len(seen), seen)
	}
}

func TestRaceGoroutines(t *testing.T) {
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
