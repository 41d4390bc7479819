package host_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
)

func scan(t *testing.T, tr *hosttest.Tree) (*host.Inventory, map[host.Address]host.Device, map[int]host.Group) {
	t.Helper()
	inv, err := host.Scan(tr.Root)
	if err != nil {
		t.Fatal(err)
	}
	devs := map[host.Address]host.Device{}
	for _, d := range inv.Devices {
		devs[d.Address] = d
	}
	groups := map[int]host.Group{}
	for _, g := range inv.Groups {
		groups[g.ID] = g
	}
	return inv, devs, groups
}

func TestScanDatacenterGPU(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	gpu := tr.DatacenterGPU("0000:40:01.0", "0000:41:00.0", "vfio-pci", 1)
	inv, devs, groups := scan(t, tr)
	d, ok := devs[gpu]
	if !ok || len(inv.Devices) != 1 {
		t.Fatalf("devices = %+v, want only the A100 (root ports are not in the GPU's group)", inv.Devices)
	}
	if d.VendorName != "NVIDIA Corporation" || !strings.Contains(d.DeviceName, "A100") || d.ClassName != "3D controller" {
		t.Errorf("names = %q / %q / %q", d.VendorName, d.DeviceName, d.ClassName)
	}
	if d.SubsysVendorID != "10de" || d.SubsysDeviceID != "134f" {
		t.Errorf("subsystem = %s:%s", d.SubsysVendorID, d.SubsysDeviceID)
	}
	if d.NUMANode != 1 || d.LocalCPUs != "8-15" || d.Driver != "vfio-pci" || !reflect.DeepEqual(d.ResetMethods, []string{"flr", "bus"}) {
		t.Errorf("numa %d cpus %q driver %q reset %v", d.NUMANode, d.LocalCPUs, d.Driver, d.ResetMethods)
	}
	if len(d.BARs) != 3 || d.BARs[1].Index != 1 || d.BARs[1].Size != 64<<30 || !d.BARs[1].Is64 || !d.BARs[1].Prefetch || d.BARs[0].Prefetch {
		t.Errorf("BARs = %+v, want BAR1 64 GiB 64-bit prefetchable", d.BARs)
	}
	if len(d.Companions) != 0 {
		t.Errorf("companions = %v, want none (no audio function)", d.Companions)
	}
	if g := groups[d.IOMMUGroup]; !g.Viable || len(g.Members) != 1 || len(g.Blockers) != 0 {
		t.Errorf("group = %+v, want viable alone", g)
	}
	if len(inv.Warnings) != 0 {
		t.Errorf("warnings: %q", inv.Warnings)
	}
}

func TestScanConsumerGPUWithAudio(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	gpu, audio := tr.ConsumerGPU("0000:00:01.0", "0000:01:00.0", "nouveau")
	_, devs, groups := scan(t, tr)
	d := devs[gpu]
	if !reflect.DeepEqual(d.Companions, []host.Address{audio}) {
		t.Errorf("companions = %v, want [%s]", d.Companions, audio)
	}
	if d.SubsysVendorID != "1462" || d.SubsysDeviceID != "3892" {
		t.Errorf("subsystem %s:%s", d.SubsysVendorID, d.SubsysDeviceID)
	}
	g := groups[d.IOMMUGroup]
	if g.Viable || len(g.Blockers) != 2 {
		t.Fatalf("group = %+v, want blocked by nouveau and snd_hda_intel", g)
	}
	if g.Blockers[0].Address != gpu || g.Blockers[1].Address != audio || g.Blockers[1].Driver != "snd_hda_intel" {
		t.Errorf("blockers = %+v", g.Blockers)
	}
	if _, ok := devs[audio]; !ok {
		t.Error("the audio function is not in devices")
	}

	// Both on vfio-pci (or the GPU driverless): viable.
	tr.Unbind(gpu)
	tr.Bind(audio, "vfio-pci")
	_, _, groups = scan(t, tr)
	if g := groups[d.IOMMUGroup]; !g.Viable || len(g.Blockers) != 0 {
		t.Errorf("after binding: group = %+v, want viable", g)
	}
}

func TestScanGPUSharingGroupWithNIC(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	gpu, nic := tr.GPUWithNIC("0000:00:0b.0", "0000:03:01.0", "0000:03:02.0")
	_, devs, groups := scan(t, tr)
	g := groups[devs[gpu].IOMMUGroup]
	if len(g.Members) != 3 || g.Viable {
		t.Fatalf("group = %+v, want 3 members, not viable", g)
	}
	var blockers []host.Address
	for _, b := range g.Blockers {
		blockers = append(blockers, b.Address)
	}
	if !reflect.DeepEqual(blockers, []host.Address{gpu, nic}) {
		t.Errorf("blockers = %v, want GPU (bochs-drm) and NIC (e1000); the bridge may stay", blockers)
	}
	if !devs[host.MustParseAddress("0000:00:0b.0")].IsBridge {
		t.Error("bridge not marked is_bridge")
	}
}

func TestScanSRIOVAndVendorVGPU(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	pf := tr.NvidiaSRIOVGPU("0000:80:01.0", "0000:81:00.0", 0, 3, nil)
	_, devs, groups := scan(t, tr)
	d := devs[pf]
	if d.SRIOV == nil || d.SRIOV.TotalVFs != 32 || d.SRIOV.NumVFs != 3 || len(d.SRIOV.VFs) != 3 {
		t.Fatalf("SR-IOV = %+v", d.SRIOV)
	}
	if d.SRIOV.DriversAutoprobe == nil || !*d.SRIOV.DriversAutoprobe {
		t.Error("drivers_autoprobe not read")
	}
	for i, vfAddr := range d.SRIOV.VFs {
		if vfAddr != tr.VFAddress(pf, i) {
			t.Errorf("VF %d = %s, want %s", i, vfAddr, tr.VFAddress(pf, i))
		}
		vf, ok := devs[vfAddr]
		if !ok {
			t.Fatalf("VF %s of a GPU is not in devices", vfAddr)
		}
		if vf.PhysFn == nil || *vf.PhysFn != pf {
			t.Errorf("VF %s physfn = %v", vfAddr, vf.PhysFn)
		}
		if vf.VendorVGPU == nil || len(vf.VendorVGPU.Creatable) != 4 || vf.VendorVGPU.Creatable[0] != (host.VendorVGPUType{ID: 1155, Name: "NVIDIA L40S-1Q"}) || vf.VendorVGPU.CurrentType != 0 {
			t.Errorf("VF %s vendor vGPU = %+v", vfAddr, vf.VendorVGPU)
		}
		if _, ok := groups[vf.IOMMUGroup]; !ok {
			t.Errorf("group of VF %s missing", vfAddr)
		}
	}
	if d.VendorVGPU != nil {
		t.Error("the PF has no nvidia/creatable_vgpu_types")
	}

	// Give VF0 a type: the others can then only take the same type (fake driver semantics).
	k := hosttest.NewKernel(tr)
	vf0 := d.SRIOV.VFs[0]
	if err := k.Write(t.Context(), tr.Root.PCIDevice(vf0, "nvidia", "current_vgpu_type"), "1160"); err != nil {
		t.Fatal(err)
	}
	v, err := host.ReadVendorVGPU(tr.Root, vf0)
	if err != nil || v.CurrentType != 1160 {
		t.Errorf("after write: %+v, %v", v, err)
	}
}

func TestScanMdevParents(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	gpu := tr.DatacenterGPU("0000:40:01.0", "0000:41:00.0", "nvidia", 0)
	tr.A100Mdev(gpu)
	mb := tr.Mbochs()
	tr.CreateMdev(mb, "mbochs-small", "11111111-2222-3333-4444-555555555555")
	inv, devs, _ := scan(t, tr)
	if len(inv.MdevParents) != 2 || inv.MdevParents[0].Parent != gpu.String() || inv.MdevParents[1].Parent != "mbochs" {
		t.Fatalf("parents = %+v", inv.MdevParents)
	}
	p := inv.MdevParents[0]
	if p.Address == nil || *p.Address != gpu || len(p.Types) != 3 || p.Types[0].ID != "nvidia-471" || p.Types[0].Name != "GRID A100-4C" || p.Types[0].AvailableInstances != 10 {
		t.Errorf("A100 parent = %+v", p)
	}
	if devs[gpu].Mdev == nil || devs[gpu].Mdev.Parent != gpu.String() {
		t.Error("Device.Mdev not set on the PCI parent")
	}
	small := inv.MdevParents[1].Types[2]
	if small.ID != "mbochs-small" || !reflect.DeepEqual(small.Instances, []string{"11111111-2222-3333-4444-555555555555"}) || small.Description != "64 MB video memory" {
		t.Errorf("mbochs-small = %+v", small)
	}
	ps, err := host.MdevParents(tr.Root)
	if err != nil || !reflect.DeepEqual(ps, inv.MdevParents) {
		t.Errorf("MdevParents = %+v, %v; want what Scan saw", ps, err)
	}
}

func TestScanNoIOMMU(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	tr.NoIOMMU()
	tr.AddPCI(hosttest.PCI{Addr: "0000:00:02.0", Vendor: hosttest.VendorIntel, Device: 0x3e92, Class: 0x030000, Driver: "i915", BootVGA: true, Group: -1})
	inv, devs, _ := scan(t, tr)
	if inv.IOMMU || len(inv.Groups) != 0 {
		t.Errorf("iommu %v groups %v, want none", inv.IOMMU, inv.Groups)
	}
	d := devs[host.MustParseAddress("0000:00:02.0")]
	if d.IOMMUGroup != -1 || !d.BootVGA {
		t.Errorf("group %d boot_vga %v", d.IOMMUGroup, d.BootVGA)
	}
	if _, err := host.GroupOf(tr.Root, d.Address); err == nil {
		t.Error("GroupOf without an IOMMU must fail")
	}
}

// Bad input: missing attributes become warnings naming the path; a device that vanished
// between listing and reading is reported; nothing panics.
func TestScanBadInput(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	gpu := tr.DatacenterGPU("0000:40:01.0", "0000:41:00.0", "nvidia", 0)
	other, _ := tr.ConsumerGPU("0000:00:01.0", "0000:01:00.0", "")
	os.Remove(filepath.Join(tr.DevDir(gpu), "numa_node"))
	os.Remove(filepath.Join(tr.DevDir(gpu), "resource"))
	// A device listed on the bus whose directory is gone: it was hot-removed mid-scan.
	if err := os.Symlink("../../../devices/pci0000:00/0000:00:09.0", filepath.Join(tr.Dir(), "sys/bus/pci/devices/0000:00:09.0")); err != nil {
		t.Fatal(err)
	}
	// A GPU whose class is readable but whose other attributes are gone (vanished after pass 1).
	gone := tr.AddPCI(hosttest.PCI{Addr: "0000:00:03.0", Vendor: 0x1234, Device: 0x1111, Class: 0x030000})
	os.Remove(filepath.Join(tr.DevDir(gone), "vendor"))
	os.Remove(filepath.Join(tr.DevDir(gone), "uevent")) // else Scan takes the IDs from there
	// A garbage class file.
	bad := tr.AddPCI(hosttest.PCI{Addr: "0000:00:04.0", Vendor: 0x1234, Device: 0x1111, Class: 0x030000})
	os.WriteFile(filepath.Join(tr.DevDir(bad), "class"), []byte("zzz\n"), 0o644)
	os.Remove(filepath.Join(tr.DevDir(bad), "uevent"))

	inv, devs, _ := scan(t, tr)
	if _, ok := devs[gpu]; !ok {
		t.Fatal("the GPU with missing attributes must still be reported")
	}
	if _, ok := devs[other]; !ok {
		t.Fatal("other GPUs must still be reported")
	}
	if devs[gpu].NUMANode != -1 || devs[gpu].BARs != nil {
		t.Errorf("missing numa_node/resource: numa %d bars %v", devs[gpu].NUMANode, devs[gpu].BARs)
	}
	all := strings.Join(inv.Warnings, "\n")
	for _, want := range []string{
		tr.Root.PCIDevice(gpu, "numa_node"),
		tr.Root.PCIDevice(gpu, "resource"),
		"0000:00:09.0: disappeared during the scan",
		"0000:00:03.0: disappeared during the scan",
		filepath.Join(tr.Root.PCIDevice(bad), "class"),
	} {
		if !strings.Contains(all, want) {
			t.Errorf("warnings do not mention %q:\n%s", want, all)
		}
	}
}

func TestScanEmptyRoot(t *testing.T) {
	t.Parallel()
	r, err := host.NewRoot(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	inv, err := host.Scan(r)
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Devices) != 0 || inv.IOMMU || len(inv.Warnings) == 0 {
		t.Errorf("empty root: %+v, want no devices and a warning", inv)
	}
}

func TestParseCreatableVGPUTypes(t *testing.T) {
	t.Parallel()
	got, err := host.ParseCreatableVGPUTypes("ID    : vGPU Name\n1155  : NVIDIA L40S-1Q\n1160  : NVIDIA L40S-8Q\n\n")
	want := []host.VendorVGPUType{{ID: 1155, Name: "NVIDIA L40S-1Q"}, {ID: 1160, Name: "NVIDIA L40S-8Q"}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, %v", got, err)
	}
	if got, err := host.ParseCreatableVGPUTypes("ID    : vGPU Name\n"); err != nil || len(got) != 0 {
		t.Errorf("header only: %+v, %v", got, err)
	}
	if _, err := host.ParseCreatableVGPUTypes("ID : vGPU Name\n1155 NVIDIA\n"); err == nil {
		t.Error("a line without ':' must fail")
	}
	if _, err := host.ParseCreatableVGPUTypes("1155 : A\nxx : B\n"); err == nil {
		t.Error("a non-numeric ID after data lines must fail")
	}
}

func TestPCIIDs(t *testing.T) {
	t.Parallel()
	ids := host.NewPCIIDsFile(filepath.Join(t.TempDir(), "pci.ids"))
	if ids.Vendor("10de") != "" {
		t.Error("a missing pci.ids must give empty names")
	}
	p := filepath.Join(t.TempDir(), "pci.ids")
	os.WriteFile(p, []byte("# comment (vendors in ID order, as in pci.ids)\n1002  AMD\n\t20b0  not nvidia\n10de  NVIDIA Corporation\n\t20b0  GA100 [A100 SXM4 40GB]\n\t\t10de 134f  A100 40GB\n# inner comment\n\t2206  GA102 [GeForce RTX 3080]\nC 03  Display controller\n\t00  VGA compatible controller\n\t80  Display controller\nC 04  Multimedia\n"), 0o644)
	ids = host.NewPCIIDsFile(p)
	for _, c := range []struct{ got, want string }{
		{ids.Vendor("10DE"), "NVIDIA Corporation"},
		{ids.Device("10de", "20b0"), "GA100 [A100 SXM4 40GB]"},
		{ids.Device("10de", "2206"), "GA102 [GeForce RTX 3080]"},
		{ids.Device("1002", "2206"), ""},
		{ids.Device("1002", "20b0"), "not nvidia"},
		{ids.Subsystem("10de", "20b0", "10de", "134f"), "A100 40GB"},
		{ids.Subsystem("10de", "2206", "10de", "134f"), ""},
		{ids.Class("030000"), "VGA compatible controller"},
		{ids.Class("030200"), "Display controller"},
		{ids.Class("040300"), "Multimedia"},
		{ids.Class("ff0000"), ""},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

// An mdev instance on a PCI parent (NVIDIA vGPU <= 16): Scan lists its own IOMMU group, with
// the instance as a GroupMdev naming the parent's address and the type, and the group is viable.
func TestScanMdevInstanceGroup(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	gpu := tr.DatacenterGPU("0000:00:01.0", "0000:01:00.0", "nvidia", 0)
	tr.A100Mdev(gpu)
	const uuid = "0b1f1a58-8f3c-4a1e-9d3e-111111111111"
	parentDir, err := filepath.Rel(tr.Dir(), tr.DevDir(gpu))
	if err != nil {
		t.Fatal(err)
	}
	tr.CreateMdev(parentDir, "nvidia-474", uuid)
	inv, _, groups := scan(t, tr)
	gid := -1
	for _, g := range inv.Groups {
		if len(g.Mdevs) > 0 {
			gid = g.ID
		}
	}
	g, ok := groups[gid]
	want := []host.GroupMdev{{UUID: uuid, Parent: "0000:01:00.0", Type: "nvidia-474"}}
	if !ok || !reflect.DeepEqual(g.Mdevs, want) || len(g.Members) != 0 || !g.Viable {
		t.Fatalf("mdev group = %+v (found %v), want viable with mdevs %+v and no PCI members", g, ok, want)
	}
	if gid == groups[tr.Group(gpu)].ID {
		t.Errorf("the mdev shares group %d with its parent GPU; the kernel gives it its own", gid)
	}
	// The parent GPU's own group is still the GPU alone.
	if pg := groups[tr.Group(gpu)]; len(pg.Members) != 1 || len(pg.Mdevs) != 0 {
		t.Errorf("parent group = %+v", pg)
	}
	if len(inv.Warnings) != 0 {
		t.Errorf("warnings: %q", inv.Warnings)
	}
	rg, err := host.ReadGroup(tr.Root, gid)
	if err != nil || !reflect.DeepEqual(rg, g) {
		t.Errorf("ReadGroup(%d) = %+v, %v; want %+v", gid, rg, err, g)
	}
}

func TestIsMdevUUID(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]bool{
		"66666666-7777-8888-9999-000000000000": true,
		"0B1F1A58-8F3C-4A1E-9D3E-111111111111": true,
		"0000:01:00.0":                         false,
		"66666666-7777-8888-9999-00000000000g": false,
		"666666667-777-8888-9999-000000000000": false,
		"":                                     false,
	} {
		if got := host.IsMdevUUID(s); got != want {
			t.Errorf("IsMdevUUID(%q) = %v, want %v", s, got, want)
		}
	}
}

// ReadDevice and MdevParents used alone drop the problems Scan reports; their *Warnings /
// Read* forms return them, naming the device and path.
func TestStandaloneWarnings(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	gpu, _ := tr.ConsumerGPU("0000:00:01.0", "0000:01:00.0", "nouveau")
	tr.WriteFile(filepath.Join("sys/bus/pci/devices", gpu.String(), "numa_node"), "not-a-number\n")
	d, warnings, err := host.ReadDeviceWarnings(tr.Root, gpu)
	if err != nil {
		t.Fatal(err)
	}
	if d.NUMANode != -1 || len(warnings) != 1 || !strings.Contains(warnings[0], gpu.String()) || !strings.Contains(warnings[0], "numa_node") {
		t.Errorf("numa %d, warnings %q; want -1 and one warning naming %s and numa_node", d.NUMANode, warnings, gpu)
	}
	if d2, err := host.ReadDevice(tr.Root, gpu); err != nil || !reflect.DeepEqual(d2, d) {
		t.Errorf("ReadDevice = %+v, %v; want the same device as ReadDeviceWarnings", d2, err)
	}

	dir := tr.Mbochs()
	if err := os.Remove(filepath.Join(tr.Dir(), dir, "mdev_supported_types", "mbochs-small", "device_api")); err != nil {
		t.Fatal(err)
	}
	parents, warnings, err := host.ReadMdevParents(tr.Root)
	if err != nil || len(parents) != 1 {
		t.Fatalf("ReadMdevParents = %+v, %v", parents, err)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "mbochs") || !strings.Contains(warnings[0], "mbochs-small/device_api") {
		t.Errorf("warnings = %q, want one naming mbochs and mbochs-small/device_api", warnings)
	}
}

// A malformed resource file is a warning that quotes the line as the kernel wrote it (the
// goldens' files are all well formed): too few fields, and fields that are not numbers.
func TestScanMalformedResourceWarning(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	a := tr.DatacenterGPU("0000:40:01.0", "0000:41:00.0", "vfio-pci", 1)
	b := tr.DatacenterGPU("0000:50:01.0", "0000:51:00.0", "vfio-pci", 1)
	tr.WriteFile(filepath.Join("sys/bus/pci/devices", a.String(), "resource"), "0x00000000f0000000 0x00000000f0ffffff\n")
	tr.WriteFile(filepath.Join("sys/bus/pci/devices", b.String(), "resource"), "0x00000000f0000000 0x00000000f0ffffff 0x0000000000040200\n0xzz 0x1\t0x200 \n")
	inv, devs, _ := scan(t, tr)
	dir := tr.Root.Sys("bus", "pci", "devices")
	want := []string{
		"0000:41:00.0: read " + dir + "/0000:41:00.0/resource: line 1: want \"start end flags\", got \"0x00000000f0000000 0x00000000f0ffffff\"",
		"0000:51:00.0: read " + dir + "/0000:51:00.0/resource: line 2: not hex numbers: \"0xzz 0x1\\t0x200 \"",
	}
	if !reflect.DeepEqual(inv.Warnings, want) {
		t.Errorf("warnings:\n%q\nwant\n%q", inv.Warnings, want)
	}
	if d := devs[b]; len(d.BARs) != 0 || devs[a].BARs != nil {
		t.Errorf("BARs of a bad resource file: %+v, %+v, want none", devs[a].BARs, d.BARs)
	}
}
