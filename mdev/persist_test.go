package mdev

import (
	"context"
	"os"
	"path/filepath"
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

// TestDefinitionsStayInRoot: under a fake root whose etc/mdevctl.d is a link to another
// directory's (as etc/mdevctl.d -> /etc/mdevctl.d would be), the definitions there are not
// this host's: the directory resolves inside the root, where there is none. Before, the listing
// followed the link and listed this machine's definitions under the root's name.
func TestDefinitionsStayInRoot(t *testing.T) {
	tr := hosttest.New(t)
	tr.Mbochs()
	m, _ := newMgr(tr)
	outside := t.TempDir()
	def := filepath.Join(outside, "mbochs", "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001")
	if err := os.MkdirAll(filepath.Dir(def), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(def, []byte(`{"mdev_type": "mbochs-small", "start": "auto", "attrs": []}`), 0o644); err != nil {
		t.Fatal(err)
	}
	// The same file in a tree's own etc/mdevctl.d is a definition (the control).
	tr2 := hosttest.New(t)
	tr2.Mbochs()
	tr2.WriteFile("etc/mdevctl.d/mbochs/83b8f4f2-509f-382f-3c1e-e6bfe0fa1001", `{"mdev_type": "mbochs-small", "start": "auto", "attrs": []}`)
	m2, _ := newMgr(tr2)
	if defs, err := m2.Definitions(); err != nil || len(defs) != 1 {
		t.Fatalf("the definition in the tree: %+v, %v", defs, err)
	}
	if err := os.MkdirAll(tr.Root.Etc(), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, tr.Root.Etc("mdevctl.d")); err != nil {
		t.Fatal(err)
	}
	defs, err := m.Definitions()
	if err != nil || len(defs) != 0 {
		t.Errorf("definitions through etc/mdevctl.d -> %s: %+v, %v; want none", outside, defs, err)
	}
}
