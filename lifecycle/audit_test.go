package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/ledger"
	"github.com/vgpu-host/vgpu-host/virt"
)

// TestVolumesApplyDidNotCreateSurvive: an overlay or seed volume of the VM's name that is in
// the pool before apply (a disk kept after the domain was undefined by hand, a lost ledger) is
// refused with ErrBusy before any step is journalled, and never replaced or deleted: a failed
// apply undoes only what it created.
func TestVolumesApplyDidNotCreateSurvive(t *testing.T) {
	t.Parallel()
	for _, vol := range []string{"vgpuhost-test-k-root.qcow2", "vgpuhost-test-k-cidata.iso"} {
		t.Run(vol, func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			pool := PoolName(e.root)
			if err := e.conn.EnsureDirPool(ctx, pool, e.root.StateDir("images")); err != nil {
				t.Fatal(err)
			}
			if err := e.conn.UploadVolume(ctx, pool, vol, []byte("the user's data")); err != nil {
				t.Fatal(err)
			}
			_, err := e.lc().Apply(ctx, spec(t, "vgpuhost-test-k", anyNvidia))
			if !errors.Is(err, host.ErrBusy) || !strings.Contains(err.Error(), vol) {
				t.Fatalf("apply over an existing %s: %v, want ErrBusy naming it", vol, err)
			}
			if !slices.Contains(e.conn.Volumes(pool), vol) {
				t.Fatalf("%s was deleted by the failed apply: %v", vol, e.conn.Volumes(pool))
			}
			if v := e.conn.Volume(pool, vol); v == nil || string(v.Data) != "the user's data" {
				t.Fatalf("%s was replaced: %+v", vol, v)
			}
			b, _ := e.ledger.Read()
			if b.VM("vgpuhost-test-k") != nil || !e.host.clean() {
				t.Fatalf("failed apply left ledger %+v, host bound %v", b.Names(), e.host.bound)
			}
		})
	}
}

// blockingWriter stops the first apply in the middle of its steps so a second process-like
// Lifecycle can try the same VM.
type blockingWriter struct {
	at      string
	reached chan struct{}
	release chan struct{}
}

func (w *blockingWriter) Write(p []byte) (int, error) {
	if strings.Contains(string(p), w.at) && w.reached != nil {
		close(w.reached)
		w.reached = nil
		<-w.release
	}
	return len(p), nil
}

// TestConcurrentApplyOfOneVM: while one apply of a VM is between steps, a second apply or a
// destroy of the same VM is refused with ErrBusy; it does not mistake the running apply for
// an interrupted one and tear its steps down.
func TestConcurrentApplyOfOneVM(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	vm := spec(t, "vgpuhost-test-cc", anyNvidia)
	w := &blockingWriter{at: "define domain", reached: make(chan struct{}), release: make(chan struct{})}
	reached := w.reached
	done := make(chan error)
	go func() {
		// Its own ledger handle, as another process would have.
		_, err := e.lc(func(o *Options) { o.Progress = w; o.Ledger = ledger.Open(e.root) }).Apply(ctx, vm)
		done <- err
	}()
	<-reached
	if _, err := e.lc().Apply(ctx, vm); !errors.Is(err, host.ErrBusy) || !strings.Contains(err.Error(), "another vgpu-host process") {
		t.Errorf("second apply during the first: %v, want ErrBusy", err)
	}
	if _, err := e.lc().Destroy(ctx, vm.Metadata.Name); !errors.Is(err, host.ErrBusy) {
		t.Errorf("destroy during apply: %v, want ErrBusy", err)
	}
	close(w.release)
	if err := <-done; err != nil {
		t.Fatalf("the first apply failed: %v", err)
	}
	if st, err := e.conn.State(ctx, vm.Metadata.Name); err != nil || st != virt.StateRunning {
		t.Fatalf("after the first apply: %v %v", st, err)
	}
	if n := len(e.conn.Volumes(PoolName(e.root))); n != 2 {
		t.Fatalf("%d volumes, want 2 (overlay and seed)", n)
	}
	if _, err := e.lc().Destroy(ctx, vm.Metadata.Name); err != nil {
		t.Fatal(err)
	}
	e.assertGone(t, vm.Metadata.Name)
}

// TestLedgerWriteFailsMidApply: the disk fills up after k ledger writes of an apply. Apply
// fails with the write error, and whatever it managed to journal converges: once the disk
// has room, destroy (or apply) leaves nothing.
func TestLedgerWriteFailsMidApply(t *testing.T) {
	t.Parallel()
	for k := 1; k <= 7; k++ {
		t.Run(fmt.Sprint("after", k), func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			vm := spec(t, "vgpuhost-test-full", anyNvidia)
			writes := 0
			e.ledger.WriteFile = func(p string, data []byte, perm os.FileMode) error {
				if writes++; writes > k {
					return fmt.Errorf("write %s: %w", p, syscall.ENOSPC)
				}
				return host.WriteFileAtomic(p, data, perm)
			}
			_, err := e.lc().Apply(ctx, vm)
			if err == nil {
				t.Skipf("apply needs at most %d writes", k)
			}
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("apply on a full disk: %v, want ENOSPC", err)
			}
			e.ledger.WriteFile = nil
			b, err := e.ledger.Read()
			if err != nil {
				t.Fatalf("ledger unreadable after a failed write: %v", err)
			}
			if b.VM(vm.Metadata.Name) != nil {
				if _, err := e.lc().Destroy(ctx, vm.Metadata.Name); err != nil {
					t.Fatal(err)
				}
			}
			e.assertGone(t, vm.Metadata.Name)
		})
	}
}
