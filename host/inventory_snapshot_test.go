package host_test

import (
	"errors"
	"reflect"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
)

func addr(s string) host.Address { return host.MustParseAddress(s) }

// The real-kernel snapshot: Debian 12's 6.1 kernel in QEMU q35 with intel-iommu (see
// ../../shared/fixtures/README.md for the table these assertions follow).
func TestScanRealKernelSnapshot(t *testing.T) {
	t.Parallel()
	root := hosttest.Snapshot(t, hosttest.SharedFixture(t, "qemu-q35-iommu-6.1.tar.gz"))
	inv, err := host.Scan(root)
	if err != nil {
		t.Fatal(err)
	}
	if !inv.IOMMU {
		t.Error("IOMMU = false on a kernel booted with intel_iommu=on")
	}
	var got []string
	for _, d := range inv.Devices {
		got = append(got, d.Address.String())
	}
	want := []string{"0000:00:02.0", "0000:00:06.0", "0000:00:0b.0", "0000:01:00.0", "0000:01:00.1", "0000:02:00.0", "0000:03:01.0", "0000:03:02.0"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("devices = %v, want %v", got, want)
	}
	dev := map[string]host.Device{}
	for _, d := range inv.Devices {
		dev[d.Address.String()[5:]] = d
	}
	checkDev := func(a, vendor, device, class, driver string, group int, gpu bool) {
		t.Helper()
		d := dev[a]
		if d.VendorID != vendor || d.DeviceID != device || d.Class != class || d.Driver != driver || d.IOMMUGroup != group || d.IsGPU != gpu {
			t.Errorf("%s = %s:%s class %s driver %q group %d gpu %v; want %s:%s %s %q %d %v",
				a, d.VendorID, d.DeviceID, d.Class, d.Driver, d.IOMMUGroup, d.IsGPU, vendor, device, class, driver, group, gpu)
		}
	}
	checkDev("00:02.0", "1b36", "0100", "030000", "qxl", 1, true)
	checkDev("00:06.0", "1af4", "1050", "038000", "virtio-pci", 4, true)
	checkDev("01:00.0", "1002", "5046", "030000", "", 9, true)
	checkDev("01:00.1", "8086", "2668", "040300", "snd_hda_intel", 9, false)
	checkDev("02:00.0", "1002", "5046", "030000", "", 10, true)
	checkDev("00:0b.0", "1b36", "000e", "060400", "", 6, false)
	checkDev("03:01.0", "1234", "1111", "038000", "bochs-drm", 6, true)
	checkDev("03:02.0", "8086", "100e", "020000", "", 6, false)

	if !dev["00:02.0"].BootVGA || dev["01:00.0"].BootVGA || dev["02:00.0"].BootVGA {
		t.Errorf("boot_vga: 00:02.0=%v 01:00.0=%v 02:00.0=%v, want only 00:02.0", dev["00:02.0"].BootVGA, dev["01:00.0"].BootVGA, dev["02:00.0"].BootVGA)
	}
	if !dev["00:0b.0"].IsBridge || dev["03:02.0"].IsBridge {
		t.Error("00:0b.0 must be a bridge, 03:02.0 not")
	}
	if c := dev["01:00.0"].Companions; len(c) != 1 || c[0] != addr("01:00.1") {
		t.Errorf("companions of 01:00.0 = %v, want [01:00.1]", c)
	}
	// qxl: BAR0 64 MiB and BAR1 64 MiB memory, BAR2 8 KiB, BAR3 32 bytes of I/O.
	bars := dev["00:02.0"].BARs
	if len(bars) != 4 || bars[0].Size != 64<<20 || bars[0].Is64 || bars[2].Size != 8<<10 || !bars[3].IO || bars[3].Size != 32 {
		t.Errorf("qxl BARs = %+v", bars)
	}
	if dev["00:02.0"].NUMANode != -1 {
		t.Errorf("numa_node of 00:02.0 = %d, want -1 (no NUMA in the guest)", dev["00:02.0"].NUMANode)
	}
	if dev["01:00.0"].VendorName == "" || dev["01:00.0"].ClassName != "VGA compatible controller" {
		t.Errorf("names of 01:00.0: vendor %q class %q (is pci.ids installed?)", dev["01:00.0"].VendorName, dev["01:00.0"].ClassName)
	}

	groups := map[int]host.Group{}
	var ids []int
	for _, g := range inv.Groups {
		groups[g.ID] = g
		ids = append(ids, g.ID)
	}
	if !reflect.DeepEqual(ids, []int{1, 4, 6, 9, 10, 14}) {
		t.Errorf("groups = %v, want [1 4 6 9 10 14] (14: the mdpy instance's own group)", ids)
	}
	// The mdev instance's group lists a UUID, not a PCI function: it is a group of one mdev,
	// viable (the VM opens it through the mdev driver), with no PCI members.
	wantMdev := []host.GroupMdev{{UUID: "66666666-7777-8888-9999-000000000000", Parent: "mdpy", Type: "mdpy-hd", Driver: "mdpy"}}
	if g := groups[14]; !g.Viable || len(g.Members) != 0 || len(g.Blockers) != 0 || !reflect.DeepEqual(g.Mdevs, wantMdev) {
		t.Errorf("group 14 = %+v, want viable, no PCI members, mdevs %+v", g, wantMdev)
	}
	if g, err := host.ReadGroup(root, 14); err != nil || !reflect.DeepEqual(g, groups[14]) {
		t.Errorf("ReadGroup(14) = %+v, %v; want what Scan reports, %+v", g, err, groups[14])
	}
	for _, id := range []int{1, 4, 6, 9, 10} {
		if len(groups[id].Mdevs) != 0 {
			t.Errorf("PCI group %d lists mdevs %+v", id, groups[id].Mdevs)
		}
	}
	if g := groups[9]; g.Viable || len(g.Blockers) != 1 || g.Blockers[0].Address != addr("01:00.1") || g.Blockers[0].Driver != "snd_hda_intel" || g.Blockers[0].Reason == "" {
		t.Errorf("group 9 = %+v, want not viable, blocker 01:00.1 snd_hda_intel", g)
	}
	if g := groups[6]; g.Viable || len(g.Members) != 3 || len(g.Blockers) != 1 || g.Blockers[0].Address != addr("03:01.0") {
		t.Errorf("group 6 = %+v, want 3 members, not viable, blocker 03:01.0 bochs-drm", g)
	}
	if g := groups[10]; !g.Viable || len(g.Members) != 1 {
		t.Errorf("group 10 = %+v, want viable (driverless GPU alone)", g)
	}
	if g := groups[1]; g.Viable || g.Blockers[0].Driver != "qxl" {
		t.Errorf("group 1 = %+v, want blocked by qxl", g)
	}

	// Every group of the host, through GroupOf / ReadGroup.
	wantMembers := map[int][]string{
		0: {"00:00.0"}, 1: {"00:02.0"}, 2: {"00:04.0"}, 3: {"00:05.0"}, 4: {"00:06.0"}, 5: {"00:0a.0"},
		6: {"00:0b.0", "03:01.0", "03:02.0"}, 7: {"00:1e.0"}, 8: {"00:1f.0", "00:1f.2", "00:1f.3"},
		9: {"01:00.0", "01:00.1"}, 10: {"02:00.0"}, 11: {"00:0a.1"}, 12: {"00:0a.2"}, 13: {"00:0a.3"},
	}
	wantViable := map[int]bool{0: true, 2: true, 3: true, 8: true, 10: true, 11: true, 12: true, 13: true}
	for id, members := range wantMembers {
		g, err := host.ReadGroup(root, id)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, m := range g.Members {
			got = append(got, m.Address.String()[5:])
		}
		if !reflect.DeepEqual(got, members) || g.Viable != wantViable[id] {
			t.Errorf("group %d: members %v viable %v, want %v %v (blockers %+v)", id, got, g.Viable, members, wantViable[id], g.Blockers)
		}
		g2, err := host.GroupOf(root, addr(members[0]))
		if err != nil || g2.ID != id {
			t.Errorf("GroupOf(%s) = %d, %v; want %d", members[0], g2.ID, err, id)
		}
	}

	// SR-IOV on the nvme PF (not a GPU, so not in Devices: read it directly).
	pf, err := host.ReadDevice(root, addr("00:0a.0"))
	if err != nil {
		t.Fatal(err)
	}
	if pf.SRIOV == nil || pf.SRIOV.TotalVFs != 3 || pf.SRIOV.NumVFs != 3 ||
		!reflect.DeepEqual(pf.SRIOV.VFs, []host.Address{addr("00:0a.1"), addr("00:0a.2"), addr("00:0a.3")}) {
		t.Errorf("nvme SR-IOV = %+v, want 3 of 3 VFs 0a.1-0a.3", pf.SRIOV)
	}
	vf, err := host.ReadDevice(root, addr("00:0a.2"))
	if err != nil || vf.PhysFn == nil || *vf.PhysFn != addr("00:0a.0") || vf.SRIOV != nil {
		t.Errorf("VF 00:0a.2: physfn %v sriov %v err %v", vf.PhysFn, vf.SRIOV, err)
	}

	checkMdev(t, inv.MdevParents)
	if len(inv.Warnings) != 0 {
		t.Errorf("warnings on a complete snapshot: %q", inv.Warnings)
	}
}

func checkMdev(t *testing.T, parents []host.MdevParent) {
	t.Helper()
	types := map[string]map[string]host.MdevType{}
	for _, p := range parents {
		if p.Address != nil {
			t.Errorf("virtual parent %s has a PCI address %v", p.Parent, p.Address)
		}
		types[p.Parent] = map[string]host.MdevType{}
		for _, ty := range p.Types {
			types[p.Parent][ty.ID] = ty
		}
	}
	for parent, ids := range map[string][]string{
		"mbochs": {"mbochs-large", "mbochs-medium", "mbochs-small"},
		"mdpy":   {"mdpy-hd", "mdpy-vga", "mdpy-xga"},
		"mtty":   {"mtty-1", "mtty-2"},
	} {
		if len(types[parent]) != len(ids) {
			t.Errorf("mdev parent %s has %d types, want %v", parent, len(types[parent]), ids)
		}
		for _, id := range ids {
			ty, ok := types[parent][id]
			if !ok || ty.DeviceAPI != "vfio-pci" || ty.AvailableInstances <= 0 {
				t.Errorf("mdev %s/%s = %+v (present %v)", parent, id, ty, ok)
			}
		}
	}
	if hd := types["mdpy"]["mdpy-hd"]; !reflect.DeepEqual(hd.Instances, []string{"66666666-7777-8888-9999-000000000000"}) || hd.AvailableInstances != 3 {
		t.Errorf("mdpy-hd = %+v, want one instance 66666666-… and 3 available", hd)
	}
	if ty := types["mtty"]["mtty-2"]; ty.Name != "Dual port serial" || ty.AvailableInstances != 12 {
		t.Errorf("mtty-2 = %+v", ty)
	}
}

// The lab's own snapshot, when the lab engineer has committed it: the same discovery invariants.
func TestScanLabSnapshot(t *testing.T) {
	t.Parallel()
	p := hosttest.RepoFile(t, "host/testdata/lab-snapshot.tar.gz")
	if p == "" {
		t.Fatal("host/testdata/lab-snapshot.tar.gz is missing: make lab-snapshot captures it")
	}
	root := hosttest.Snapshot(t, p)
	inv, err := host.Scan(root)
	if err != nil {
		t.Fatal(err)
	}
	if !inv.IOMMU || len(inv.Groups) == 0 {
		t.Fatalf("lab snapshot: iommu %v, %d groups", inv.IOMMU, len(inv.Groups))
	}
	for _, g := range inv.Groups {
		want, err := host.ReadGroup(root, g.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(g, want) {
			t.Errorf("group %d from Scan = %+v, from ReadGroup = %+v", g.ID, g, want)
		}
	}
	for _, d := range inv.Devices {
		if d.IOMMUGroup < 0 {
			t.Errorf("%s has no group on an IOMMU host", d.Address)
		}
		if d.IsGPU && d.Class[:2] != "03" {
			t.Errorf("%s: is_gpu with class %s", d.Address, d.Class)
		}
	}
	if len(inv.MdevParents) > 0 {
		checkMdev(t, inv.MdevParents)
	}
}

func TestReadDeviceMissing(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	_, err := host.ReadDevice(tr.Root, addr("0000:09:00.0"))
	if !errors.Is(err, host.ErrNotFound) {
		t.Errorf("ReadDevice of a missing device: %v, want ErrNotFound", err)
	}
	_, err = host.GroupOf(tr.Root, addr("0000:09:00.0"))
	if !errors.Is(err, host.ErrNotFound) {
		t.Errorf("GroupOf of a missing device: %v, want ErrNotFound", err)
	}
}
