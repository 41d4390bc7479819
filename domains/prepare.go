package domains

import (
	"errors"
	"fmt"

	"libvirt.org/go/libvirtxml"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/step"
	"github.com/vgpu-host/vgpu-host/vgpu"
)

// HeldError is a Resolve failure only because devices in ResolveOptions.InUse are taken: the
// spec resolves on this host when nobody holds anything. It wraps the failure (host.ErrNotFound).
type HeldError struct{ Err error }

func (e *HeldError) Error() string { return e.Err.Error() }

// Unwrap returns the failure.
func (e *HeldError) Unwrap() error { return e.Err }

// PrepareOptions tune Prepare: Resolve's and Build's options, and what the caller adds.
type PrepareOptions struct {
	Resolve ResolveOptions
	Build   BuildOptions
	// Owned reports whether the VM holds a claim in the ledger already (Numbering.Owned).
	Owned func(c vgpu.Claim) bool
	// Customize, when set, edits the built domain before it is marshalled.
	Customize func(d *libvirtxml.Domain) error
	// PhysAddrBits is the host's physical address width (host.PhysAddrBits; 0 when unknown),
	// for PredictMMIO.
	PhysAddrBits uint
}

// Prepared is a VM resolved and built: what plan and apply take from this package, from one
// call.
type Prepared struct {
	// Alloc is Resolve's allocation, with HostSteps' notes added.
	Alloc *Allocation
	// Claims are Alloc.Claims(); HostSteps are Alloc.HostSteps.
	Claims    []vgpu.Claim
	HostSteps []step.Step
	// Domain is the built (and customized) domain, XML its Marshal.
	Domain *libvirtxml.Domain
	XML    string
	// MMIO is PredictMMIO's prediction for Domain (nil when its BARs are small).
	MMIO *MMIOFit
}

// Prepare resolves vm against inv (Resolve), lists its claims and host steps, builds,
// customizes and marshals its domain and predicts its 64-bit MMIO window, in that order; the
// first error stops it. A customize error reads "customize domain NAME: ...".
func Prepare(vm *VM, inv *host.Inventory, opts PrepareOptions) (*Prepared, error) {
	alloc, err := Resolve(vm, inv, opts.Resolve)
	if err != nil {
		return nil, err
	}
	p := &Prepared{Alloc: alloc, Claims: alloc.Claims()}
	var notes []string
	if p.HostSteps, notes, err = alloc.HostSteps(&Numbering{Owned: opts.Owned}); err != nil {
		return nil, err
	}
	alloc.Notes = append(alloc.Notes, notes...)
	name := vm.Metadata.Name
	if p.Domain, err = Build(vm, alloc, opts.Build); err != nil {
		return nil, err
	}
	if opts.Customize != nil {
		if err := opts.Customize(p.Domain); err != nil {
			return nil, fmt.Errorf("customize domain %s: %w", name, err)
		}
	}
	if p.XML, err = Marshal(p.Domain); err != nil {
		return nil, fmt.Errorf("marshal domain %s: %w", name, err)
	}
	p.MMIO = PredictMMIO(alloc, p.Domain, opts.PhysAddrBits)
	return p, nil
}

// explainHeld turns err, a failure of Resolve with opts, into a *HeldError when the spec
// resolves with nothing in use: the devices exist, others hold them.
func explainHeld(vm *VM, inv *host.Inventory, opts ResolveOptions, err error) error {
	var de *HostDeviceError
	if len(opts.InUse) == 0 || !errors.Is(err, host.ErrNotFound) || errors.As(err, &de) {
		return err
	}
	if _, ferr := resolve(vm, inv, ResolveOptions{VirtType: opts.VirtType}); ferr == nil {
		return &HeldError{Err: err}
	}
	return err
}
