package mdev

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
)

// twoForVM1 is a fake host with mbochs (its directory in the tree: dir) and two mbochs-small
// instances created for vm1.
func twoForVM1(t *testing.T) (tr *hosttest.Tree, dir string, m *Manager, k *hosttest.Kernel, ins []Instance) {
	t.Helper()
	tr = hosttest.New(t)
	dir = tr.Mbochs()
	m, k = newMgr(tr)
	ins, err := m.Create(context.Background(), CreateRequest{Parent: "mbochs", Profile: "mbochs-small", Count: 2, Owner: "vm1"})
	if err != nil {
		t.Fatal(err)
	}
	return tr, dir, m, k, ins
}

// removeMdev does not poll after a remove write the kernel completed, but when the write
// returns before the instance is gone (another remover's removal in progress), Remove must
// still return only once it is gone.
func TestRemoveWaitsForALateKernelRemove(t *testing.T) {
	tr, dir, m, k, ins := twoForVM1(t)
	ctx := context.Background()
	k.LateMdevRemove = 50 * time.Millisecond
	rm, err := m.RemoveOwner(ctx, "vm1", RemoveOptions{})
	if err != nil || len(rm) != 2 {
		t.Fatalf("remove: %v %+v", err, rm)
	}
	for _, in := range ins {
		if host.Exists(tr.Root.Sys("bus", "mdev", "devices", in.UUID)) {
			t.Fatalf("RemoveOwner returned while %s was still there", in.UUID)
		}
	}
	// The emulated removal finishes (available_instances back to 8) before the tree goes.
	for deadline := time.Now().Add(5 * time.Second); avail(t, tr, dir, "mbochs-small") != "8"; {
		if time.Now().After(deadline) {
			t.Fatal("available_instances never came back to 8")
		}
		time.Sleep(time.Millisecond)
	}
}

// An instance that goes between Remove's read and its remove write (its remove attribute is
// gone: ENOENT) is already removed, not an error.
func TestRemoveInstanceGoneBeforeTheWrite(t *testing.T) {
	tr, _, m, k, ins := twoForVM1(t)
	ctx := context.Background()
	gone := ins[0].UUID
	other := false
	k.FailWrite = func(path, value string) error {
		if !other && strings.Contains(path, gone) && strings.HasSuffix(path, "/remove") {
			// Someone else removes it just before this write lands (k.Write consults
			// FailWrite again: other is set first).
			other = true
			if err := k.Write(ctx, tr.Root.Sys("bus", "mdev", "devices", gone, "remove"), "1"); err != nil {
				t.Errorf("the other remover: %v", err)
			}
		}
		return nil
	}
	rm, err := m.RemoveOwner(ctx, "vm1", RemoveOptions{})
	if err != nil || len(rm) != 2 {
		t.Fatalf("remove: %v %+v", err, rm)
	}
	for _, in := range ins {
		if host.Exists(tr.Root.Sys("bus", "mdev", "devices", in.UUID)) {
			t.Fatalf("%s still there", in.UUID)
		}
	}
	if list, _ := m.Instances(); len(list) != 0 {
		t.Fatalf("state still lists %+v", list)
	}
}

// Remove and RemoveOwner read only the instances they name: what they remove and record must
// be what reading every instance gave. vm1 has two active instances, one of them defined (its
// record is kept for a restore), plus a defined inactive one; vm2's instance and an unowned
// one stay.
func TestRemoveNamedInstancesOnly(t *testing.T) {
	tr := hosttest.New(t)
	tr.Mbochs()
	m, _ := newMgr(tr)
	ctx := context.Background()
	vm1, err := m.Create(ctx, CreateRequest{Parent: "mbochs", Profile: "mbochs-small", Count: 2, Owner: "vm1"})
	if err != nil {
		t.Fatal(err)
	}
	vm2, err := m.Create(ctx, CreateRequest{Parent: "mbochs", Profile: "mbochs-small", Owner: "vm2"})
	if err != nil {
		t.Fatal(err)
	}
	loose, err := m.Create(ctx, CreateRequest{Parent: "mbochs", Profile: "mbochs-medium"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Define(Definition{UUID: vm1[1].UUID}); err != nil {
		t.Fatal(err)
	}
	// A defined, inactive instance recorded for vm1 (created, defined, then stopped by hand).
	third, err := m.Create(ctx, CreateRequest{Parent: "mbochs", Profile: "mbochs-large", Owner: "vm1", FirstIndex: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Define(Definition{UUID: third[0].UUID}); err != nil {
		t.Fatal(err)
	}
	if err := m.removeMdev(ctx, third[0].UUID); err != nil {
		t.Fatal(err)
	}

	rm, err := m.RemoveOwner(ctx, "vm1", RemoveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Instance{}
	for _, in := range rm {
		got[in.UUID] = in
	}
	if len(rm) != 3 || !got[vm1[0].UUID].Active || got[vm1[0].UUID].Defined || !got[vm1[1].UUID].Defined ||
		got[third[0].UUID].Active || !got[third[0].UUID].Defined || got[third[0].UUID].Type != "mbochs-large" {
		t.Fatalf("removed %+v", rm)
	}
	for _, in := range append(vm1, third...) {
		if host.Exists(tr.Root.Sys("bus", "mdev", "devices", in.UUID)) {
			t.Fatalf("%s still active", in.UUID)
		}
	}
	list, err := m.Instances()
	if err != nil {
		t.Fatal(err)
	}
	left := map[string]Instance{}
	for _, in := range list {
		left[in.UUID] = in
	}
	// Still there: vm2's and the unowned instance, active; vm1's two defined ones, inactive,
	// with their records (owner, index) kept.
	if len(list) != 4 || !left[vm2[0].UUID].Active || left[vm2[0].UUID].Owner != "vm2" || !left[loose[0].UUID].Active ||
		left[vm1[1].UUID].Owner != "vm1" || left[vm1[1].UUID].Index != 1 || left[vm1[1].UUID].Active ||
		left[third[0].UUID].Owner != "vm1" || left[third[0].UUID].Index != 2 {
		t.Fatalf("left %+v", list)
	}
	// By UUID: the named ones only, and one not there is already gone.
	rm, err = m.Remove(ctx, []string{strings.ToUpper(vm2[0].UUID), "00000000-0000-4000-8000-000000000001"}, RemoveOptions{})
	if err != nil || len(rm) != 1 || rm[0].UUID != vm2[0].UUID || rm[0].Owner != "vm2" {
		t.Fatalf("remove by UUID: %v %+v", err, rm)
	}
	if !host.Exists(tr.Root.Sys("bus", "mdev", "devices", loose[0].UUID)) {
		t.Fatal("the unnamed instance was removed")
	}
}

// Remove reads each named instance's two links and each type's name once: what it returns
// must be what the full read (Instances) lists, type names included, for instances of two
// types.
func TestRemoveReadsEachTypeNameOnce(t *testing.T) {
	tr := hosttest.New(t)
	tr.Mbochs()
	m, _ := newMgr(tr)
	ctx := context.Background()
	if _, err := m.Create(ctx, CreateRequest{Parent: "mbochs", Profile: "mbochs-small", Count: 2, Owner: "vm1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(ctx, CreateRequest{Parent: "mbochs", Profile: "mbochs-medium", Owner: "vm1", FirstIndex: 2}); err != nil {
		t.Fatal(err)
	}
	before, err := m.Instances()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Instance{}
	for _, in := range before {
		want[in.UUID] = in
	}
	rm, err := m.RemoveOwner(ctx, "vm1", RemoveOptions{})
	if err != nil || len(rm) != 3 {
		t.Fatalf("remove: %v %+v", err, rm)
	}
	names := map[string]bool{}
	for _, in := range rm {
		if w := want[in.UUID]; in != w {
			t.Errorf("removed %+v, the full read listed %+v", in, w)
		}
		names[in.TypeName] = true
	}
	if len(names) != 2 || names[""] {
		t.Errorf("type names of the removed instances: %v, want two distinct non-empty names", names)
	}
}

// Remove searches the processes' open files once for all the instances it checks; the busy
// refusal must still name the instance whose /dev/vfio/GROUP is held, and nothing is removed.
func TestRemoveOneHolderSearchNamesTheHeldInstance(t *testing.T) {
	tr, _, m, _, ins := twoForVM1(t)
	mi, _, err := host.ReadMdevInstance(tr.Root, ins[1].UUID)
	if err != nil || mi.IOMMUGroup < 0 {
		t.Fatalf("instance %s: %+v %v", ins[1].UUID, mi, err)
	}
	tr.HoldOpen(4711, "qemu-system-x86", fmt.Sprintf("/dev/vfio/%d", mi.IOMMUGroup))
	_, err = m.RemoveOwner(context.Background(), "vm1", RemoveOptions{})
	if !errors.Is(err, host.ErrBusy) || !strings.Contains(err.Error(), "remove "+ins[1].UUID) || !strings.Contains(err.Error(), "pid 4711 (qemu-system-x86)") {
		t.Fatalf("remove with %s held: %v", ins[1].UUID, err)
	}
	for _, in := range ins {
		if !host.Exists(tr.Root.Sys("bus", "mdev", "devices", in.UUID)) {
			t.Fatalf("%s was removed though another instance of the call is held", in.UUID)
		}
	}
	if err := m.CheckRemove(context.Background(), []string{ins[0].UUID}, RemoveOptions{}); err != nil {
		t.Fatalf("check of the instance nobody holds: %v", err)
	}
	if err := m.CheckRemove(context.Background(), []string{ins[0].UUID, ins[1].UUID}, RemoveOptions{}); !errors.Is(err, host.ErrBusy) {
		t.Fatalf("check of both: %v", err)
	}
}
