package domains

import (
	"fmt"

	"libvirt.org/go/libvirtxml"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/internal/lazy"
	"github.com/vgpu-host/vgpu-host/step"
	"github.com/vgpu-host/vgpu-host/vgpu"
)

// GPUKind is the behaviour of one way a guest gets a GPU (vgpu.Kind names it). Each kind lives in
// one file, kind_NAME.go, and knows:
//
//   - which gpus[] entries ask for it (wants) and how such an entry is resolved against the
//     inventory: its candidates and their placement (resolve);
//   - how the allocation is rendered into the domain: its hostdevs or video device (render);
//   - what the allocation holds in the ledger (claims);
//   - which host changes apply takes for it, as typed steps whose undo destroy runs (hostSteps).
//
// What the guest must show (verify) is read back from the defined domain's hostdevs, the same
// for every kind. Adding a kind means adding its file and its entry in allKinds.
type GPUKind interface {
	// Name is the kind's stable name.
	Name() vgpu.Kind
	wants(g GPU) bool
	resolve(r *resolver, i int, g GPU) (GPUAllocation, error)
	render(p *Builder, g GPU, ga GPUAllocation, d *libvirtxml.Domain, v *video) error
	claims(ga GPUAllocation) []vgpu.Claim
	hostSteps(ga GPUAllocation, n *Numbering) ([]step.Step, []string, error)
}

// allKinds are the kinds. A list here rather than an init in each kind's file: package
// initialisers run at every start of every binary that links domains (TestKindsRegistered
// checks the list against vgpu.Kinds).
func allKinds() []GPUKind {
	return []GPUKind{mdevKind{}, migVendorVFIOKind{}, passthroughKind{}, sriovVFKind{}, vendorVFIOKind{}, virtioKind{}}
}

// kinds are the kinds by name, built on first use.
var kinds = lazy.Value[map[vgpu.Kind]GPUKind]{New: func() map[vgpu.Kind]GPUKind {
	m := make(map[vgpu.Kind]GPUKind)
	for _, k := range allKinds() {
		m[k.Name()] = k
	}
	return m
}}

// kindFor returns the kind spec entry g asks for.
func kindFor(g GPU) (GPUKind, error) {
	for _, name := range vgpu.Kinds {
		if k, ok := kinds.Get()[name]; ok && k.wants(g) {
			return k, nil
		}
	}
	return nil, fmt.Errorf("empty entry: %w", host.ErrInvalid)
}

// video is what the GPU kinds decide about the domain's video device.
type video struct {
	// virtio is the virtio-gpu asked for (or fallen back to); nil when none.
	virtio *VirtioGPU
	// gpuDisplay is true when an assigned GPU or vGPU is the guest's display.
	gpuDisplay bool
}

// Numbering hands out the VM-wide instance numbers the host records for a VM's vGPUs (mdev
// instances and vendor vGPUs are numbered separately, each from 0, in spec order), and knows
// which claims the VM holds already.
type Numbering struct {
	// Owned reports whether the VM already holds c in the ledger.
	Owned func(c vgpu.Claim) bool

	mdev, vendor int
}

func (n *Numbering) owned(c vgpu.Claim) bool { return n.Owned != nil && n.Owned(c) }

// Claims lists the devices the allocation takes, in spec order: the GPUs', then the NIC VFs'.
func (a *Allocation) Claims() []vgpu.Claim {
	var out []vgpu.Claim
	for _, g := range a.GPUs {
		if k, ok := kinds.Get()[g.Kind]; ok {
			out = append(out, k.claims(g)...)
		}
	}
	return append(out, a.nicClaims()...)
}

// HostSteps lists the host changes apply takes for the allocation, in spec order, and notes
// about devices used as they are. n numbers the VM's vGPU instances.
func (a *Allocation) HostSteps(n *Numbering) ([]step.Step, []string, error) {
	var out []step.Step
	var notes []string
	for _, g := range a.GPUs {
		k, ok := kinds.Get()[g.Kind]
		if !ok {
			return nil, nil, fmt.Errorf("gpus[%d]: unknown allocation kind %q: %w", g.Index, g.Kind, host.ErrInvalid)
		}
		s, ns, err := k.hostSteps(g, n)
		if err != nil {
			return nil, nil, err
		}
		out, notes = append(out, s...), append(notes, ns...)
	}
	return out, notes, nil
}
