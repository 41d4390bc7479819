package domains

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/vgpu"
)

// GPUKind is what a gpus[] entry was resolved to.
type GPUKind string

// The kinds of GPU attachment.
const (
	KindPassthrough GPUKind = "passthrough" // whole PCI functions via vfio-pci, managed='yes'
	KindMdev        GPUKind = "mdev"        // mediated devices by UUID
	KindVendorVFIO  GPUKind = "vendor-vfio" // NVIDIA vendor-VFIO VFs, PCI hostdev managed='no'
	KindVirtioGPU   GPUKind = "virtio-gpu"  // paravirtual GPU (asked for, or a fallback)
)

// OVMFDefaultMMIO64MiB is the fixed 64-bit PCI MMIO aperture older OVMF builds give a guest
// (PcdPciMmio64Size, 32 GiB). Auto sizing leaves windows up to this size alone.
const OVMFDefaultMMIO64MiB = 32 << 10

// Allocation is the resolved form of a spec: what each gpus[] entry gets on this host. The
// builder takes it as given; nothing in it is read from the host again.
type Allocation struct {
	// VirtType is the libvirt domain type: kvm or qemu.
	VirtType string `json:"virt_type"`
	// Offline is true when no inventory was consulted (render --offline).
	Offline bool            `json:"offline"`
	GPUs    []GPUAllocation `json:"gpus"`
	// NUMANode is the host node vCPUs and memory are bound to; -1 for no placement.
	NUMANode int `json:"numa_node"`
	// CPUSet is the node's CPU list (local_cpulist), e.g. "0-15,32-47".
	CPUSet string `json:"cpuset,omitempty"`
	// MMIO64MiB is the guest's 64-bit MMIO window in MiB (a power of two); 0 leaves the
	// firmware default. Build turns it into <pcihole64> and <maxphysaddr>.
	MMIO64MiB uint64 `json:"mmio64_mib,omitempty"`
	// Notes explain choices a user may want to know about (placeholders, defaults kept).
	Notes []string `json:"notes,omitempty"`
}

// GPUAllocation is the resolution of one gpus[] entry.
type GPUAllocation struct {
	Index int     `json:"index"`
	Kind  GPUKind `json:"kind"`
	// Slots are the host PCI slots given to the VM (passthrough, vendor-vfio): one per GPU.
	Slots []Slot `json:"slots,omitempty"`
	// Mdevs are the mediated devices (kind mdev).
	Mdevs []MdevAllocation `json:"mdevs,omitempty"`
	// FellBack is true when the entry asked for a GPU or vGPU and got virtio-gpu instead.
	FellBack bool   `json:"fell_back,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// Slot is one host GPU and the companion functions that go with it, attached together on one
// guest slot. Functions[0] is the GPU.
type Slot struct {
	Functions []host.Address `json:"functions"`
	Name      string         `json:"name,omitempty"`
	NUMANode  int            `json:"numa_node"`
	// BAR64 is the sum of the functions' 64-bit memory BARs, in bytes.
	BAR64 uint64 `json:"bar64_bytes,omitempty"`
	// VGPUType is the NVIDIA vendor-VFIO vGPU type this VF gets (kind vendor-vfio; 0 when
	// unknown, offline). It is the single source of truth for which VF gets which type:
	// apply writes exactly this type to exactly this VF's nvidia/current_vgpu_type.
	VGPUType     int    `json:"vgpu_type,omitempty"`
	VGPUTypeName string `json:"vgpu_type_name,omitempty"`
	// VGPUTypeSet is true when the VF holds VGPUType already (nothing to assign).
	VGPUTypeSet bool `json:"vgpu_type_set,omitempty"`
}

// MdevAllocation is one mediated device for the VM.
type MdevAllocation struct {
	UUID   string `json:"uuid"`
	Type   string `json:"type"`
	Parent string `json:"parent,omitempty"`
	// Exists is true when the instance is already on the host; otherwise it must be created
	// (on Parent, of Type) before the domain starts.
	Exists bool `json:"exists"`
	// Placeholder is true for offline renders: the UUID is derived from the VM name and index
	// and nothing was checked against a host.
	Placeholder bool `json:"placeholder,omitempty"`
}

// ResolveOptions tune Resolve.
type ResolveOptions struct {
	// Offline resolves without an inventory: explicit addresses and UUIDs are used as given,
	// vGPUs get derived placeholder UUIDs, and selectors fall back or fail.
	Offline bool
	// VirtType overrides spec.virtType ("kvm" or "qemu"); empty keeps the spec's.
	VirtType string
	// InUse are PCI functions already given to other VMs (from the ledger); they are skipped.
	InUse []host.Address
}

// DomainUUID is vgpu.DomainUUID: the domain UUID vgpu-host gives VM name.
func DomainUUID(name string) string { return vgpu.DomainUUID(name) }

// Resolve decides what each gpus[] entry of a valid vm gets from inv (nil when
// opts.Offline). A selector that matches nothing is an error wrapping host.ErrNotFound that
// names the selector, unless the entry's fallback is virtio-gpu.
func Resolve(vm *VM, inv *host.Inventory, opts ResolveOptions) (*Allocation, error) {
	if vm == nil {
		return nil, fmt.Errorf("resolve: no spec: %w", host.ErrInvalid)
	}
	if inv == nil && !opts.Offline {
		return nil, fmt.Errorf("resolve %s: no inventory (use offline mode to render without a host): %w", vm.Metadata.Name, host.ErrInvalid)
	}
	if opts.Offline {
		inv = nil
	}
	r := &resolver{vm: vm, inv: inv, used: map[host.Address]bool{}, mdevLeft: map[string]int{}}
	for _, a := range opts.InUse {
		r.used[a] = true
	}
	alloc := &Allocation{NUMANode: -1, Offline: inv == nil}

	vt := vm.Spec.VirtType
	if opts.VirtType != "" {
		if opts.VirtType != "kvm" && opts.VirtType != "qemu" {
			return nil, fmt.Errorf("resolve %s: virt type %q: want kvm or qemu: %w", vm.Metadata.Name, opts.VirtType, host.ErrInvalid)
		}
		vt = opts.VirtType
	}
	switch vt {
	case "kvm", "qemu":
		alloc.VirtType = vt
	default: // auto
		alloc.VirtType = "kvm"
		if inv != nil && !host.Exists(filepath.Join(inv.Root, "dev", "kvm")) {
			alloc.VirtType = "qemu"
			alloc.Notes = append(alloc.Notes, "virtType auto: no /dev/kvm on this host, using qemu (TCG)")
		}
	}

	for i, g := range vm.Spec.GPUs {
		ga, err := r.gpu(i, g)
		if err != nil {
			if g.Fallback == "virtio-gpu" && (errors.Is(err, host.ErrNotFound) || errors.Is(err, errOffline)) {
				ga = GPUAllocation{Index: i, Kind: KindVirtioGPU, FellBack: true, Reason: err.Error()}
			} else {
				return nil, fmt.Errorf("resolve %s: %w", vm.Metadata.Name, err)
			}
		}
		alloc.GPUs = append(alloc.GPUs, ga)
	}
	alloc.Notes = append(alloc.Notes, r.notes...)
	r.placeNUMA(alloc)
	if err := r.sizeMMIO(alloc); err != nil {
		return nil, err
	}
	return alloc, nil
}

// errOffline marks selectors that cannot be resolved without an inventory (a bad spec for
// render --offline, so it wraps host.ErrInvalid).
var errOffline = fmt.Errorf("offline render has no inventory: %w", host.ErrInvalid)

type resolver struct {
	vm       *VM
	inv      *host.Inventory
	used     map[host.Address]bool
	mdevLeft map[string]int // parent/type -> instances still available
	// mdevNext is the VM-wide index of the next mdev instance (vgpu.InstanceUUID numbers a
	// VM's instances across all its gpus[] entries).
	mdevNext int
	notes    []string
}

func (r *resolver) device(a host.Address) *host.Device {
	for i := range r.inv.Devices {
		if r.inv.Devices[i].Address == a {
			return &r.inv.Devices[i]
		}
	}
	return nil
}

func (r *resolver) gpu(i int, g GPU) (GPUAllocation, error) {
	ga := GPUAllocation{Index: i}
	switch {
	case g.Passthrough != nil:
		ga.Kind = KindPassthrough
		slots, err := r.passthrough(i, g.Passthrough)
		ga.Slots = slots
		return ga, err
	case g.VGPU != nil && g.VGPU.Mode == "vendor-vfio":
		ga.Kind = KindVendorVFIO
		slots, err := r.vendorVFIO(i, g.VGPU)
		ga.Slots = slots
		return ga, err
	case g.VGPU != nil:
		ga.Kind = KindMdev
		m, err := r.mdev(i, g.VGPU)
		ga.Mdevs = m
		return ga, err
	case g.VirtioGPU != nil:
		ga.Kind = KindVirtioGPU
		return ga, nil
	}
	return ga, fmt.Errorf("spec.gpus[%d]: empty entry: %w", i, host.ErrInvalid)
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
			return nil, fmt.Errorf("%s: no PCI device %s in the inventory: %w", path, a, host.ErrNotFound)
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
		if !d.IsGPU || d.PhysFn != nil || !matches(d, p) {
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

func matches(d *host.Device, p *Passthrough) bool {
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
	type cand struct {
		parent string
		t      *host.MdevType
	}
	var cands []cand
	var offered []vgpu.Profile
	for pi := range r.inv.MdevParents {
		mp := &r.inv.MdevParents[pi]
		types := make([]vgpu.Profile, len(mp.Types))
		for ti, t := range mp.Types {
			types[ti] = vgpu.Profile{ID: t.ID, Name: t.Name}
		}
		offered = append(offered, types...)
		ti, err := vgpu.LookupProfile(types, v.Profile, "on "+mp.Parent)
		if errors.Is(err, host.ErrInvalid) {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if err == nil {
			cands = append(cands, cand{mp.Parent, &mp.Types[ti]})
		}
	}
	if len(cands) == 0 {
		return nil, fmt.Errorf("%s: no mdev type matches profile %q (%s): %w", path, v.Profile, vgpu.DidYouMean(offered, v.Profile), host.ErrNotFound)
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
					return nil, fmt.Errorf("%s: %s is not a VF with NVIDIA vendor-VFIO vGPU support in the inventory: %w", path, a, host.ErrNotFound)
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

// placeNUMA implements numa: auto — the host node of the first assigned GPU.
func (r *resolver) placeNUMA(alloc *Allocation) {
	if r.vm.Spec.NUMA != "auto" {
		return
	}
	if r.inv == nil {
		alloc.Notes = append(alloc.Notes, "numa auto: offline, no placement")
		return
	}
	for _, g := range alloc.GPUs {
		var a *host.Address
		switch {
		case len(g.Slots) > 0:
			a = &g.Slots[0].Functions[0]
		case len(g.Mdevs) > 0:
			for _, mp := range r.inv.MdevParents {
				if mp.Parent == g.Mdevs[0].Parent && mp.Address != nil {
					a = mp.Address
				}
			}
		}
		if a == nil {
			continue
		}
		if d := r.device(*a); d != nil && d.NUMANode >= 0 && d.LocalCPUs != "" {
			alloc.NUMANode, alloc.CPUSet = d.NUMANode, d.LocalCPUs
			return
		}
		alloc.Notes = append(alloc.Notes, fmt.Sprintf("numa auto: %s reports no NUMA node, no placement", a))
		return
	}
	alloc.Notes = append(alloc.Notes, "numa auto: no physical GPU assigned, no placement")
}

// sizeMMIO implements spec.mmio64: the sum of the assigned 64-bit BARs rounded up to a power
// of two, used only when it exceeds the firmware's default window.
func (r *resolver) sizeMMIO(alloc *Allocation) error {
	switch m := r.vm.Spec.MMIO64; m {
	case "off":
		return nil
	case "", "auto":
	default:
		sz, err := ParseSize(m)
		if err != nil {
			return fmt.Errorf("resolve %s: spec.mmio64: %v: %w", r.vm.Metadata.Name, err, host.ErrInvalid)
		}
		alloc.MMIO64MiB = sz.Bytes >> 20
		return nil
	}
	var sum uint64
	for _, g := range alloc.GPUs {
		for _, s := range g.Slots {
			sum += s.BAR64
		}
	}
	if sum == 0 {
		return nil
	}
	mib := nextPow2((sum + (1<<20 - 1)) >> 20)
	if mib <= OVMFDefaultMMIO64MiB {
		alloc.Notes = append(alloc.Notes, fmt.Sprintf("mmio64 auto: 64-bit BARs need %d MiB, within the firmware default of %d MiB", mib, OVMFDefaultMMIO64MiB))
		return nil
	}
	alloc.MMIO64MiB = mib
	return nil
}

func nextPow2(n uint64) uint64 {
	p := uint64(1)
	for p < n {
		p <<= 1
	}
	return p
}
