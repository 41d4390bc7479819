package domains

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"libvirt.org/go/libvirtxml"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/step"
	"github.com/vgpu-host/vgpu-host/vgpu"
)

// mdevKind is a mediated device instance by UUID (NVIDIA vGPU up to 16.x, Intel GVT-g, the
// kernel's mbochs/mdpy samples), with its display and ramfb when asked.
type mdevKind struct{}

func (mdevKind) Name() vgpu.Kind { return vgpu.Mdev }

func (mdevKind) wants(g GPU) bool { return g.VGPU != nil && g.VGPU.Mode != "vendor-vfio" }

func (mdevKind) resolve(r *resolver, i int, g GPU) (GPUAllocation, error) {
	m, err := r.mdev(i, g.VGPU)
	return GPUAllocation{Kind: vgpu.Mdev, Mdevs: m}, err
}

func (mdevKind) render(_ *Builder, g GPU, ga GPUAllocation, d *libvirtxml.Domain, v *video) error {
	display := g.VGPU != nil && g.VGPU.Display
	ramfb := display && (g.VGPU.RAMFB == nil || *g.VGPU.RAMFB)
	for _, m := range ga.Mdevs {
		d.Devices.Hostdevs = append(d.Devices.Hostdevs, MdevHostdev(m.UUID, display, ramfb))
	}
	v.gpuDisplay = v.gpuDisplay || display
	return nil
}

func (mdevKind) claims(ga GPUAllocation) []vgpu.Claim {
	var out []vgpu.Claim
	for _, m := range ga.Mdevs {
		out = append(out, vgpu.Claim{Kind: vgpu.ClaimKindOf(ga.Kind), ID: strings.ToLower(m.UUID), Detail: m.Type})
	}
	return out
}

func (mdevKind) hostSteps(ga GPUAllocation, n *Numbering) ([]step.Step, []string, error) {
	var out []step.Step
	for _, m := range ga.Mdevs {
		index := n.mdev
		n.mdev++
		if m.Exists {
			continue
		}
		out = append(out, step.CreateMdev{UUID: strings.ToLower(m.UUID), Parent: m.Parent, Type: m.Type, Index: index})
	}
	return out, nil, nil
}

func (r *resolver) mdev(i int, v *VGPU) ([]MdevAllocation, error) {
	path := fmt.Sprintf("spec.gpus[%d].vgpu", i)
	count := max(v.Count, 1)
	uuids := v.UUIDs
	if len(uuids) == 0 {
		for n := 0; n < count; n++ {
			uuids = append(uuids, vgpu.InstanceUUID(r.vm.Metadata.Name, r.mdevNext+n))
		}
	}
	r.mdevNext += count
	out := make([]MdevAllocation, 0, count)
	if r.inv == nil {
		for _, u := range uuids {
			out = append(out, MdevAllocation{UUID: u, Type: v.Profile, Placeholder: len(v.UUIDs) == 0})
		}
		if len(v.UUIDs) == 0 {
			r.notes = append(r.notes, fmt.Sprintf("%s: offline, mdev UUIDs are placeholders derived from the VM name; profile %q not checked", path, v.Profile))
		}
		return out, nil
	}
	cands, err := r.mdevCandidates(path, v.Profile)
	if err != nil {
		return nil, err
	}
	for _, u := range uuids {
		var got *MdevAllocation
		for _, c := range cands {
			if slices.Contains(c.t.Instances, u) {
				got = &MdevAllocation{UUID: u, Type: c.t.ID, Parent: c.parent, Exists: true}
				break
			}
		}
		if got == nil {
			// An instance with this UUID of another type: creating ours would fail (EEXIST).
			for _, mp := range r.inv.MdevParents {
				for _, t := range mp.Types {
					if slices.Contains(t.Instances, u) {
						return nil, fmt.Errorf("%s: mdev %s already exists on %s as type %s (%s), not profile %q; remove it (vgpu-host mdev remove %s) or use other uuids: %w",
							path, u, mp.Parent, t.ID, t.Name, v.Profile, u, host.ErrBusy)
					}
				}
			}
		}
		if got == nil {
			for _, c := range cands {
				key := c.parent + "/" + c.t.ID
				left, seen := r.mdevLeft[key]
				if !seen {
					left = c.t.AvailableInstances
				}
				if left > 0 {
					r.mdevLeft[key] = left - 1
					got = &MdevAllocation{UUID: u, Type: c.t.ID, Parent: c.parent}
					break
				}
				r.mdevLeft[key] = left
			}
		}
		if got == nil {
			return nil, fmt.Errorf("%s: profile %q: no available instances left for %d vGPU(s): %w", path, v.Profile, count, host.ErrNotFound)
		}
		out = append(out, *got)
	}
	return out, nil
}

// mdevCand is an mdev parent offering the type a profile names.
type mdevCand struct {
	parent string
	t      *host.MdevType
}

// mdevCandidates finds, on every mdev parent of the inventory, the type profile names (by
// vgpu.LookupProfile). None is host.ErrNotFound with a did-you-mean over every type offered;
// a profile naming several types of one parent is host.ErrInvalid.
func (r *resolver) mdevCandidates(path, profile string) ([]mdevCand, error) {
	var cands []mdevCand
	var offered []vgpu.Profile
	for pi := range r.inv.MdevParents {
		mp := &r.inv.MdevParents[pi]
		types := make([]vgpu.Profile, len(mp.Types))
		for ti, t := range mp.Types {
			types[ti] = vgpu.Profile{ID: t.ID, Name: t.Name}
		}
		offered = append(offered, types...)
		ti, err := vgpu.LookupProfile(types, profile, "on "+mp.Parent)
		if errors.Is(err, host.ErrInvalid) {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if err == nil {
			cands = append(cands, mdevCand{mp.Parent, &mp.Types[ti]})
		}
	}
	if len(cands) == 0 {
		return nil, fmt.Errorf("%s: no mdev type matches profile %q (%s): %w", path, profile, vgpu.DidYouMean(offered, profile), host.ErrNotFound)
	}
	return cands, nil
}
