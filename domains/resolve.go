package domains

import (
	"errors"
	"fmt"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/vgpu"
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
	// VCPUPins is the host CPU set of each vCPU (cpu.pin); EmulatorPin the emulator threads'.
	VCPUPins    []string `json:"vcpu_pins,omitempty"`
	EmulatorPin string   `json:"emulator_pin,omitempty"`
	// Notes explain choices a user may want to know about (placeholders, defaults kept).
	Notes []string `json:"notes,omitempty"`

	// NICVFs are the SR-IOV NIC VFs of devices.nics[] (type hostdev), checked on the host
	// (ResolveOptions.HostDevices); Claims lists them after the GPUs' claims.
	NICVFs []host.Address `json:"-"`
	// Disks are the files of spec.disks and SeedISO the cloud-init seed's path ("" without
	// cloudInit), listed once by Resolve under ResolveOptions.ImagesDir; Storage returns them.
	Disks   []DiskFile `json:"-"`
	SeedISO string     `json:"-"`
	// storageDir is the images directory Disks and SeedISO are for; "" when Resolve listed none.
	storageDir string
}

// GPUAllocation is the resolution of one gpus[] entry.
type GPUAllocation struct {
	Index int       `json:"index"`
	Kind  vgpu.Kind `json:"kind"`
	// Slots are the host PCI slots given to the VM (passthrough, vendor-vfio): one per GPU.
	Slots []Slot `json:"slots,omitempty"`
	// Mdevs are the mediated devices (kind mdev).
	Mdevs []MdevAllocation `json:"mdevs,omitempty"`
	// Managed is true when libvirt owns the binding of the entry's functions (passthrough with
	// managed: true); vgpu-host then binds nothing for it.
	Managed bool `json:"managed,omitempty"`
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
	// BAR64 is the sum of the functions' 64-bit memory BARs, in bytes; BAR64Max the largest.
	BAR64    uint64 `json:"bar64_bytes,omitempty"`
	BAR64Max uint64 `json:"bar64_max_bytes,omitempty"`
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
	// ThreadSiblings are the host's SMT sibling sets (host.ThreadSiblings), for cpu.pin: auto;
	// nil treats every CPU as a core of its own.
	ThreadSiblings map[int][]int
	// HostDevices resolves the spec's other host devices on Root too, as plan and apply do:
	// each devices.nics[] VF must be an SR-IOV VF on vfio-pci (Allocation.NICVFs), each
	// devices.usb[] device plugged in. A failure is a *HostDeviceError. Render leaves them to
	// libvirt.
	HostDevices bool
	Root        host.Root
	// ImagesDir is where the VM's overlays and seed go (BuildOptions.ImagesDir): when set,
	// Resolve lists the disk files and the seed there once (Allocation.Disks, SeedISO).
	ImagesDir string
}

// DomainUUID is vgpu.DomainUUID: the domain UUID vgpu-host gives VM name.
func DomainUUID(name string) string { return vgpu.DomainUUID(name) }

// Resolve decides what each gpus[] entry of a valid vm gets from inv (nil when
// opts.Offline). A selector that matches nothing is an error wrapping host.ErrNotFound that
// names the selector, unless the entry's fallback is virtio-gpu; a *HeldError when it matches
// only devices in opts.InUse.
func Resolve(vm *VM, inv *host.Inventory, opts ResolveOptions) (*Allocation, error) {
	alloc, err := resolve(vm, inv, opts)
	if err != nil {
		return nil, explainHeld(vm, inv, opts, err)
	}
	return alloc, nil
}

func resolve(vm *VM, inv *host.Inventory, opts ResolveOptions) (*Allocation, error) {
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
		if inv != nil && !inv.HasKVM() {
			alloc.VirtType = "qemu"
			alloc.Notes = append(alloc.Notes, "virtType auto: no /dev/kvm on this host, using qemu (TCG)")
		}
	}

	for i, g := range vm.Spec.GPUs {
		ga, err := r.gpu(i, g)
		if err != nil {
			if g.Fallback == "virtio-gpu" && (errors.Is(err, host.ErrNotFound) || errors.Is(err, errOffline)) {
				ga = GPUAllocation{Index: i, Kind: vgpu.VirtioGPU, FellBack: true, Reason: err.Error()}
			} else {
				return nil, fmt.Errorf("resolve %s: %w", vm.Metadata.Name, err)
			}
		}
		alloc.GPUs = append(alloc.GPUs, ga)
	}
	alloc.Notes = append(alloc.Notes, r.notes...)
	if vm.Spec.OS == "windows11" && alloc.VirtType == "qemu" {
		alloc.Notes = append(alloc.Notes, "os windows11: the Hyper-V enlightenments need KVM; left out under qemu (TCG)")
	}
	r.placeNUMA(alloc)
	placePins(vm, alloc, opts.ThreadSiblings)
	if err := r.sizeMMIO(alloc); err != nil {
		return nil, err
	}
	if opts.HostDevices && inv != nil {
		var err error
		if alloc.NICVFs, err = resolveNICVFs(opts.Root, vm); err != nil {
			return nil, err
		}
		if err := checkUSB(opts.Root, vm); err != nil {
			return nil, err
		}
	}
	if opts.ImagesDir != "" {
		bo := BuildOptions{ImagesDir: opts.ImagesDir}
		alloc.Disks, alloc.SeedISO, alloc.storageDir = vm.DiskFiles(bo), vm.SeedISOPath(bo), bo.imagesDir()
	}
	return alloc, nil
}

// errOffline marks selectors that cannot be resolved without an inventory (a bad spec for
// render --offline, so it wraps host.ErrInvalid).
var errOffline error = offlineError{}

// offlineError is errOffline's type: a value the compiler lays out as data, where
// fmt.Errorf would run at every start of every binary that links domains.
type offlineError struct{}

func (offlineError) Error() string {
	return "offline render has no inventory: " + host.ErrInvalid.Error()
}
func (offlineError) Unwrap() error { return host.ErrInvalid }

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
	k, err := kindFor(g)
	if err != nil {
		return GPUAllocation{Index: i}, fmt.Errorf("spec.gpus[%d]: %w", i, err)
	}
	ga, err := k.resolve(r, i, g)
	ga.Index = i
	return ga, err
}

// placeNUMA implements numa: auto — the host node of the first assigned GPU.
func (r *resolver) placeNUMA(alloc *Allocation) {
	if r.vm.Spec.NUMA != "auto" && !pinAuto(r.vm) {
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
	var sum, largest uint64
	for _, g := range alloc.GPUs {
		for _, s := range g.Slots {
			sum += s.BAR64
			largest = max(largest, s.BAR64Max)
		}
	}
	if sum == 0 {
		return nil
	}
	// The window must hold them all, and the largest in at most half of it (WindowFor).
	mib := WindowFor(sum, largest) >> 20
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
