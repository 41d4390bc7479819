package mdev

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/mig"
)

// h100MIG is an H100-SXM5-80GB on the vendor-VFIO interface with 8 VFs, offering NVIDIA's
// MIG-backed C-series types (named as in NVIDIA's vGPU documentation, one per GPU-instance
// profile) and a time-sliced one.
func h100MIG(t *testing.T) (*hosttest.Tree, host.Address) {
	tr := hosttest.New(t)
	pf := tr.NvidiaSRIOVGPU("0000:80:01.0", "0000:81:00.0", 1, 8, []hosttest.NvidiaVGPUType{
		{ID: 1210, Name: "NVIDIA H100-1-10C", MaxPerGPU: 7, MIGProfile: "1g.10gb"},
		{ID: 1211, Name: "NVIDIA H100-2-20C", MaxPerGPU: 3, MIGProfile: "2g.20gb"},
		{ID: 1212, Name: "NVIDIA H100-3-40C", MaxPerGPU: 2, MIGProfile: "3g.40gb"},
		{ID: 1214, Name: "NVIDIA H100-7-80C", MaxPerGPU: 1, MIGProfile: "7g.80gb"},
		{ID: 1213, Name: "NVIDIA H100-80C", MaxPerGPU: 1},
	})
	return tr, pf
}

func creatableIDs(t *testing.T, m *Manager, vf host.Address) string {
	t.Helper()
	v, err := m.ReadVendorVF(vf)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, ty := range v.Creatable {
		ids = append(ids, ty.ID)
	}
	return strings.Join(ids, ",")
}

// Once GPU instances exist, the VFs list the MIG-backed types of their profiles (and only
// while one is unused); a MIG-backed type is created through the same vendor-VFIO path as any
// other; placement counts GPU instances by the GPU's fixed slices.
func TestVendorMIGBackedTypes(t *testing.T) {
	tr, pf := h100MIG(t)
	m, _ := newMgr(tr)
	vf0 := tr.VFAddress(pf, 0)
	if got := creatableIDs(t, m, vf0); got != "1213" {
		t.Fatalf("MIG off: VF lists %s, want only the time-sliced 1213", got)
	}
	tr.SetMIGInstances(pf, []string{"3g.40gb", "3g.40gb"})
	if got := creatableIDs(t, m, vf0); got != "1212" {
		t.Fatalf("two 3g.40gb GPU instances: VF lists %s, want 1212 (H100-3-40C)", got)
	}
	parents, err := m.Parents()
	if err != nil {
		t.Fatal(err)
	}
	// Eight free VFs list H100-3-40C, but an H100 holds two 3g.40gb: placement says so.
	_, err = Place(Request{Profile: "H100-3-40C", Count: 3, NUMA: -1}, parents)
	if !errors.Is(err, host.ErrBusy) || !strings.Contains(err.Error(), "0000:81:00.0 has 2 free (MIG: 2× 3g.40gb fit on its slices)") {
		t.Fatalf("place 3× H100-3-40C: %v", err)
	}
	pl, err := Place(Request{Profile: "H100-3-40C", Count: 2, NUMA: -1}, parents)
	if err != nil || len(pl.Assignments) != 1 || pl.Assignments[0].Count != 2 {
		t.Fatalf("place 2× H100-3-40C: %+v, %v", pl, err)
	}
	ins, err := m.Create(context.Background(), CreateRequest{Parent: pf.String(), Profile: "H100-3-40C", Count: 2, Owner: "train"})
	if err != nil || len(ins) != 2 {
		t.Fatalf("create 2× H100-3-40C: %v", err)
	}
	for _, in := range ins {
		if in.Backend != BackendNvidiaVFIO || current(tr, *in.VF) != "1212" {
			t.Errorf("instance %+v: current_vgpu_type %s, want 1212 on the vendor-VFIO backend", in, current(tr, *in.VF))
		}
	}
	if got := creatableIDs(t, m, tr.VFAddress(pf, 5)); got != "" {
		t.Errorf("both GPU instances used: a free VF still lists %q", got)
	}
	// A third is refused and changes nothing. (With every GPU instance used no VF lists the type
	// any more, so sysfs no longer gives its name: the refusal is "not offered".)
	_, err = m.Create(context.Background(), CreateRequest{Parent: pf.String(), Profile: "H100-3-40C", Count: 1, Owner: "more"})
	if err == nil {
		t.Error("a third H100-3-40C was created")
	}
	for i := 2; i < 8; i++ {
		if c := current(tr, tr.VFAddress(pf, i)); c != "0" {
			t.Errorf("VF %d holds type %s after the refused create", i, c)
		}
	}
	parents, _ = m.Parents()
	if _, err := Place(Request{Profile: "H100-3-40C", Count: 1, NUMA: -1}, parents); err == nil {
		t.Error("placement found room for a third H100-3-40C")
	}
}

// The case on parents as sysfs reports them, without NVML: three free instances of
// A100D-3-40C (3g.40gb-backed) on one A100 are one more than its slices hold.
func TestPlaceMIGBackedOnA100(t *testing.T) {
	a := host.MustParseAddress("0000:41:00.0")
	p := Parent{Name: a.String(), Address: &a, Backend: BackendNvidiaVFIO, NUMA: 0, Types: []Type{
		{ID: "1300", Name: "NVIDIA A100D-3-40C", Available: 3, Instances: []string{}},
		{ID: "1301", Name: "NVIDIA A100D-4-40C", Available: 3, Instances: []string{}},
		{ID: "1302", Name: "NVIDIA A100D-1-10C", Available: 3, Instances: []string{}},
	}}
	_, err := Place(Request{Profile: "A100D-3-40C", Count: 3, NUMA: -1}, []Parent{p})
	if !errors.Is(err, host.ErrBusy) || !strings.Contains(err.Error(), "2× 3g.40gb fit") {
		t.Fatalf("place 3× A100D-3-40C: %v", err)
	}
	if _, err := Place(Request{Profile: "A100D-3-40C", Count: 2, NUMA: -1}, []Parent{p}); err != nil {
		t.Errorf("place 2× A100D-3-40C: %v", err)
	}
	// A 4g.40gb already running leaves slices 4-7: one 3g.40gb.
	p.Types[1].Instances = []string{"0000:41:00.4"}
	_, err = Place(Request{Profile: "A100D-3-40C", Count: 2, NUMA: -1}, []Parent{p})
	if !errors.Is(err, host.ErrBusy) || !strings.Contains(err.Error(), "1× 3g.40gb fit beside the GPU instances of its 1 running") {
		t.Errorf("place 2× A100D-3-40C beside a 4g: %v", err)
	}
	// Time-sliced types are not touched.
	p.Types = append(p.Types, Type{ID: "1303", Name: "NVIDIA A100D-10C", Available: 8, Instances: []string{}})
	if _, err := Place(Request{Profile: "A100D-10C", Count: 8, NUMA: -1}, []Parent{p}); err != nil {
		t.Errorf("time-sliced: %v", err)
	}
}

// With NVML's view of the GPU, placement counts exactly: two free 1g.10gb GPU instances at
// slices 0 and 1 leave room for no 3g.40gb at 0-3, so beside the free 3g.40gb at 4-7 only one
// fits, where the documented geometry alone (nothing running) would say two.
func TestPlaceMIGBackedWithNVML(t *testing.T) {
	a := host.MustParseAddress("0000:41:00.0")
	p := Parent{Name: a.String(), Address: &a, Backend: BackendNvidiaVFIO, NUMA: 0, Types: []Type{
		{ID: "1212", Name: "NVIDIA H100-3-40C", Available: 6, Instances: []string{}},
		{ID: "1210", Name: "NVIDIA H100-1-10C", Available: 6, Instances: []string{}},
	}}
	g, err := mig.DocumentedGPU(a.String(), 7, []string{"1g.10gb", "3g.40gb"})
	if err != nil {
		t.Fatal(err)
	}
	g.Instances = []mig.Instance{
		{ID: 1, Profile: "1g.10gb", Placement: mig.Placement{Start: 0, Size: 1}},
		{ID: 2, Profile: "1g.10gb", Placement: mig.Placement{Start: 1, Size: 1}},
		{ID: 3, Profile: "3g.40gb", Placement: mig.Placement{Start: 4, Size: 4}},
	}
	st := &mig.State{GPUs: []mig.GPU{g}}
	if _, err := Place(Request{Profile: "H100-3-40C", Count: 2, NUMA: -1}, []Parent{p}); err != nil {
		t.Fatalf("without NVML (documented geometry): %v", err)
	}
	_, err = PlaceWithMIG(Request{Profile: "H100-3-40C", Count: 2, NUMA: -1}, []Parent{p}, st)
	if !errors.Is(err, host.ErrBusy) || !strings.Contains(err.Error(), "has 1 free (MIG (NVML): 1 free 3g.40gb GPU instance(s), room for 0 more)") {
		t.Errorf("with NVML: %v", err)
	}
	// A running H100-1-10C uses one of the two 1g.10gb instances: one is free, and two more fit
	// (slices 2 and 3; the 3g.40gb holds 4-7).
	p.Types[1].Instances = []string{"0000:41:00.4"}
	pl, err := PlaceWithMIG(Request{Profile: "H100-1-10C", Count: 3, NUMA: -1}, []Parent{p}, st)
	if err != nil || pl.Assignments[0].Free != 3 {
		t.Errorf("1g.10gb with NVML: %+v, %v; want 3 free (1 unused instance + slices 2 and 3)", pl, err)
	}
}
