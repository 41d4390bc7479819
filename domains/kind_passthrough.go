package domains

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"libvirt.org/go/libvirtxml"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/step"
	"github.com/vgpu-host/vgpu-host/vgpu"
)

// passthroughKind is a whole PCI GPU with its companion functions on one multifunction guest
// slot, its IOMMU group bound to vfio-pci by vgpu-host. sriovVFKind is the same for a GPU's
// SR-IOV VF named by address: no companions.
type passthroughKind struct{}

type sriovVFKind struct{ passthroughKind }

func (passthroughKind) Name() vgpu.Kind { return vgpu.Passthrough }
func (sriovVFKind) Name() vgpu.Kind     { return vgpu.SRIOVVF }

func (passthroughKind) wants(g GPU) bool { return g.Passthrough != nil }
func (sriovVFKind) wants(GPU) bool       { return false } // a passthrough entry resolves to it

func (passthroughKind) resolve(r *resolver, i int, g GPU) (GPUAllocation, error) {
	slots, err := r.passthrough(i, g.Passthrough)
	ga := GPUAllocation{Kind: vgpu.Passthrough, Slots: slots, Managed: g.Passthrough.Managed}
	if len(slots) == 1 && r.inv != nil {
		if d := r.device(slots[0].Functions[0]); d != nil && d.PhysFn != nil {
			ga.Kind = vgpu.SRIOVVF
		}
	}
	return ga, err
}

func (passthroughKind) render(p *Builder, g GPU, ga GPUAllocation, d *libvirtxml.Domain, v *video) error {
	if g.Passthrough == nil {
		return fmt.Errorf("allocation is %s, spec is not passthrough: %w", ga.Kind, host.ErrInvalid)
	}
	for _, s := range ga.Slots {
		if len(s.Functions) == 0 {
			return fmt.Errorf("allocated slot has no functions: %w", host.ErrInvalid)
		}
		at, err := p.guestSlot(d)
		if err != nil {
			return err
		}
		d.Devices.Hostdevs = append(d.Devices.Hostdevs, SlotHostdevs(s.Functions, at, g.Passthrough.Managed, g.Passthrough.ROM)...)
	}
	v.gpuDisplay = v.gpuDisplay || g.Passthrough.Primary
	return nil
}

func (passthroughKind) claims(ga GPUAllocation) []vgpu.Claim {
	var out []vgpu.Claim
	for _, s := range ga.Slots {
		for i, f := range s.Functions {
			detail := string(ga.Kind)
			if i > 0 {
				detail += " companion"
			}
			out = append(out, vgpu.Claim{Kind: vgpu.ClaimKindOf(ga.Kind), ID: f.String(), Detail: detail})
		}
	}
	return out
}

// hostSteps binds each slot's whole IOMMU group, unless the entry hands the binding to libvirt
// (managed: true), in which case libvirt detaches the functions itself at start.
func (passthroughKind) hostSteps(ga GPUAllocation, _ *Numbering) ([]step.Step, []string, error) {
	if ga.Managed {
		return nil, nil, nil
	}
	var out []step.Step
	for _, s := range ga.Slots {
		out = append(out, step.BindGroup{Functions: s.Functions})
	}
	return out, nil, nil
}

// selectorString describes a passthrough selector the way the user wrote it.
func selectorString(p *Passthrough) string {
	var s []string
	if p.Address != "" {
		s = append(s, "address="+p.Address)
	}
	if p.Vendor != "" {
		s = append(s, "vendor="+p.Vendor)
	}
	if p.Device != "" {
		s = append(s, "device="+p.Device)
	}
	if p.Model != "" {
		s = append(s, "model="+strconv.Quote(p.Model))
	}
	if p.Count > 1 {
		s = append(s, "count="+strconv.Itoa(p.Count))
	}
	return strings.Join(s, " ")
}

func (r *resolver) passthrough(i int, p *Passthrough) ([]Slot, error) {
	path := fmt.Sprintf("spec.gpus[%d].passthrough", i)
	withCompanions := p.Companions == nil || *p.Companions
	if p.Address != "" {
		a, err := host.ParseAddress(p.Address)
		if err != nil {
			return nil, fmt.Errorf("%s.address: %v: %w", path, err, host.ErrInvalid)
		}
		if r.inv == nil {
			if withCompanions {
				r.notes = append(r.notes, fmt.Sprintf("%s: offline, companion functions of %s not added", path, a))
			}
			r.used[a] = true
			return []Slot{{Functions: []host.Address{a}, NUMANode: -1}}, nil
		}
		d := r.device(a)
		if d == nil {
			return nil, fmt.Errorf("%s: no PCI device %s on the host (check the address with lspci -D; vgpu-host inspect lists its GPUs): %w", path, a, host.ErrNotFound)
		}
		if r.used[a] {
			return nil, fmt.Errorf("%s: %s is already assigned: %w", path, a, host.ErrBusy)
		}
		if !d.IsGPU {
			// A companion named on its own would land at guest function 0 with the GPU after it,
			// and anything else is not what gpus[] is for.
			gpu := ""
			for k := range r.inv.Devices {
				if o := &r.inv.Devices[k]; o.IsGPU && o.Address.SameSlot(a) {
					gpu = fmt.Sprintf("; it is a function of GPU %s: give that address (its companions come along)", o.Address)
					break
				}
			}
			return nil, fmt.Errorf("%s.address: %s is not a GPU (PCI class %s)%s: %w", path, a, d.Class, gpu, host.ErrInvalid)
		}
		return []Slot{r.slot(d, withCompanions && d.PhysFn == nil)}, nil
	}
	if r.inv == nil {
		return nil, fmt.Errorf("%s: selector %s needs a host inventory, give an address to render offline: %w", path, selectorString(p), errOffline)
	}
	want := max(p.Count, 1)
	var slots []Slot
	matched := 0
	for k := range r.inv.Devices {
		d := &r.inv.Devices[k]
		if !d.IsGPU || d.PhysFn != nil || !p.Selects(d) {
			continue
		}
		matched++
		if r.used[d.Address] || len(slots) == want {
			continue
		}
		slots = append(slots, r.slot(d, withCompanions))
	}
	if len(slots) < want {
		if matched == 0 {
			if hint := host.UnnamedGPUsHint(r.inv.Devices); hint != "" && p.Model != "" {
				return nil, fmt.Errorf("%s: no GPU matches selector %s: %w; %s", path, selectorString(p), host.ErrNotFound, hint)
			}
			return nil, fmt.Errorf("%s: no GPU matches selector %s: %w", path, selectorString(p), host.ErrNotFound)
		}
		// Give back what this entry took, so a fallback leaves them for others.
		for _, s := range slots {
			for _, f := range s.Functions {
				delete(r.used, f)
			}
		}
		return nil, fmt.Errorf("%s: selector %s matches %d GPUs but only %d are free, %d wanted: %w",
			path, selectorString(p), matched, len(slots), want, host.ErrNotFound)
	}
	return slots, nil
}

// Selects reports whether the selector fields (vendor, device, model; not address) all accept
// d: the IDs equal (any case), model a case-insensitive substring of pci.ids' device name.
// Translations to other targets (kube's KubeVirt VM) select with it too.
func (p *Passthrough) Selects(d *host.Device) bool {
	if p.Vendor != "" && !strings.EqualFold(d.VendorID, p.Vendor) {
		return false
	}
	if p.Device != "" && !strings.EqualFold(d.DeviceID, p.Device) {
		return false
	}
	if p.Model != "" && !strings.Contains(strings.ToLower(d.DeviceName), strings.ToLower(p.Model)) {
		return false
	}
	return true
}

// slot collects a GPU and (optionally) the other functions of its slot and marks them used.
// A VF never brings companions: the other functions of its slot are its PF and sibling VFs.
func (r *resolver) slot(d *host.Device, companions bool) Slot {
	s := Slot{Functions: []host.Address{d.Address}, Name: d.DeviceName, NUMANode: d.NUMANode}
	if companions && d.PhysFn == nil {
		set := map[host.Address]bool{}
		for _, c := range d.Companions {
			if c.SameSlot(d.Address) {
				set[c] = true
			}
		}
		for k := range r.inv.Devices {
			o := &r.inv.Devices[k]
			if o.Address != d.Address && o.Address.SameSlot(d.Address) && o.PhysFn == nil {
				set[o.Address] = true
			}
		}
		var comp []host.Address
		for a := range set {
			if a != d.Address {
				comp = append(comp, a)
			}
		}
		slices.SortFunc(comp, func(a, b host.Address) int { return int(a.Function) - int(b.Function) })
		s.Functions = append(s.Functions, comp...)
	}
	for _, f := range s.Functions {
		r.used[f] = true
		if dev := r.device(f); dev != nil {
			s.BAR64 += bar64(dev)
			for _, b := range dev.BARs {
				if b.Is64 && !b.IO {
					s.BAR64Max = max(s.BAR64Max, b.Size)
				}
			}
		}
	}
	return s
}

func bar64(d *host.Device) uint64 {
	var n uint64
	for _, b := range d.BARs {
		if b.Is64 && !b.IO {
			n += b.Size
		}
	}
	return n
}
