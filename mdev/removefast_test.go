package mdev

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
)

// removeMdev does not poll after a remove write the kernel completed, but when the write
// returns before the instance is gone (another remover's removal in progress), Remove must
// still return only once it is gone.
func TestRemoveWaitsForALateKernelRemove(t *testing.T) {
	tr := hosttest.New(t)
	tr.Mbochs()
	m, k := newMgr(tr)
	ctx := context.Background()
	ins, err := m.Create(ctx, CreateRequest{Parent: "mbochs", Profile: "mbochs-small", Count: 2, Owner: "vm1"})
	if err != nil {
		t.Fatal(err)
	}
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
}

// An instance that goes between Remove's read and its remove write (its remove attribute is
// gone: ENOENT) is already removed, not an error.
func TestRemoveInstanceGoneBeforeTheWrite(t *testing.T) {
	tr := hosttest.New(t)
	tr.Mbochs()
	m, k := newMgr(tr)
	ctx := context.Background()
	ins, err := m.Create(ctx, CreateRequest{Parent: "mbochs", Profile: "mbochs-small", Count: 2, Owner: "vm1"})
	if err != nil {
		t.Fatal(err)
	}
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
