package host_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
)

// The readers package mdev uses between its writes: ReadFunctionLinks, ListPCIFunctions,
// DriverLoaded, ReadSRIOV, ReadVFs, SRIOV.VFAddresses, IsVendorVF,
// ReadCurrentVGPUType and ReadMdevInstances, on fake trees and the real-kernel snapshot.

// linksAgreeWithReadDevice checks that ReadFunctionLinks tells, for every function of the
// host, what ReadDevice tells: they share one reader, so they cannot disagree.
func linksAgreeWithReadDevice(t *testing.T, root host.Root) int {
	t.Helper()
	addrs, err := host.ListPCIFunctions(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		d, err := host.ReadDevice(root, a)
		if err != nil {
			t.Fatal(err)
		}
		l, err := host.ReadFunctionLinks(root, a)
		if err != nil {
			t.Fatal(err)
		}
		want := host.FunctionLinks{Driver: d.Driver, PhysFn: d.PhysFn, IOMMUGroup: d.IOMMUGroup, NUMANode: d.NUMANode}
		if !reflect.DeepEqual(l, want) {
			t.Errorf("%s: ReadFunctionLinks = %+v, ReadDevice says %+v", a, l, want)
		}
	}
	return len(addrs)
}

func TestReadFunctionLinks(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	pf := tr.NvidiaSRIOVGPU("0000:40:01.0", "0000:41:00.0", 1, 2, nil)
	gpu, _ := tr.ConsumerGPU("0000:00:01.0", "0000:01:00.0", "")
	l, err := host.ReadFunctionLinks(tr.Root, pf)
	if err != nil || l.Driver != "nvidia" || l.PhysFn != nil || l.NUMANode != 1 || l.IOMMUGroup != tr.Group(pf) {
		t.Errorf("PF links = %+v, %v; want nvidia, no physfn, node 1, group %d", l, err, tr.Group(pf))
	}
	vf := tr.VFAddress(pf, 1)
	if l, err := host.ReadFunctionLinks(tr.Root, vf); err != nil || l.PhysFn == nil || *l.PhysFn != pf || l.Driver != tr.Driver(vf) {
		t.Errorf("VF links = %+v, %v; want physfn %s, driver %q", l, err, pf, tr.Driver(vf))
	}
	if l, err := host.ReadFunctionLinks(tr.Root, gpu); err != nil || l.Driver != "" {
		t.Errorf("driverless GPU links = %+v, %v", l, err)
	}
	missing := host.MustParseAddress("0000:77:00.0")
	if l, err := host.ReadFunctionLinks(tr.Root, missing); !errors.Is(err, host.ErrNotFound) || l.IOMMUGroup != -1 || l.NUMANode != -1 {
		t.Errorf("missing device: %+v, %v; want ErrNotFound and -1s", l, err)
	}
	if n := linksAgreeWithReadDevice(t, tr.Root); n < 5 {
		t.Errorf("fake host lists %d functions", n)
	}
}

func TestReadFunctionLinksSnapshot(t *testing.T) {
	t.Parallel()
	root := labSnapshot(t)
	if n := linksAgreeWithReadDevice(t, root); n == 0 {
		t.Fatal("lab snapshot lists no PCI function")
	}
}

func TestListPCIFunctions(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	tr.DatacenterGPU("0000:40:01.0", "0000:41:00.0", "nvidia", 0)
	tr.ConsumerGPU("0000:00:01.0", "0000:01:00.0", "nouveau")
	got, err := host.ListPCIFunctions(tr.Root)
	if err != nil {
		t.Fatal(err)
	}
	want := tr.Addresses()
	sort.Slice(want, func(i, j int) bool { return want[i].String() < want[j].String() })
	if !slices.Equal(got, want) {
		t.Errorf("ListPCIFunctions = %v, want %v", got, want)
	}
	empty, _ := host.NewRoot(t.TempDir())
	if got, err := host.ListPCIFunctions(empty); err != nil || got == nil || len(got) != 0 {
		t.Errorf("root without a PCI bus: %v, %v; want [] and no error", got, err)
	}
}

func TestDriverLoadedFollowsDriversDir(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	tr.LoadDriver("vfio-pci")
	if !host.DriverLoaded(tr.Root, "vfio-pci") || host.DriverLoaded(tr.Root, "no-such-driver") {
		t.Error("DriverLoaded does not follow ROOT/sys/bus/pci/drivers")
	}
}

func TestReadSRIOV(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	pf := tr.NvidiaSRIOVGPU("0000:40:01.0", "0000:41:00.0", 1, 2, nil) // offset 4, stride 1
	sr, warnings, err := host.ReadSRIOV(tr.Root, pf)
	if err != nil || len(warnings) != 0 || sr == nil {
		t.Fatalf("ReadSRIOV = %+v, %v, %v", sr, warnings, err)
	}
	vfs := []host.Address{tr.VFAddress(pf, 0), tr.VFAddress(pf, 1)}
	if sr.TotalVFs != 32 || sr.NumVFs != 2 || sr.Offset != 4 || sr.Stride != 1 || !slices.Equal(sr.VFs, vfs) || sr.DriversAutoprobe == nil || !*sr.DriversAutoprobe {
		t.Errorf("SR-IOV = %+v", sr)
	}
	// VFAddresses names VFs that do not exist yet, as the fake kernel (and the real one) will.
	next, err := sr.VFAddresses(pf, 4)
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range next {
		if a != tr.VFAddress(pf, i) {
			t.Errorf("VF %d = %s, want %s", i, a, tr.VFAddress(pf, i))
		}
	}
	if got, err := host.ReadVFs(tr.Root, pf); err != nil || !slices.Equal(got, vfs) {
		t.Errorf("ReadVFs = %v, %v; want %v", got, err, vfs)
	}
	// After the kernel removes the VFs the live links are gone.
	k := hosttest.NewKernel(tr)
	if err := k.Write(context.Background(), tr.Root.PCIDevice(pf, "sriov_numvfs"), "0"); err != nil {
		t.Fatal(err)
	}
	if got, err := host.ReadVFs(tr.Root, pf); err != nil || len(got) != 0 {
		t.Errorf("ReadVFs after sriov_numvfs=0: %v, %v", got, err)
	}
	// A device without SR-IOV: nil, no error; a missing one: ErrNotFound.
	gpu, _ := tr.ConsumerGPU("0000:00:01.0", "0000:01:00.0", "nouveau")
	if sr, _, err := host.ReadSRIOV(tr.Root, gpu); sr != nil || err != nil {
		t.Errorf("no SR-IOV: %+v, %v", sr, err)
	}
	if _, _, err := host.ReadSRIOV(tr.Root, host.MustParseAddress("0000:77:00.0")); !errors.Is(err, host.ErrNotFound) {
		t.Errorf("missing device: %v", err)
	}
	// Without sriov_offset the addresses cannot be computed.
	if err := os.Remove(filepath.Join(tr.DevDir(pf), "sriov_offset")); err != nil {
		t.Fatal(err)
	}
	sr, _, _ = host.ReadSRIOV(tr.Root, pf)
	if _, err := sr.VFAddresses(pf, 1); !errors.Is(err, host.ErrUnsupported) {
		t.Errorf("VFAddresses without sriov_offset: %v", err)
	}
}

// On the real kernel the VFs computed from sriov_offset/sriov_stride are the ones its virtfn
// links name, and each VF's physfn link names the PF.
func TestReadSRIOVSnapshot(t *testing.T) {
	t.Parallel()
	root := labSnapshot(t)
	addrs, err := host.ListPCIFunctions(root)
	if err != nil {
		t.Fatal(err)
	}
	pfs := 0
	for _, a := range addrs {
		sr, warnings, err := host.ReadSRIOV(root, a)
		if err != nil || len(warnings) != 0 {
			t.Fatalf("%s: %v %v", a, warnings, err)
		}
		if sr == nil {
			continue
		}
		pfs++
		if sr.NumVFs == 0 || sr.Offset == 0 || sr.Stride == 0 || len(sr.VFs) != sr.NumVFs {
			t.Fatalf("%s: %+v (the lab enables VFs on its SR-IOV PF)", a, sr)
		}
		computed, err := sr.VFAddresses(a, sr.NumVFs)
		if err != nil || !slices.Equal(computed, sr.VFs) {
			t.Errorf("%s: VFAddresses = %v, %v; the kernel's virtfn links say %v", a, computed, err, sr.VFs)
		}
		if live, err := host.ReadVFs(root, a); err != nil || !slices.Equal(live, sr.VFs) {
			t.Errorf("%s: ReadVFs = %v, %v; want %v", a, live, err, sr.VFs)
		}
		for _, vf := range sr.VFs {
			l, err := host.ReadFunctionLinks(root, vf)
			if err != nil || l.PhysFn == nil || *l.PhysFn != a {
				t.Errorf("VF %s: links %+v, %v; want physfn %s", vf, l, err, a)
			}
		}
	}
	if pfs == 0 {
		t.Fatal("lab snapshot has no SR-IOV PF")
	}
}

func TestVendorVFReaders(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	pf := tr.NvidiaSRIOVGPU("0000:40:01.0", "0000:41:00.0", 1, 2, nil)
	a100 := tr.DatacenterGPU("0000:50:01.0", "0000:51:00.0", "nvidia", 0)
	tr.A100Mdev(a100)
	vf := tr.VFAddress(pf, 0)
	if !host.IsVendorVF(tr.Root, vf) || host.IsVendorVF(tr.Root, pf) || host.IsVendorVF(tr.Root, a100) {
		t.Error("IsVendorVF: want the VF only (not its PF, not an mdev parent)")
	}
	if cur, err := host.ReadCurrentVGPUType(tr.Root, vf); err != nil || cur != 0 {
		t.Errorf("current type of a fresh VF = %d, %v", cur, err)
	}
	k := hosttest.NewKernel(tr)
	if err := k.Write(context.Background(), tr.Root.PCIDevice(vf, "nvidia", "current_vgpu_type"), "1160"); err != nil {
		t.Fatal(err)
	}
	cur, err := host.ReadCurrentVGPUType(tr.Root, vf)
	v, verr := host.ReadVendorVGPU(tr.Root, vf)
	if err != nil || cur != 1160 || verr != nil || v.CurrentType != cur {
		t.Errorf("after assigning 1160: ReadCurrentVGPUType %d, %v; ReadVendorVGPU %+v, %v", cur, err, v, verr)
	}
	if _, err := host.ReadCurrentVGPUType(tr.Root, pf); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("current type of the PF: %v, want not-exist", err)
	}
}

func TestReadMdevInstances(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	dir := tr.Mbochs()
	empty, warnings, err := host.ReadMdevInstances(tr.Root)
	if err != nil || len(empty) != 0 || empty == nil || len(warnings) != 0 {
		t.Fatalf("no instances: %v, %v, %v", empty, warnings, err)
	}
	ids := []string{"bbbbbbbb-2222-3333-4444-555555555555", "aaaaaaaa-2222-3333-4444-555555555555"}
	tr.CreateMdev(dir, "mbochs-small", ids[0])
	tr.CreateMdev(dir, "mbochs-large", ids[1])
	got, warnings, err := host.ReadMdevInstances(tr.Root)
	if err != nil || len(warnings) != 0 || len(got) != 2 {
		t.Fatalf("ReadMdevInstances = %+v, %v, %v", got, warnings, err)
	}
	if got[0].UUID != ids[1] || got[1].UUID != ids[0] {
		t.Errorf("order %s, %s; want sorted by UUID", got[0].UUID, got[1].UUID)
	}
	for _, m := range got {
		one, _, err := host.ReadMdevInstance(tr.Root, m.UUID)
		if err != nil || !reflect.DeepEqual(one, m) {
			t.Errorf("%s: listed %+v, read alone %+v, %v", m.UUID, m, one, err)
		}
	}
	if got[0].Type != "mbochs-large" || got[0].Parent != "mbochs" {
		t.Errorf("instance %+v", got[0])
	}
	// A stray entry is a warning, not a failure.
	if err := os.Symlink("nowhere", tr.Root.Sys("bus", "mdev", "devices", "not-a-uuid")); err != nil {
		t.Fatal(err)
	}
	if got, warnings, err := host.ReadMdevInstances(tr.Root); err != nil || len(got) != 2 || len(warnings) != 1 {
		t.Errorf("with a stray entry: %d instances, warnings %q, %v", len(got), warnings, err)
	}
}

// On the real kernel every entry of /sys/bus/mdev/devices is listed, as ReadMdevInstance reads it.
func TestReadMdevInstancesSnapshot(t *testing.T) {
	t.Parallel()
	root := labSnapshot(t)
	ents, err := os.ReadDir(root.Sys("bus", "mdev", "devices"))
	if err != nil || len(ents) == 0 {
		t.Fatalf("lab snapshot: mdev instances %v, %v", ents, err)
	}
	got, warnings, err := host.ReadMdevInstances(root)
	if err != nil || len(got) != len(ents) {
		t.Fatalf("ReadMdevInstances = %+v, %v, %v; want %d", got, warnings, err, len(ents))
	}
	for i, m := range got {
		one, _, err := host.ReadMdevInstance(root, ents[i].Name())
		if err != nil || !reflect.DeepEqual(one, m) || m.Parent == "" || m.Type == "" {
			t.Errorf("%s: listed %+v, read alone %+v, %v", ents[i].Name(), m, one, err)
		}
	}
}
