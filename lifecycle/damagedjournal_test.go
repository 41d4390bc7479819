package lifecycle

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/ledger"
	"github.com/vgpu-host/vgpu-host/step"
)

// A journal entry damaged on disk stops destroy before it undoes that step, naming the step,
// the field, the VM's ledger file and the fix, as damaged state (ErrDamagedJournal, exit 1 in
// the CLI); it is never read as size 0, and nothing panics.
func TestDestroyRefusesDamagedJournal(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	vm := spec(t, "vgpuhost-test-damaged", anyNvidia)
	if _, err := e.lc().Apply(ctx, vm); err != nil {
		t.Fatal(err)
	}
	name := vm.Metadata.Name
	if err := e.ledger.Update(func(b *ledger.Book) error {
		for i, s := range b.VM(name).Journal {
			if s.Action == string(step.ActCreateOverlay) {
				b.VM(name).Journal[i].Params["size"] = "lots"
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	_, err := e.lc().Destroy(ctx, name)
	if err == nil || !errors.Is(err, ErrDamagedJournal) || !errors.Is(err, host.ErrInvalid) {
		t.Fatalf("destroy with a damaged journal: %v", err)
	}
	for _, want := range []string{"journal step create-overlay", `size "lots"`, e.ledger.VMPath(name), "repair"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	b, rerr := e.ledger.Read()
	if rerr != nil || b.VM(name) == nil {
		t.Fatalf("the VM left the ledger although its overlay was never undone: %v", rerr)
	}
}
