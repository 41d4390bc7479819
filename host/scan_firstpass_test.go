package host_test

import (
	"encoding/json"
	"os"
	"reflect"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
)

// On both real-kernel snapshots, every PCI function (GPUs, VFs, bridges, host functions) reads
// the same whether its class and IDs come from its uevent file or, with uevent removed, from
// the class, vendor, device and subsystem_* files: Scan and ReadDevice take them from uevent
// (one open instead of five) and must not change a value by doing so.
func TestUeventIDsEqualSeparateFiles(t *testing.T) {
	t.Parallel()
	onRealSnapshots(t, func(t *testing.T, root host.Root) {
		addrs, err := host.ListPCIFunctions(root)
		if err != nil {
			t.Fatal(err)
		}
		read := func() (map[host.Address]host.Device, []byte) {
			devs := map[host.Address]host.Device{}
			for _, a := range addrs {
				d, err := host.ReadDevice(root, a)
				if err != nil {
					t.Fatalf("%s: %v", a, err)
				}
				devs[a] = d
			}
			inv, err := host.Scan(root)
			if err != nil {
				t.Fatal(err)
			}
			b, err := json.Marshal(inv)
			if err != nil {
				t.Fatal(err)
			}
			return devs, b
		}
		fromUevent, invUevent := read()
		vfs := 0
		for _, a := range addrs {
			if err := os.Remove(root.PCIDevice(a, "uevent")); err != nil {
				t.Fatalf("the snapshot must have a uevent file for every function: %v", err)
			}
			if fromUevent[a].PhysFn != nil {
				vfs++
			}
		}
		if len(addrs) < 10 || vfs == 0 {
			t.Fatalf("%d functions, %d VFs: the snapshot is not the one this test was written for", len(addrs), vfs)
		}
		fromFiles, invFiles := read()
		for _, a := range addrs {
			if !reflect.DeepEqual(fromUevent[a], fromFiles[a]) {
				t.Errorf("%s: from uevent %+v\nfrom the files %+v", a, fromUevent[a], fromFiles[a])
			}
		}
		if string(invUevent) != string(invFiles) {
			t.Errorf("Scan differs with uevent:\n%s\nwithout:\n%s", invUevent, invFiles)
		}
	})
}

// onRealSnapshots runs f on a fresh copy of each real-kernel snapshot: the shared fixture and
// the lab's (host/testdata).
func onRealSnapshots(t *testing.T, f func(t *testing.T, root host.Root)) {
	for _, c := range []struct{ name, tarball string }{
		{"shared", hosttest.SharedFixture(t, "qemu-q35-iommu-6.1.tar.gz")},
		{"lab", hosttest.RepoFile(t, "host/testdata/lab-snapshot.tar.gz")},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.tarball == "" {
				t.Fatal("host/testdata/lab-snapshot.tar.gz is missing: make lab-snapshot captures it")
			}
			f(t, hosttest.Snapshot(t, c.tarball))
		})
	}
}

// When Scan learns each IOMMU group's members from the functions' iommu_group links (read in
// its first pass) instead of listing ROOT/sys/kernel/iommu_groups/N/devices, on both
// real-kernel snapshots every group it reports has the PCI members ReadGroup lists there.
func TestScanGroupsEqualListedGroups(t *testing.T) {
	t.Parallel()
	onRealSnapshots(t, func(t *testing.T, root host.Root) {
		inv, err := host.ScanGroupsFromLinks(root, true)
		if err != nil {
			t.Fatal(err)
		}
		multi := 0
		for _, g := range inv.Groups {
			listed, err := host.ReadGroup(root, g.ID)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(addresses(g.Members), addresses(listed.Members)) {
				t.Errorf("group %d: Scan says %v, its devices directory %v", g.ID, addresses(g.Members), addresses(listed.Members))
			}
			if len(g.Members) > 1 {
				multi++
			}
		}
		if len(inv.Groups) < 3 || multi == 0 {
			t.Fatalf("%d groups, %d with several members: the snapshot is not the one this test was written for", len(inv.Groups), multi)
		}
	})
}

func addresses(ms []host.GroupMember) []host.Address {
	out := []host.Address{}
	for _, m := range ms {
		out = append(out, m.Address)
	}
	return out
}

// Every device Scan reports is the device ReadDevice reads alone, which takes nothing from
// another function: on both real-kernel snapshots (IDs and driver from uevent, groups from
// links) here, and in TestScanGolden on the generated 64-GPU host (512 VFs, whose PF Scan takes
// from their PF's virtfnN links instead of reading their physfn links; NUMA nodes'
// local_cpulist read once), whose tree takes seconds to write. A cut in Scan that changes any
// field of any device, where the goldens do not look, fails here.
func TestScanDevicesEqualReadDevice(t *testing.T) {
	t.Parallel()
	onRealSnapshots(t, func(t *testing.T, root host.Root) { scanEqualsReadDevice(t, root, 0) })
}

// scanEqualsReadDevice checks TestScanDevicesEqualReadDevice's claim on root, where Scan must
// report at least wantVFs VFs.
func scanEqualsReadDevice(t *testing.T, root host.Root, wantVFs int) {
	t.Helper()
	inv, err := host.Scan(root)
	if err != nil {
		t.Fatal(err)
	}
	vfs := 0
	for _, d := range inv.Devices {
		alone, err := host.ReadDevice(root, d.Address)
		if err != nil {
			t.Fatalf("%s: %v", d.Address, err)
		}
		d.Companions, d.Mdev = nil, nil // what only Scan fills, from the rest of the host
		if !reflect.DeepEqual(d, alone) {
			t.Errorf("%s: Scan %+v\nReadDevice %+v", d.Address, d, alone)
		}
		if d.PhysFn != nil {
			vfs++
		}
	}
	if vfs < wantVFs {
		t.Fatalf("%d of Scan's devices are VFs, want at least %d: not the host this test was written for", vfs, wantVFs)
	}
}

// Scan takes a VF's PF from the PF's virtfnN link (the kernel makes it and the VF's physfn
// link together), so it does not read physfn of a VF its PF named: here the VF's own link is
// gone and Scan still reports its PF, where ReadDevice, reading the VF alone, finds none.
func TestScanTakesVFsPFFromVirtfn(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	pf := tr.NvidiaSRIOVGPU("0000:40:01.0", "0000:41:00.0", 1, 2, nil)
	vf := tr.VFAddress(pf, 1)
	must(t, os.Remove(tr.Root.PCIDevice(vf, "physfn")))
	inv, err := host.Scan(tr.Root)
	if err != nil {
		t.Fatal(err)
	}
	var got *host.Address
	found := false
	for _, d := range inv.Devices {
		if d.Address == vf {
			got, found = d.PhysFn, true
		}
	}
	if !found || got == nil || *got != pf {
		t.Fatalf("Scan's VF %s (found %v): physfn %v, want %s from %s/virtfn1", vf, found, got, pf, pf)
	}
	if alone, err := host.ReadDevice(tr.Root, vf); err != nil || alone.PhysFn != nil {
		t.Fatalf("ReadDevice(%s) = physfn %v, %v; want none: the link is gone", vf, alone.PhysFn, err)
	}
}
