package mdev

import (
	"errors"
	"reflect"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
)

// Parent reads a named mdev parent alone (host.MdevParentNamed): every parent it returns must
// be the one Parents lists, for virtual and PCI mdev parents and for a vendor-VFIO PF named by
// itself or by one of its VFs; names that are no parent still get the full list's error.
func TestParentNamedIsParentsEntry(t *testing.T) {
	tr := hosttest.New(t)
	tr.Mbochs()
	tr.IntelGVTg()
	gpu := tr.DatacenterGPU("0000:20:01.0", "0000:21:00.0", "nvidia", 1)
	tr.A100Mdev(gpu)
	pf := tr.NvidiaSRIOVGPU("0000:40:01.0", "0000:41:00.0", 1, 4, nil)
	m, _ := newMgr(tr)
	all, err := m.Parents()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 4 {
		t.Fatalf("parents %+v", all)
	}
	for _, want := range all {
		got, err := m.Parent(want.Name)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("Parent(%s) = %+v, %v; Parents has %+v", want.Name, got, err, want)
		}
	}
	// Short PCI addresses, and a VF naming its PF's vendor-VFIO parent.
	if p, err := m.Parent("21:00.0"); err != nil || p.Name != gpu.String() || p.NUMA != 1 || p.Driver != "nvidia" {
		t.Fatalf("Parent(21:00.0) = %+v, %v", p, err)
	}
	if p, err := m.Parent(tr.VFAddress(pf, 1).String()); err != nil || p.Name != pf.String() || p.Backend != BackendNvidiaVFIO {
		t.Fatalf("Parent(VF) = %+v, %v", p, err)
	}
	for _, bad := range []string{"nosuch", "../mbochs", "mbochs/mdev_supported_types", ".", ""} {
		if _, err := m.Parent(bad); !errors.Is(err, host.ErrNotFound) {
			t.Fatalf("Parent(%q): %v, want ErrNotFound", bad, err)
		}
	}
}
