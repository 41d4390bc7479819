package mdev

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
)

// l40s adds an L40S with 6 VFs using NVIDIA's vendor-specific VFIO files.
func l40s(t *testing.T) (*hosttest.Tree, host.Address) {
	tr := hosttest.New(t)
	pf := tr.NvidiaSRIOVGPU("0000:40:01.0", "0000:41:00.0", 1, 6, nil)
	return tr, pf
}

func current(tr *hosttest.Tree, vf host.Address) string {
	return strings.TrimSpace(tr.ReadFile("sys/bus/pci/devices/" + vf.String() + "/nvidia/current_vgpu_type"))
}

func TestVendorParentsAndTypes(t *testing.T) {
	tr, pf := l40s(t)
	m, _ := newMgr(tr)
	if !m.IsVendorVF(tr.VFAddress(pf, 0)) || m.IsVendorVF(pf) {
		t.Fatal("vendor VF detection")
	}
	ps, err := m.Parents()
	if err != nil || len(ps) != 1 {
		t.Fatalf("parents %+v %v", ps, err)
	}
	p := ps[0]
	if p.Name != pf.String() || p.Backend != BackendNvidiaVFIO || p.NUMA != 1 || p.Driver != "nvidia" || len(p.Types) != 4 {
		t.Fatalf("parent %+v", p)
	}
	ty, ok := FindType(p, "L40S-8Q")
	if !ok || ty.ID != "1160" || ty.Name != "NVIDIA L40S-8Q" || ty.Available != 6 {
		t.Fatalf("L40S-8Q = %+v", ty)
	}
	if _, ok := FindType(p, "1163"); !ok {
		t.Fatal("type by ID")
	}
	// A VF's address names its GPU.
	if p2, err := m.Parent(tr.VFAddress(pf, 3).String()); err != nil || p2.Name != pf.String() {
		t.Fatalf("parent by VF: %v %+v", err, p2)
	}
}

func TestVendorCreateShrinksAndConverges(t *testing.T) {
	tr, pf := l40s(t)
	m, k := newMgr(tr)
	ctx := context.Background()
	got, err := m.Create(ctx, CreateRequest{Parent: pf.String(), Profile: "NVIDIA L40S-8Q", Count: 2, Owner: "cad-1"})
	if err != nil {
		t.Fatal(err)
	}
	vf0, vf1 := tr.VFAddress(pf, 0), tr.VFAddress(pf, 1)
	if len(got) != 2 || *got[0].VF != vf0 || *got[1].VF != vf1 || current(tr, vf0) != "1160" || current(tr, vf1) != "1160" {
		t.Fatalf("created %+v", got)
	}
	// The other types vanished from every free VF (one type per GPU).
	p, _ := m.Parent(pf.String())
	if _, ok := FindType(p, "L40S-1Q"); ok {
		t.Fatalf("L40S-1Q still creatable while 8Q runs: %+v", p.Types)
	}
	if len(p.Running) != 1 || p.Running[0] != "1160" {
		t.Fatalf("running %v", p.Running)
	}
	// Re-run converges: no new writes.
	before := len(k.Writes())
	again, err := m.Create(ctx, CreateRequest{Parent: pf.String(), Profile: "L40S-8Q", Count: 2, Owner: "cad-1"})
	if err != nil || len(k.Writes()) != before || *again[1].VF != vf1 {
		t.Fatalf("re-run: %v, %d new writes", err, len(k.Writes())-before)
	}
	list, _ := m.Instances()
	if len(list) != 2 || list[0].Owner != "cad-1" || list[0].TypeName != "NVIDIA L40S-8Q" || !list[0].Active || !list[0].Defined {
		t.Fatalf("instances %+v", list)
	}
}

func TestVendorAllOrNone(t *testing.T) {
	tr, pf := l40s(t)
	m, _ := newMgr(tr)
	// L40S-8Q allows 4 per GPU; 6 free VFs list it, so the shortfall shows on the 5th VF.
	_, err := m.Create(context.Background(), CreateRequest{Parent: pf.String(), Profile: "L40S-8Q", Count: 5, Owner: "big"})
	if !errors.Is(err, host.ErrBusy) {
		t.Fatalf("err = %v", err)
	}
	for i := 0; i < 6; i++ {
		if c := current(tr, tr.VFAddress(pf, i)); c != "0" {
			t.Fatalf("VF %d kept type %s after a failed all-or-none create", i, c)
		}
	}
	if list, _ := m.Instances(); len(list) != 0 {
		t.Fatalf("state kept %+v", list)
	}
	// An injected kernel error on the second assignment also reverts the first.
	k := hosttest.NewKernel(tr)
	m.W = k
	n := 0
	k.FailWrite = func(path, value string) error {
		if strings.HasSuffix(path, "current_vgpu_type") && value != "0" {
			n++
			if n == 2 {
				return syscall.EIO
			}
		}
		return nil
	}
	if _, err := m.Create(context.Background(), CreateRequest{Parent: pf.String(), Profile: "1155", Count: 2}); !errors.Is(err, syscall.EIO) {
		t.Fatalf("err = %v", err)
	}
	if c := current(tr, tr.VFAddress(pf, 0)); c != "0" {
		t.Fatalf("VF0 kept %s", c)
	}
}

func TestVendorReleaseGuard(t *testing.T) {
	tr, pf := l40s(t)
	m, k := newMgr(tr)
	ctx := context.Background()
	vf5 := tr.VFAddress(pf, 5)
	// Someone else set a type on VF5.
	if err := k.Write(ctx, tr.Root.PCIDevice(vf5, "nvidia", "current_vgpu_type"), "1155"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Remove(ctx, []string{vf5.String()}, RemoveOptions{}); !errors.Is(err, host.ErrRefused) {
		t.Fatalf("clearing a foreign type: %v", err)
	}
	if current(tr, vf5) != "1155" {
		t.Fatal("foreign type cleared")
	}
	mine, err := m.Create(ctx, CreateRequest{Parent: pf.String(), Profile: "L40S-1Q", Owner: "a"})
	if err != nil {
		t.Fatal(err)
	}
	// Another owner's release refuses it; the right owner's clears it.
	if _, err := m.RemoveOwner(ctx, "b", RemoveOptions{}); err != nil {
		t.Fatalf("owner b has nothing: %v", err)
	}
	if _, err := m.Remove(ctx, []string{mine[0].ID()}, RemoveOptions{Owner: "b"}); !errors.Is(err, host.ErrRefused) {
		t.Fatalf("other owner: %v", err)
	}
	m.Domains = fakeDomains{mine[0].ID(): {"a"}}
	if _, err := m.RemoveOwner(ctx, "a", RemoveOptions{}); !errors.Is(err, host.ErrRefused) {
		t.Fatalf("in use by a domain: %v", err)
	}
	m.Domains = nil
	if rm, err := m.RemoveOwner(ctx, "a", RemoveOptions{}); err != nil || len(rm) != 1 || current(tr, *mine[0].VF) != "0" {
		t.Fatalf("release: %v %+v", err, rm)
	}
	if current(tr, vf5) != "1155" {
		t.Fatal("release touched a foreign VF")
	}
	// --force clears a foreign type.
	if _, err := m.Remove(ctx, []string{vf5.String()}, RemoveOptions{Force: true}); err != nil || current(tr, vf5) != "0" {
		t.Fatalf("force: %v", err)
	}
}

func TestLibvirtUsers(t *testing.T) {
	vf := host.MustParseAddress("0000:41:00.5")
	l := LibvirtUsers{Conn: fakeLister{
		"desk": `<domain type='kvm'><name>desk</name><devices><hostdev mode='subsystem' type='mdev' model='vfio-pci'><source><address uuid='83C32DF7-D52E-4EC1-9668-1F3C7E4DF107'/></source></hostdev></devices></domain>`,
		"cad":  `<domain type='kvm'><name>cad</name><devices><hostdev mode='subsystem' type='pci' managed='no'><source><address domain='0x0000' bus='0x41' slot='0x00' function='0x5'/></source></hostdev></devices></domain>`,
		"idle": `<domain type='kvm'><name>idle</name><devices><hostdev mode='subsystem' type='pci' managed='no'><source><address domain='0x0000' bus='0x41' slot='0x00' function='0x4'/></source></hostdev></devices></domain>`,
		// The UUID in its description and in a longer UUID's text, but no hostdev of it: not a user.
		"notes": `<domain type='kvm'><name>notes</name><description>was given 83c32df7-d52e-4ec1-9668-1f3c7e4df107 once</description><devices><hostdev mode='subsystem' type='mdev' model='vfio-pci'><source><address uuid='183c32df7-d52e-4ec1-9668-1f3c7e4df1070'/></source></hostdev></devices></domain>`,
	}}
	got, err := l.DomainsUsing(context.Background(), Instance{UUID: "83c32df7-d52e-4ec1-9668-1f3c7e4df107"})
	if err != nil || len(got) != 1 || got[0] != "desk" {
		t.Fatalf("mdev users %v %v", got, err)
	}
	got, err = l.DomainsUsing(context.Background(), Instance{VF: &vf})
	if err != nil || len(got) != 1 || got[0] != "cad" {
		t.Fatalf("VF users %v %v", got, err)
	}
}

type fakeLister map[string]string

func (f fakeLister) ListDomainXMLs(context.Context) (map[string]string, error) { return f, nil }

// TestVendorCreatePinnedVF: a caller that allocated the VF itself (apply) gets exactly that
// VF, not the first free one; a re-run converges; a pinned VF that holds a type or is recorded
// for another owner is ErrBusy and nothing is written.
func TestVendorCreatePinnedVF(t *testing.T) {
	tr, pf := l40s(t)
	m, k := newMgr(tr)
	ctx := context.Background()
	vf2 := tr.VFAddress(pf, 2)
	req := CreateRequest{Parent: vf2.String(), Profile: "1160", Count: 1, Owner: "vm-a", VFs: []host.Address{vf2}}
	got, err := m.Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || *got[0].VF != vf2 || current(tr, vf2) != "1160" || current(tr, tr.VFAddress(pf, 0)) != "0" {
		t.Fatalf("pinned create took %+v; VF2 %s, VF0 %s", got, current(tr, vf2), current(tr, tr.VFAddress(pf, 0)))
	}
	n := len(k.Writes())
	if _, err := m.Create(ctx, req); err != nil || len(k.Writes()) != n {
		t.Fatalf("re-run: %v, %d new writes", err, len(k.Writes())-n)
	}
	// Another owner pinning the same VF.
	_, err = m.Create(ctx, CreateRequest{Parent: pf.String(), Profile: "1160", Count: 1, Owner: "vm-b", VFs: []host.Address{vf2}})
	if !errors.Is(err, host.ErrBusy) || !strings.Contains(err.Error(), `"vm-a"`) {
		t.Fatalf("pinning another owner's VF: %v, want ErrBusy naming vm-a", err)
	}
	// A VF that another tool set.
	vf4 := tr.VFAddress(pf, 4)
	if err := k.Write(ctx, m.Root.PCIDevice(vf4, "nvidia", "current_vgpu_type"), "1160"); err != nil {
		t.Fatal(err)
	}
	n = len(k.Writes())
	_, err = m.Create(ctx, CreateRequest{Parent: pf.String(), Profile: "1160", Count: 1, Owner: "vm-c", VFs: []host.Address{vf4}})
	if !errors.Is(err, host.ErrBusy) || len(k.Writes()) != n {
		t.Fatalf("pinning a VF that holds a type: %v, %d writes", err, len(k.Writes())-n)
	}
	// Pinned VFs must match the count.
	if _, err := m.Create(ctx, CreateRequest{Parent: pf.String(), Profile: "1160", Count: 2, VFs: []host.Address{vf2}}); !errors.Is(err, host.ErrInvalid) {
		t.Fatalf("2 instances, 1 pinned VF: %v", err)
	}
}

// swallowVGPU is a kernel whose nvidia driver accepts current_vgpu_type writes on one VF
// without taking the type (the write succeeds, the file still reads 0).
type swallowVGPU struct {
	*hosttest.Kernel
	vf string
}

func (s swallowVGPU) Write(ctx context.Context, path, value string) error {
	if strings.HasSuffix(path, s.vf+"/nvidia/current_vgpu_type") && value != "0" {
		return nil
	}
	return s.Kernel.Write(ctx, path, value)
}

// TestVendorAssignReadBack: an assignment is verified by reading current_vgpu_type back; a
// write the driver accepted but did not apply fails the create (exit 5, naming the value
// read) and reverts the VFs this call already assigned.
func TestVendorAssignReadBack(t *testing.T) {
	tr, pf := l40s(t)
	m, _ := newMgr(tr)
	m.W = swallowVGPU{hosttest.NewKernel(tr), tr.VFAddress(pf, 1).String()}
	_, err := m.Create(context.Background(), CreateRequest{Parent: pf.String(), Profile: "L40S-8Q", Count: 2, Owner: "vm"})
	if !errors.Is(err, host.ErrBusy) || !strings.Contains(err.Error(), "current_vgpu_type reads 0") || !strings.Contains(err.Error(), tr.VFAddress(pf, 1).String()) {
		t.Fatalf("create with a swallowed assignment: %v", err)
	}
	for i := 0; i < 2; i++ {
		if c := current(tr, tr.VFAddress(pf, i)); c != "0" {
			t.Fatalf("VF %d kept type %s", i, c)
		}
	}
	if list, _ := m.Instances(); len(list) != 0 {
		t.Fatalf("state kept %+v", list)
	}
}

// TestProfileNamesBothBackends: every way users name a profile resolves to the same type on
// the mdev backend (A100 on vGPU 16) and on the vendor-VFIO one (L40S, H100 with MIG-backed
// names), by ResolveType as create does; an unknown name lists the parent's types.
func TestProfileNamesBothBackends(t *testing.T) {
	tr := hosttest.New(t)
	tr.A100Mdev(tr.DatacenterGPU("0000:20:01.0", "0000:21:00.0", "nvidia", 0))
	l40 := tr.NvidiaSRIOVGPU("0000:40:01.0", "0000:41:00.0", 0, 2, nil)
	h100 := tr.NvidiaSRIOVGPU("0000:80:01.0", "0000:81:00.0", 1, 2, []hosttest.NvidiaVGPUType{
		{ID: 1210, Name: "NVIDIA H100-1-10C", MaxPerGPU: 7}, {ID: 1213, Name: "NVIDIA H100-80C", MaxPerGPU: 1}})
	m, _ := newMgr(tr)
	for _, c := range []struct{ parent, profile, want string }{
		{"0000:21:00.0", "A100-4C", "nvidia-471"},
		{"0000:21:00.0", "GRID A100-4C", "nvidia-471"},
		{"0000:21:00.0", "grid a100-4c", "nvidia-471"},
		{"0000:21:00.0", "nvidia-471", "nvidia-471"},
		{l40.String(), "L40S-8Q", "1160"},
		{l40.String(), "NVIDIA L40S-8Q", "1160"},
		{l40.String(), "1160", "1160"},
		{tr.VFAddress(l40, 1).String(), "L40S-8Q", "1160"}, // a VF names its GPU
		{h100.String(), "NVIDIA H100-1-10C", "1210"},
		{h100.String(), "H100-1-10C", "1210"},
	} {
		_, ty, err := m.ResolveType(c.parent, c.profile)
		if err != nil || ty.ID != c.want {
			t.Errorf("%s on %s: %q, %v; want %s", c.profile, c.parent, ty.ID, err, c.want)
		}
	}
	_, _, err := m.ResolveType(h100.String(), "H100-2-20C")
	if !errors.Is(err, host.ErrNotFound) || !strings.Contains(err.Error(), "1210 (NVIDIA H100-1-10C)") {
		t.Fatalf("unknown profile: %v", err)
	}
}

// A create past capacity says what became of the call's earlier assignments: undone on a real
// run, nothing changed in a dry run (which only recorded writes).
func TestVendorPastCapacityMessage(t *testing.T) {
	tr, pf := l40s(t)
	m, _ := newMgr(tr)
	_, err := m.Create(context.Background(), CreateRequest{Parent: pf.String(), Profile: "L40S-8Q", Count: 5, Owner: "big"})
	if !errors.Is(err, host.ErrBusy) || !strings.Contains(err.Error(), "undid the 4 VF assignment(s) this call made") {
		t.Fatalf("real run past capacity: %v, want the 4 undone assignments named", err)
	}
	rec := &host.Recorder{}
	dry := New(tr.Root, rec)
	dry.DryRun = true
	// A dry run cannot see the driver stop listing the type, so it runs out at the 7th of 6 VFs.
	_, err = dry.Create(context.Background(), CreateRequest{Parent: pf.String(), Profile: "L40S-8Q", Count: 7, Owner: "big"})
	if !errors.Is(err, host.ErrBusy) || strings.Contains(err.Error(), "undid") || !strings.Contains(err.Error(), "nothing was changed (dry run") {
		t.Fatalf("dry run past capacity: %v, want \"nothing was changed (dry run\" and no \"undid\"", err)
	}
	for i := 0; i < 6; i++ {
		if c := current(tr, tr.VFAddress(pf, i)); c != "0" {
			t.Fatalf("dry run changed VF %d to type %s", i, c)
		}
	}
	// Nothing assigned before the shortfall: nothing to undo, and the message says so.
	if _, err := m.Create(context.Background(), CreateRequest{Parent: pf.String(), Profile: "L40S-8Q", Count: 4, Owner: "a"}); err != nil {
		t.Fatal(err)
	}
	_, err = m.Create(context.Background(), CreateRequest{Parent: pf.String(), Profile: "1160", Count: 1, Owner: "b"})
	if !errors.Is(err, host.ErrBusy) || strings.Contains(err.Error(), "undid") || !strings.HasSuffix(err.Error(), "; nothing was changed") {
		t.Fatalf("a 5th L40S-8Q on a full GPU: %v, want \"nothing was changed\"", err)
	}
}
