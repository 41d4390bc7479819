package mdev

import (
	"context"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host/hosttest"
)

// TestRestoreAfterReboot persists VFs, a vendor vGPU type and an mdev, "reboots" (the kernel
// forgets all three), and checks that Restore brings them back in order: VFs, vendor types,
// mdevs; and that a second Restore changes nothing.
func TestRestoreAfterReboot(t *testing.T) {
	tr := hosttest.New(t)
	pf := tr.NvidiaSRIOVGPU("0000:40:01.0", "0000:41:00.0", 0, 0, nil)
	tr.Mbochs()
	m, k := newMgr(tr)
	ctx := context.Background()
	if _, err := m.EnableVFs(ctx, pf, 4, EnableOptions{Persist: true}); err != nil {
		t.Fatal(err)
	}
	vend, err := m.Create(ctx, CreateRequest{Parent: pf.String(), Profile: "L40S-2Q", Count: 2, Owner: "vm1"})
	if err != nil {
		t.Fatal(err)
	}
	md, err := m.Create(ctx, CreateRequest{Parent: "mbochs", Profile: "mbochs-small", Owner: "vm1", FirstIndex: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Define(Definition{UUID: md[0].UUID}); err != nil {
		t.Fatal(err)
	}

	// Reboot: VFs gone, mdev gone; the files under etc and var/lib stay.
	if err := k.Write(ctx, tr.Root.PCIDevice(pf, "sriov_numvfs"), "0"); err != nil {
		t.Fatal(err)
	}
	if err := k.Write(ctx, tr.Root.Sys("bus", "mdev", "devices", md[0].UUID, "remove"), "1"); err != nil {
		t.Fatal(err)
	}
	list, _ := m.Instances()
	if len(list) != 3 {
		t.Fatalf("defined instances after reboot: %+v", list)
	}
	for _, in := range list {
		if in.Active || !in.Defined {
			t.Fatalf("after reboot %s active=%v defined=%v", in.ID(), in.Active, in.Defined)
		}
	}

	k2 := hosttest.NewKernel(tr)
	m.W = k2
	steps, err := m.Restore(ctx)
	if err != nil {
		t.Fatalf("restore: %v\n%+v", err, steps)
	}
	var order []string
	for _, w := range k2.Writes() {
		switch {
		case strings.HasSuffix(w.Path, "sriov_numvfs"):
			order = append(order, "vfs")
		case strings.HasSuffix(w.Path, "current_vgpu_type"):
			order = append(order, "vendor")
		case strings.HasSuffix(w.Path, "/create"):
			order = append(order, "mdev")
		}
	}
	if got := strings.Join(order, ","); got != "vfs,vendor,vendor,mdev" {
		t.Fatalf("restore order %s", got)
	}
	for _, in := range vend {
		if c := current(tr, *in.VF); c != in.Type {
			t.Fatalf("VF %s has type %s after restore, want %s", in.VF, c, in.Type)
		}
	}
	if a, ok := m.activeMdev(md[0].UUID); !ok || a.Type != "mbochs-small" {
		t.Fatal("mdev not restored")
	}
	own, _ := m.OwnerInstances("vm1")
	if len(own) != 3 || own[2].UUID != md[0].UUID {
		t.Fatalf("owner lost: %+v", own)
	}

	n := len(k2.Writes())
	steps, err = m.Restore(ctx)
	if err != nil || len(k2.Writes()) != n {
		t.Fatalf("second restore wrote %d times: %v", len(k2.Writes())-n, err)
	}
	for _, s := range steps {
		if s.Result != "already" {
			t.Fatalf("second restore step %+v", s)
		}
	}
}
