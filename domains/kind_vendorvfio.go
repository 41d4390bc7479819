package domains

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"libvirt.org/go/libvirtxml"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/step"
	"github.com/vgpu-host/vgpu-host/vgpu"
)

// vendorVFIOKind is an NVIDIA vendor-specific VFIO VF (vGPU 17+, kernel >= 6.8): the VF gets a
// type in nvidia/current_vgpu_type, stays on the nvidia driver, and is attached as a PCI
// hostdev with managed='no'. A MIG-backed type goes through the same path, its allocation
// named vgpu.MIGVendorVFIO (kind_migvendorvfio.go).
type vendorVFIOKind struct{}

func (vendorVFIOKind) Name() vgpu.Kind { return vgpu.VendorVFIO }

func (vendorVFIOKind) wants(g GPU) bool { return g.VGPU != nil && g.VGPU.Mode == "vendor-vfio" }

func (vendorVFIOKind) resolve(r *resolver, i int, g GPU) (GPUAllocation, error) {
	slots, err := r.vendorVFIO(i, g.VGPU)
	return GPUAllocation{Kind: vendorKindOf(slots, g.VGPU.Profile), Slots: slots}, err
}

func (vendorVFIOKind) render(p *Builder, _ GPU, ga GPUAllocation, d *libvirtxml.Domain, _ *video) error {
	for _, s := range ga.Slots {
		if len(s.Functions) == 0 {
			return fmt.Errorf("allocated VF slot is empty: %w", host.ErrInvalid)
		}
		at, err := p.guestSlot(d)
		if err != nil {
			return err
		}
		hd := VendorVFIOHostdev(s.Functions[0])
		dom, fn := uint(0), uint(0)
		hd.Address = &libvirtxml.DomainAddress{PCI: &libvirtxml.DomainAddressPCI{Domain: &dom, Bus: &at.Bus, Slot: &at.Slot, Function: &fn}}
		d.Devices.Hostdevs = append(d.Devices.Hostdevs, hd)
	}
	return nil
}

func (vendorVFIOKind) claims(ga GPUAllocation) []vgpu.Claim {
	var out []vgpu.Claim
	for _, s := range ga.Slots {
		detail := strconv.Itoa(s.VGPUType)
		if s.VGPUTypeName != "" {
			detail += " (" + s.VGPUTypeName + ")"
		}
		out = append(out, vgpu.Claim{Kind: vgpu.ClaimKindOf(ga.Kind), ID: s.Functions[0].String(), Detail: detail})
	}
	return out
}

// hostSteps assigns the type to every VF that does not hold it yet. A VF holding it already is
// this VM's own assignment when the ledger says so (its journal clears it at destroy), or
// someone else's, used as is and left set at destroy.
func (vendorVFIOKind) hostSteps(ga GPUAllocation, n *Numbering) ([]step.Step, []string, error) {
	var out []step.Step
	var notes []string
	for _, s := range ga.Slots {
		vf := s.Functions[0]
		if s.VGPUTypeSet {
			if !n.owned(vgpu.Claim{Kind: vgpu.ClaimVendorVGPU, ID: vf.String()}) {
				notes = append(notes, fmt.Sprintf("gpus[%d]: VF %s holds vGPU type %d (%s) already: used as is, and left set at destroy", ga.Index, vf, s.VGPUType, s.VGPUTypeName))
			}
			continue
		}
		if s.VGPUType == 0 {
			return nil, nil, fmt.Errorf("gpus[%d]: VF %s has no resolved vGPU type: %w", ga.Index, vf, host.ErrInvalid)
		}
		out = append(out, step.AssignVGPU{VF: vf, Type: s.VGPUType, TypeName: s.VGPUTypeName, Index: n.vendor})
		n.vendor++
	}
	return out, notes, nil
}

func (r *resolver) vendorVFIO(i int, v *VGPU) ([]Slot, error) {
	path := fmt.Sprintf("spec.gpus[%d].vgpu", i)
	count := max(v.Count, 1)
	if len(v.VFs) > 0 {
		var slots []Slot
		for _, s := range v.VFs {
			a, err := host.ParseAddress(s)
			if err != nil {
				return nil, fmt.Errorf("%s.vfs: %v: %w", path, err, host.ErrInvalid)
			}
			if r.inv != nil {
				d := r.device(a)
				if d == nil || d.VendorVGPU == nil {
					return nil, fmt.Errorf("%s: %s is not a VF with NVIDIA vendor-VFIO vGPU support on the host (vgpu-host mdev types lists the VFs that offer vGPU types): %w", path, a, host.ErrNotFound)
				}
				if r.used[a] {
					return nil, fmt.Errorf("%s: VF %s is already assigned: %w", path, a, host.ErrBusy)
				}
				id, name, set, err := r.vendorTypeFor(d, v.Profile)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", path, err)
				}
				s := r.slot(d, false)
				s.VGPUType, s.VGPUTypeName, s.VGPUTypeSet = id, name, set
				slots = append(slots, s)
				continue
			}
			r.used[a] = true
			slots = append(slots, Slot{Functions: []host.Address{a}, NUMANode: -1})
		}
		return slots, nil
	}
	if r.inv == nil {
		return nil, fmt.Errorf("%s: profile %q needs a host inventory, give vfs to render offline: %w", path, v.Profile, errOffline)
	}
	// Prefer VFs already set to the profile, then VFs that can still create it.
	var ready, creatable []Slot
	for k := range r.inv.Devices {
		d := &r.inv.Devices[k]
		if d.VendorVGPU == nil || r.used[d.Address] {
			continue
		}
		id, name, set, err := r.vendorTypeFor(d, v.Profile)
		if err != nil {
			continue // runs another type, or its GPU no longer offers this one
		}
		s := Slot{Functions: []host.Address{d.Address}, VGPUType: id, VGPUTypeName: name, VGPUTypeSet: set}
		if set {
			ready = append(ready, s)
		} else {
			creatable = append(creatable, s)
		}
	}
	all := append(ready, creatable...)
	if len(all) < count {
		why := ""
		if running := r.vendorRunning(); len(running) > 0 {
			why = fmt.Sprintf(" (the driver hosts one vGPU type per GPU at a time: %s)", strings.Join(running, ", "))
		}
		return nil, fmt.Errorf("%s: %d free VF(s) offer vendor-VFIO vGPU profile %q, %d wanted%s: %w", path, len(all), v.Profile, count, why, host.ErrNotFound)
	}
	var slots []Slot
	for _, c := range all[:count] {
		s := r.slot(r.device(c.Functions[0]), false)
		s.VGPUType, s.VGPUTypeName, s.VGPUTypeSet = c.VGPUType, c.VGPUTypeName, c.VGPUTypeSet
		slots = append(slots, s)
	}
	return slots, nil
}

// vendorTypeFor returns the vGPU type of VF d that profile names: the VF's current type
// (set is true), or a type its creatable list offers now. A VF running another type, or a
// GPU whose driver no longer offers the type, is an error naming what runs.
func (r *resolver) vendorTypeFor(d *host.Device, profile string) (id int, name string, set bool, err error) {
	vg := d.VendorVGPU
	if vg.CurrentType != 0 {
		name := r.vendorTypeName(d, vg.CurrentType)
		if vendorTypeMatches(vg.CurrentType, name, profile) {
			return vg.CurrentType, name, true, nil
		}
		return 0, "", false, fmt.Errorf("VF %s runs vGPU type %d (%s), not %q (clear it first): %w", d.Address, vg.CurrentType, name, profile, host.ErrBusy)
	}
	offered := make([]vgpu.Profile, len(vg.Creatable))
	for i, t := range vg.Creatable {
		offered[i] = vgpu.Profile{ID: strconv.Itoa(t.ID), Name: t.Name}
	}
	i, lerr := vgpu.LookupProfile(offered, profile, "on VF "+d.Address.String())
	if lerr == nil {
		return vg.Creatable[i].ID, vg.Creatable[i].Name, false, nil
	}
	if errors.Is(lerr, host.ErrInvalid) {
		return 0, "", false, lerr
	}
	why := "creatable now: " + vgpu.List(offered)
	if running := r.vendorRunning(); len(running) > 0 {
		why += "; the driver hosts one vGPU type per GPU at a time: " + strings.Join(running, ", ")
	}
	// Not found (so fallback: virtio-gpu applies) and busy (the GPU is taken, exit 5).
	return 0, "", false, fmt.Errorf("VF %s cannot take vGPU profile %q (%s): %w: %w", d.Address, profile, why, host.ErrNotFound, host.ErrBusy)
}

// vendorTypeName finds the name of vendor type id: a VF holding a type lists nothing, so look
// in its siblings' creatable lists.
func (r *resolver) vendorTypeName(d *host.Device, id int) string {
	for k := range r.inv.Devices {
		o := &r.inv.Devices[k]
		if o.VendorVGPU == nil || (d.PhysFn != nil && (o.PhysFn == nil || *o.PhysFn != *d.PhysFn)) {
			continue
		}
		for _, t := range o.VendorVGPU.Creatable {
			if t.ID == id {
				return t.Name
			}
		}
	}
	return ""
}

// vendorRunning lists "VF runs TYPE" for every vendor-VFIO VF that holds a type.
func (r *resolver) vendorRunning() []string {
	var out []string
	for k := range r.inv.Devices {
		d := &r.inv.Devices[k]
		if d.VendorVGPU == nil || d.VendorVGPU.CurrentType == 0 {
			continue
		}
		t := strconv.Itoa(d.VendorVGPU.CurrentType)
		if n := r.vendorTypeName(d, d.VendorVGPU.CurrentType); n != "" {
			t += " (" + n + ")"
		}
		out = append(out, fmt.Sprintf("%s runs %s", d.Address, t))
	}
	return out
}

// vendorTypeMatches reports whether profile names vendor type id called name (vgpu.Matches:
// by number, whole name or name without vendor prefix, ignoring case).
func vendorTypeMatches(id int, name, profile string) bool {
	return vgpu.Matches(vgpu.Profile{ID: strconv.Itoa(id), Name: name}, profile)
}
