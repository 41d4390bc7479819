package host_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
)

// An A100 mdev parent whose types are alternatives: Capacity is the largest type's
// available_instances, and check says so instead of the sum (10+4+2 = 16).
func TestMdevCapacityIsOneTypesMaximum(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	a100 := tr.DatacenterGPU("0000:40:01.0", "0000:41:00.0", "nvidia", 0)
	tr.A100Mdev(a100)
	ps, err := host.MdevParents(tr.Root)
	if err != nil || len(ps) != 1 {
		t.Fatalf("parents %+v, %v", ps, err)
	}
	if got := ps[0].Capacity(); got != 10 {
		t.Errorf("Capacity = %d, want 10 (A100-4C alone; the types are alternatives)", got)
	}
	_, _, g := checks(t, tr.Root)
	if d := g[a100].Detail; !strings.Contains(d, "up to 10 instances") || strings.Contains(d, "16") {
		t.Errorf("check detail = %q, want the one-type maximum 10, not the sum 16", d)
	}
	// A running type zeroes the others (one type per GPU): the capacity is what that type has left.
	for _, id := range []string{"nvidia-471", "nvidia-475"} {
		if err := os.WriteFile(filepath.Join(tr.DevDir(a100), "mdev_supported_types", id, "available_instances"), []byte("0\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ps, _ = host.MdevParents(tr.Root)
	if got := ps[0].Capacity(); got != 4 {
		t.Errorf("Capacity with only A100-10C left = %d, want 4", got)
	}
	if (host.MdevParent{}).Capacity() != 0 {
		t.Error("a parent without types has capacity 0")
	}
}

// On the real-kernel snapshots, every parent's Capacity is one of its types' counts and at
// least as large as each.
func TestMdevCapacitySnapshot(t *testing.T) {
	t.Parallel()
	p := hosttest.RepoFile(t, "host/testdata/lab-snapshot.tar.gz")
	if p == "" {
		t.Fatal("host/testdata/lab-snapshot.tar.gz is missing: make lab-snapshot captures it")
	}
	ps, err := host.MdevParents(hosttest.Snapshot(t, p))
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) == 0 {
		t.Fatal("lab snapshot has no mdev parent (mbochs, mdpy expected)")
	}
	for _, mp := range ps {
		c, found := mp.Capacity(), false
		for _, ty := range mp.Types {
			if ty.AvailableInstances > c {
				t.Errorf("%s: type %s has %d > capacity %d", mp.Parent, ty.ID, ty.AvailableInstances, c)
			}
			found = found || ty.AvailableInstances == c
		}
		if !found && len(mp.Types) > 0 {
			t.Errorf("%s: capacity %d is none of its types' counts", mp.Parent, c)
		}
	}
}
