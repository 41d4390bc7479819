package lifecycle

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/ledger"
	"github.com/vgpu-host/vgpu-host/vfio"
	"github.com/vgpu-host/vgpu-host/virt"
)

// TestPreboundGroupsStayBound: a GPU already on vfio-pci before apply (vfio-pci.ids=, another
// tool) is used as is and stays on vfio-pci after destroy; only what apply moved goes back.
// Before the fix, destroy refused ("vgpu-host did not bind it") and the VM could not be
// destroyed at all.
func TestPreboundGroupsStayBound(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name       string
		audioBound bool // the audio function is on vfio-pci too (the whole group pre-bound)
	}{{"whole group", true}, {"GPU only", false}} {
		t.Run(c.name, func(t *testing.T) {
			tree := hosttest.New(t)
			gpu, audio := tree.ConsumerGPU("0000:00:01.0", "0000:01:00.0", "vfio-pci")
			if c.audioBound {
				tree.Unbind(audio)
				tree.Bind(audio, "vfio-pci")
			}
			tree.WriteFile(filepath.Join("dev/vfio", strconv.Itoa(tree.Group(gpu))), "")
			k := hosttest.NewKernel(tree)
			conn := virt.NewFake("qemu")
			lc := New(Options{Root: tree.Root, Conn: conn, Host: NewSysfsPrep(tree.Root, k, k), Ledger: ledger.Open(tree.Root)})
			ctx := context.Background()
			vm := spec(t, "vgpuhost-test-prebound", anyNvidia)
			if _, err := lc.Apply(ctx, vm); err != nil {
				t.Fatal(err)
			}
			if c.audioBound && len(k.Writes()) != 0 {
				t.Fatalf("binding a group already on vfio-pci wrote to sysfs: %v", k.Writes())
			}
			for _, a := range []host.Address{gpu, audio} {
				if d := tree.Driver(a); d != "vfio-pci" {
					t.Fatalf("%s on %q after apply", a, d)
				}
			}
			applyWrites := len(k.Writes())
			if _, err := lc.Destroy(ctx, vm.Metadata.Name); err != nil {
				t.Fatalf("destroy: %v", err)
			}
			if d := tree.Driver(gpu); d != "vfio-pci" {
				t.Errorf("GPU on %q after destroy, want vfio-pci as before apply", d)
			}
			want := "snd_hda_intel"
			if c.audioBound {
				want = "vfio-pci"
			}
			if d := tree.Driver(audio); d != want {
				t.Errorf("audio on %q after destroy, want %s as before apply", d, want)
			}
			for _, w := range k.Writes()[applyWrites:] {
				if strings.Contains(w.Path, gpu.String()) || strings.Contains(w.Value, gpu.String()) {
					t.Errorf("destroy wrote for the GPU it did not bind: %s", w)
				}
			}
			if c.audioBound && len(k.Writes()) != 0 {
				t.Errorf("destroy wrote to sysfs: %v", k.Writes())
			}
			if len(conn.Domains()) != 0 {
				t.Errorf("domains left: %v", conn.Domains())
			}
		})
	}
}

// TestGroupBoundByBindStaysBound: a group the user bound with `vgpu-host bind` (its ledger
// entries own no VM) is used by apply as is, and destroy leaves it on vfio-pci with its
// entries, for `vgpu-host unbind` to give back. Before the fix, destroy restored the user's
// binding as if apply had made it.
func TestGroupBoundByBindStaysBound(t *testing.T) {
	t.Parallel()
	tree := hosttest.New(t)
	gpu, audio := tree.ConsumerGPU("0000:00:01.0", "0000:01:00.0", "nouveau")
	k := hosttest.NewKernel(tree)
	ctx := context.Background()
	b := &vfio.Binder{Root: tree.Root, W: k, Modules: k}
	if _, err := b.Bind(ctx, []host.Address{gpu}, vfio.BindOptions{}); err != nil {
		t.Fatalf("bind: %v", err)
	}
	conn := virt.NewFake("qemu")
	lc := New(Options{Root: tree.Root, Conn: conn, Host: NewSysfsPrep(tree.Root, k, k), Ledger: ledger.Open(tree.Root)})
	vm := spec(t, "vgpuhost-test-boundbybind", anyNvidia)
	if _, err := lc.Apply(ctx, vm); err != nil {
		t.Fatal(err)
	}
	if _, err := lc.Destroy(ctx, vm.Metadata.Name); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	l, err := b.Ledger()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []host.Address{gpu, audio} {
		if d := tree.Driver(a); d != "vfio-pci" {
			t.Errorf("%s on %q after destroy, want vfio-pci as the user's bind left it", a, d)
		}
		if e, ok := l.Lookup(a); !ok || e.Owner != "" {
			t.Errorf("%s: ledger entry %+v (found %v) after destroy, want the user's (no owner)", a, e, ok)
		}
	}
}
