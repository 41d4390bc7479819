package clitree

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/mdev"
)

// Concurrent writers of the state files: each test starts many CLI runs at once (goroutines
// with their own command tree; flock(2) locks one open file, so they contend exactly as
// processes do) and checks that no update is lost and no instance made twice.

// parallel runs f(0..n-1) at once and returns the errors.
func parallel(n int, f func(i int) error) []error {
	errs := make([]error, n)
	var start, done sync.WaitGroup
	start.Add(1)
	for i := 0; i < n; i++ {
		done.Add(1)
		go func() {
			defer done.Done()
			start.Wait()
			errs[i] = f(i)
		}()
	}
	start.Done()
	done.Wait()
	return errs
}

// TestRaceVFEnablePersist: parallel `vf enable --persist` on different PFs lost records in
// /etc/vgpu-host/sriov.json (12 of 30 runs lost one): each read the file, added its PF and
// wrote it back over the others'. Now the edit holds the one lock.
func TestRaceVFEnablePersist(t *testing.T) {
	t.Parallel()
	const pfs = 12
	for round := 0; round < 3; round++ {
		tr := hosttest.New(t)
		var addrs []string
		for i := 0; i < pfs; i++ {
			a := fmt.Sprintf("0000:%02x:00.0", 0x10+i*2)
			tr.SRIOVPF(hosttest.PCI{Addr: a, Vendor: 0x1b36, Device: 0x0010, Class: 0x010802, Driver: "nvme"},
				hosttest.VFSpec{Total: 2, VFDevice: 0x0010, VFDriver: "nvme"}, 0)
			addrs = append(addrs, a)
		}
		withKernel(t, tr)
		for i, err := range parallel(pfs, func(i int) error {
			_, err := runErr(t, "--host-root", tr.Dir(), "vf", "enable", addrs[i], "--count", "1", "--persist")
			return err
		}) {
			if err != nil {
				t.Fatalf("vf enable %s: %v", addrs[i], err)
			}
		}
		b, err := os.ReadFile(tr.Root.Etc("vgpu-host", "sriov.json"))
		if err != nil {
			t.Fatal(err)
		}
		var f struct {
			PFs []mdev.PersistedPF `json:"pfs"`
		}
		if err := json.Unmarshal(b, &f); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, p := range f.PFs {
			got = append(got, p.Address)
		}
		sort.Strings(got)
		if strings.Join(got, ",") != strings.Join(addrs, ",") {
			t.Fatalf("round %d: sriov.json records %d of %d PFs: %v", round, len(got), pfs, got)
		}
	}
}

// TestRaceMdevDefine: parallel `mdev define` of different instances, and of the same instance
// under two parents, leave exactly one definition per UUID and lose none.
func TestRaceMdevDefine(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	tr.Mbochs()
	withKernel(t, tr)
	const n = 8
	var ids []string
	for i := 0; i < n; i++ {
		ids = append(ids, mdev.InstanceUUID("racer", i))
	}
	// Each UUID is defined twice at once, once under mbochs and once under a parent that is
	// not present now: the last writer wins, but no UUID may end up defined twice.
	errs := parallel(2*n, func(i int) error {
		parent := "mbochs"
		if i%2 == 1 {
			parent = "0000:99:00.0"
		}
		_, err := runErr(t, "--host-root", tr.Dir(), "mdev", "define", "--parent", parent, "--type", "mbochs-small", ids[i/2])
		return err
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("define %s: %v", ids[i/2], err)
		}
	}
	count := map[string]int{}
	files, _ := filepath.Glob(tr.Root.Etc("mdevctl.d", "*", "*"))
	for _, f := range files {
		count[filepath.Base(f)]++
	}
	for _, id := range ids {
		if count[id] != 1 {
			t.Errorf("%s has %d definitions: %v", id, count[id], files)
		}
	}
}

// TestRaceMdevCreateCount: parallel `mdev create --count` for different VMs, and twice for the
// same VM, give every VM its instances exactly once: no duplicate, no lost state record, and
// the parent's capacity is not overrun.
func TestRaceMdevCreateCount(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	tr.Mbochs() // mbochs-small: 8 instances
	withKernel(t, tr)
	vms := []string{"vm0", "vm1", "vm2", "vm0", "vm1", "vm2", "vm3", "vm3"}
	errs := parallel(len(vms), func(i int) error {
		_, err := runErr(t, "--host-root", tr.Dir(), "mdev", "create", "--parent", "mbochs", "--type", "small", "--count", "2", "--name", vms[i])
		return err
	})
	for i, err := range errs {
		if err != nil {
			t.Errorf("create for %s: %v", vms[i], err)
		}
	}
	active, _ := filepath.Glob(tr.Root.Sys("bus", "mdev", "devices", "*"))
	if len(active) != 8 {
		t.Errorf("%d instances in the kernel, want 8 (4 VMs x 2): %v", len(active), active)
	}
	out, err := runErr(t, "--host-root", tr.Dir(), "-o", "json", "mdev", "list")
	if err != nil {
		t.Fatal(err)
	}
	var list []mdev.Instance
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	owned := map[string]int{}
	for _, in := range list {
		if seen[in.UUID] {
			t.Errorf("instance %s listed twice", in.UUID)
		}
		seen[in.UUID] = true
		owned[in.Owner]++
	}
	for _, vm := range []string{"vm0", "vm1", "vm2", "vm3"} {
		if owned[vm] != 2 {
			t.Errorf("%s owns %d instances in the state file, want 2: %s", vm, owned[vm], out)
		}
	}
}
