package mdev

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"syscall"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/internal/revert"
	"github.com/vgpu-host/vgpu-host/vfio"
)

// The NVIDIA vendor-specific VFIO backend (vGPU 17+, Ada/Hopper/Blackwell, kernel >= 6.8).
// Each VF of the GPU carries, while bound to the nvidia driver:
//
//	$ cat /sys/bus/pci/devices/0000:41:00.4/nvidia/creatable_vgpu_types
//	ID    : vGPU Name
//	1155  : NVIDIA L40S-1Q
//	$ echo 1155 > /sys/bus/pci/devices/0000:41:00.4/nvidia/current_vgpu_type   # 0 clears
//
// The creatable list shrinks on every sibling VF as types are assigned (one type per GPU at a
// time, limited instances), so it is re-read per VF. The VF stays on nvidia and is attached
// to a guest as a PCI hostdev with managed='no'.

// VendorVF is one VF of a vendor-VFIO GPU as sysfs shows it now.
type VendorVF struct {
	Address host.Address `json:"address"`
	PF      host.Address `json:"physfn"`
	Driver  string       `json:"driver"`
	// Current is the assigned type ID (0 = none).
	Current   int    `json:"current_vgpu_type"`
	Creatable []Type `json:"creatable"`
}

// IsVendorVF reports whether a is a VF using NVIDIA's vendor-specific VFIO interface
// (host.IsVendorVF).
func (m *Manager) IsVendorVF(a host.Address) bool { return host.IsVendorVF(m.Root, a) }

// ReadVendorVF reads a VF's vendor vGPU files (host.ReadVendorVGPU) and links.
func (m *Manager) ReadVendorVF(a host.Address) (VendorVF, error) {
	l, err := host.ReadFunctionLinks(m.Root, a)
	if err != nil || l.PhysFn == nil {
		return VendorVF{}, fmt.Errorf("vendor vGPU VF %s: %w: no physfn link at %s (not a VF)", a, host.ErrNotFound, m.Root.PCIDevice(a, "physfn"))
	}
	v := VendorVF{Address: a, PF: *l.PhysFn, Driver: l.Driver}
	hv, err := host.ReadVendorVGPU(m.Root, a)
	switch {
	case hv == nil && err == nil:
		return VendorVF{}, fmt.Errorf("vendor vGPU VF %s: %w: no %s", a, host.ErrNotFound, m.Root.PCIDevice(a, "nvidia", "creatable_vgpu_types"))
	case hv != nil && err != nil: // current_vgpu_type is unreadable: not (or no longer) a vendor VF
		return VendorVF{}, fmt.Errorf("vendor vGPU VF %s: %w: %w", a, host.ErrNotFound, err)
	case err != nil:
		return VendorVF{}, fmt.Errorf("vendor vGPU VF %s: %w", a, err)
	}
	v.Current = hv.CurrentType
	v.Creatable = vendorTypes(hv.Creatable)
	return v, nil
}

// vendorTypes is creatable_vgpu_types (host.ParseCreatableVGPUTypes) as Types.
func vendorTypes(hts []host.VendorVGPUType) []Type {
	out := []Type{}
	for _, ht := range hts {
		out = append(out, Type{ID: strconv.Itoa(ht.ID), Name: ht.Name, DeviceAPI: "vfio-pci"})
	}
	return out
}

// vendorVFs returns every vendor-VFIO VF, grouped by PF, each group sorted by address.
func (m *Manager) vendorVFs() (map[host.Address][]VendorVF, error) {
	addrs, err := host.ListPCIFunctions(m.Root)
	if err != nil {
		return nil, err
	}
	out := map[host.Address][]VendorVF{}
	for _, a := range addrs {
		if !m.IsVendorVF(a) {
			continue
		}
		v, err := m.ReadVendorVF(a)
		if err != nil {
			return nil, err
		}
		out[v.PF] = append(out[v.PF], v)
	}
	for pf := range out {
		vs := out[pf]
		sort.Slice(vs, func(i, j int) bool { return vs[i].Address.String() < vs[j].Address.String() })
	}
	return out, nil
}

// vendorParents returns one Parent per physical GPU with vendor-VFIO VFs. A type's Available
// is the number of free VFs (no type assigned) that list it now.
func (m *Manager) vendorParents() ([]Parent, error) {
	byPF, err := m.vendorVFs()
	if err != nil {
		return nil, err
	}
	var out []Parent
	for pf, vfs := range byPF {
		pf := pf
		p := Parent{Name: pf.String(), Address: &pf, Backend: BackendNvidiaVFIO, NUMA: -1}
		if l, err := host.ReadFunctionLinks(m.Root, pf); err == nil {
			p.Driver, p.NUMA = l.Driver, l.NUMANode
		}
		idx := map[string]int{}
		running := map[string]bool{}
		add := func(t Type) int {
			if i, ok := idx[t.ID]; ok {
				return i
			}
			t.Instances = []string{}
			p.Types = append(p.Types, t)
			idx[t.ID] = len(p.Types) - 1
			return idx[t.ID]
		}
		for _, v := range vfs {
			if v.Current != 0 {
				id := strconv.Itoa(v.Current)
				i := add(Type{ID: id, Name: m.vendorTypeName(v.Address, v.Current), DeviceAPI: "vfio-pci"})
				p.Types[i].Instances = append(p.Types[i].Instances, v.Address.String())
				running[id] = true
				continue
			}
			for _, t := range v.Creatable {
				i := add(t)
				p.Types[i].Available++
			}
		}
		for id := range running {
			p.Running = append(p.Running, id)
		}
		sort.Strings(p.Running)
		out = append(out, p)
	}
	return out, nil
}

// vendorTypeName finds the name of type id for a VF that holds it: the VF's own list is empty
// then, so look in the state file's record, then in the siblings' lists.
func (m *Manager) vendorTypeName(vf host.Address, id int) string {
	l, err := host.ReadFunctionLinks(m.Root, vf)
	if err != nil || l.PhysFn == nil {
		return ""
	}
	sibs, _ := host.ReadVFs(m.Root, *l.PhysFn)
	for _, sib := range sibs {
		v, _ := host.ReadVendorVGPU(m.Root, sib)
		if v == nil {
			continue
		}
		for _, t := range v.Creatable {
			if t.ID == id {
				return t.Name
			}
		}
	}
	return ""
}

func (m *Manager) vendorInstances(st *state) ([]Instance, error) {
	byPF, err := m.vendorVFs()
	if err != nil {
		return nil, err
	}
	var out []Instance
	seen := map[string]bool{}
	for _, vfs := range byPF {
		for _, v := range vfs {
			v := v
			i, recorded := st.find(v.Address.String())
			if v.Current == 0 && !recorded {
				continue
			}
			in := Instance{Backend: BackendNvidiaVFIO, Parent: v.PF.String(), VF: &v.Address, Active: v.Current != 0}
			if v.Current != 0 {
				in.Type = strconv.Itoa(v.Current)
				in.TypeName = m.vendorTypeName(v.Address, v.Current)
			}
			if recorded {
				e := st.Instances[i]
				in.Owner, in.Index, in.Defined = e.Owner, e.Index, true
				if in.Type == "" {
					in.Type = e.Type
				}
				if in.TypeName == "" && in.Type == e.Type {
					in.TypeName = e.TypeName
				}
			}
			seen[v.Address.String()] = true
			out = append(out, in)
		}
	}
	// Recorded instances whose VF is gone (VFs not enabled yet after a reboot).
	for _, e := range st.Instances {
		if e.Backend != BackendNvidiaVFIO || seen[e.VF] {
			continue
		}
		a, err := host.ParseAddress(e.VF)
		if err != nil {
			continue
		}
		out = append(out, Instance{Backend: BackendNvidiaVFIO, Parent: e.Parent, Type: e.Type, TypeName: e.TypeName, VF: &a, Owner: e.Owner, Index: e.Index, Defined: true})
	}
	return out, nil
}

// createVendor assigns type t to req.Count VFs of the GPU p. For an owner, instance number
// FirstIndex+i that the state already records on a VF is reused (a re-run converges). Free VFs
// are taken in address order, re-reading each VF's creatable list because it shrinks as
// siblings are assigned; a failure part-way clears what this call assigned.
func (m *Manager) createVendor(ctx context.Context, p Parent, t Type, req CreateRequest) ([]Instance, error) {
	if len(req.UUIDs) > 0 {
		return nil, fmt.Errorf("create %s on %s: %w: vendor-VFIO instances are VFs, not UUIDs (drop --uuid)", t.ID, p.Name, host.ErrInvalid)
	}
	id, err := strconv.Atoi(t.ID)
	if err != nil {
		return nil, fmt.Errorf("create %s on %s: %w: vendor vGPU type IDs are numbers", t.ID, p.Name, host.ErrInvalid)
	}
	vc := &vendorCreate{m: m, p: p, t: t, id: id, req: req, rv: revert.New()}
	err = m.updateState(func(st *state) error {
		byPF, err := m.vendorVFs()
		if err != nil {
			return err
		}
		vc.st, vc.vfs, vc.taken = st, byPF[*p.Address], map[string]bool{}
		for _, e := range st.Instances {
			if e.VF != "" {
				vc.taken[e.VF] = true // reserved by a recorded instance, even while cleared (after a reboot)
			}
		}
		for i := 0; i < req.Count; i++ {
			if err := vc.instance(ctx, i); err != nil {
				return err
			}
		}
		for _, in := range vc.out {
			st.put(stateEntry{Backend: BackendNvidiaVFIO, Parent: in.Parent, Type: in.Type, TypeName: in.TypeName, VF: in.VF.String(), Owner: in.Owner, Index: in.Index})
		}
		return nil
	})
	if err != nil {
		return nil, revert.Wrap(err, vc.rv.Fail())
	}
	vc.rv.Success()
	return vc.out, nil
}

// vendorCreate is one createVendor call's state.
type vendorCreate struct {
	m     *Manager
	p     Parent
	t     Type
	id    int
	req   CreateRequest
	st    *state
	vfs   []VendorVF
	taken map[string]bool
	rv    *revert.Reverter
	out   []Instance
}

// instance makes the call's i-th instance: the owner's recorded VF again when the state has
// one (a re-run converges), else a pinned or the first free VF that lists the type now.
func (vc *vendorCreate) instance(ctx context.Context, i int) error {
	m, t, req := vc.m, vc.t, vc.req
	index := req.FirstIndex + i
	var pinned *host.Address
	if len(req.VFs) > 0 {
		pinned = &req.VFs[i]
	}
	if e, ok := vc.st.ownerEntry(BackendNvidiaVFIO, req.Owner, index); ok {
		return vc.recorded(ctx, e, index, pinned)
	}
	if pinned != nil {
		if err := m.checkPinnedVF(*pinned, vc.vfs, vc.st, t, vc.p); err != nil {
			return fmt.Errorf("create %s for %s (instance %d): %w", t.ID, req.Owner, index, err)
		}
	}
	free, err := vc.freeVF(pinned)
	if err != nil {
		return err
	}
	if free == nil {
		return fmt.Errorf("create %d× %s (%s) on %s: %w: only %d VF(s) could take it (no free VF lists type %s in nvidia/creatable_vgpu_types; the GPU may run another type, or be full); %s",
			req.Count, t.ID, t.Name, vc.p.Name, host.ErrBusy, i, t.ID, m.undoNote(vc.rv.Len(), "VF assignment(s)"))
	}
	vc.taken[free.String()] = true
	return vc.assign(ctx, *free, index)
}

// recorded converges the owner's instance index that the state records on VF e.VF.
func (vc *vendorCreate) recorded(ctx context.Context, e stateEntry, index int, pinned *host.Address) error {
	t, req := vc.t, vc.req
	if pinned != nil && e.VF != pinned.String() {
		return fmt.Errorf("create %s for %s (instance %d) on VF %s: %w: its instance %d is recorded on VF %s (remove it first)",
			t.ID, req.Owner, index, pinned, host.ErrBusy, index, e.VF)
	}
	if e.Type != t.ID || e.Parent != vc.p.Name {
		return fmt.Errorf("create %s for %s (instance %d) on %s: %w: %s already holds type %s for it on %s (remove it first)",
			t.ID, req.Owner, index, vc.p.Name, host.ErrBusy, e.VF, e.Type, e.Parent)
	}
	a, _ := host.ParseAddress(e.VF)
	cur, err := host.ReadCurrentVGPUType(vc.m.Root, a)
	switch {
	case err == nil && cur == vc.id:
		vc.out = append(vc.out, vc.instanceOn(a, index))
		return nil
	case err == nil && cur == 0:
		return vc.assign(ctx, a, index)
	}
	return fmt.Errorf("create %s for %s (instance %d): %w: recorded VF %s now has current_vgpu_type %d", t.ID, req.Owner, index, host.ErrBusy, a, cur)
}

// freeVF returns the first VF (the pinned one, if any) that holds no type, is not reserved, and
// lists the type now; nil when none does.
func (vc *vendorCreate) freeVF(pinned *host.Address) (*host.Address, error) {
	for j := range vc.vfs {
		v := vc.vfs[j]
		if pinned != nil && v.Address != *pinned {
			continue
		}
		if vc.taken[v.Address.String()] || v.Current != 0 || vfio.Quarantined(vc.m.Root, v.Address) {
			continue // a quarantined VF failed its handback check: no instance goes on it
		}
		if !vc.m.DryRun {
			fresh, err := vc.m.ReadVendorVF(v.Address) // the list shrinks as siblings are used
			if err != nil {
				return nil, err
			}
			v = fresh
		}
		if v.Current != 0 || !hasType(v.Creatable, vc.t.ID) {
			continue
		}
		return &v.Address, nil
	}
	return nil, nil
}

// assign writes the type to VF a as instance index, recording its undo.
func (vc *vendorCreate) assign(ctx context.Context, a host.Address, index int) error {
	if err := vc.m.assignVendor(ctx, a, vc.id, vc.t); err != nil {
		return err
	}
	vc.rv.Add(func() error { return vc.m.clearVendor(context.WithoutCancel(ctx), a) })
	vc.out = append(vc.out, vc.instanceOn(a, index))
	return nil
}

func (vc *vendorCreate) instanceOn(a host.Address, index int) Instance {
	return Instance{Backend: BackendNvidiaVFIO, Parent: vc.p.Name, Type: vc.t.ID, TypeName: vc.t.Name, VF: &a, Owner: vc.req.Owner, Index: index, Active: true, Defined: true}
}

// checkPinnedVF says why a pinned VF cannot take type t now (nil when it can, as far as
// the state file and the scan before the create tell).
func (m *Manager) checkPinnedVF(a host.Address, vfs []VendorVF, st *state, t Type, p Parent) error {
	var v *VendorVF
	for j := range vfs {
		if vfs[j].Address == a {
			v = &vfs[j]
		}
	}
	if v == nil {
		return fmt.Errorf("VF %s: %w: not a vendor-VFIO VF of GPU %s (no nvidia/creatable_vgpu_types under %s)", a, host.ErrNotFound, p.Name, m.Root.PCIDevice(a))
	}
	if i, ok := st.find(a.String()); ok {
		e := st.Instances[i]
		return fmt.Errorf("VF %s: %w: recorded for %q (type %s) in %s", a, host.ErrBusy, e.Owner, e.Type, m.statePath())
	}
	if v.Current != 0 {
		return fmt.Errorf("VF %s: %w: it holds vGPU type %d already (%s)", a, host.ErrBusy, v.Current, m.Root.PCIDevice(a, "nvidia", "current_vgpu_type"))
	}
	return nil
}

func hasType(ts []Type, id string) bool {
	for _, t := range ts {
		if t.ID == id {
			return true
		}
	}
	return false
}

func (m *Manager) assignVendor(ctx context.Context, vf host.Address, id int, t Type) error {
	path := m.Root.PCIDevice(vf, "nvidia", "current_vgpu_type")
	if err := m.write(ctx, path, strconv.Itoa(id)); err != nil {
		switch errno(err) {
		case syscall.EBUSY:
			return fmt.Errorf("assign vGPU type %s (%s) to VF %s via %s: %w: the VF already has a type: %w", t.ID, t.Name, vf, path, host.ErrBusy, err)
		case syscall.EINVAL:
			return fmt.Errorf("assign vGPU type %s (%s) to VF %s via %s: %w: the driver no longer lists it as creatable (the GPU runs another type or is full): %w", t.ID, t.Name, vf, path, host.ErrBusy, err)
		}
		return fmt.Errorf("assign vGPU type %s to VF %s via %s: %w", t.ID, vf, path, err)
	}
	if m.DryRun {
		return nil
	}
	// The driver can accept the write and still not take the type (a VF it is setting up, a
	// firmware refusal it only logs): read it back rather than report a vGPU that is not there.
	got, err := host.ReadCurrentVGPUType(m.Root, vf)
	if err != nil {
		return fmt.Errorf("assign vGPU type %s to VF %s: read back %s: %w", t.ID, vf, path, err)
	}
	if got != id {
		return fmt.Errorf("assign vGPU type %s (%s) to VF %s via %s: %w: the driver accepted the write but current_vgpu_type reads %d (see dmesg for the nvidia driver's reason)",
			t.ID, t.Name, vf, path, host.ErrBusy, got)
	}
	return nil
}

func (m *Manager) clearVendor(ctx context.Context, vf host.Address) error {
	path := m.Root.PCIDevice(vf, "nvidia", "current_vgpu_type")
	if err := m.write(ctx, path, "0"); err != nil {
		if errno(err) == syscall.EBUSY {
			return fmt.Errorf("clear vGPU type of VF %s via %s: %w: a VM has the VF open; stop it first: %w", vf, path, host.ErrBusy, err)
		}
		return fmt.Errorf("clear vGPU type of VF %s via %s: %w", vf, path, err)
	}
	return nil
}
