package lifecycle

import (
	"context"
	"errors"
	"fmt"

	"libvirt.org/go/libvirtxml"

	"github.com/vgpu-host/vgpu-host/domains"
	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/internal/lazy"
	"github.com/vgpu-host/vgpu-host/ledger"
	"github.com/vgpu-host/vgpu-host/step"
	"github.com/vgpu-host/vgpu-host/vgpu"
	"github.com/vgpu-host/vgpu-host/virt"
)

// IncomingOp is what the source of a migration asks its target's vgpu-host (docs/migrate.md).
type IncomingOp string

// The target's operations, in the order a migration uses them.
const (
	// OpPlan resolves the devices the VM would get here and the steps it would take; it
	// changes nothing (migrate --dry-run).
	OpPlan IncomingOp = "plan"
	// OpPrepare reserves the devices in this host's ledger (phase incoming) and takes the
	// host steps they need (create the mdev, assign the vendor vGPU type), journalled as apply
	// journals them.
	OpPrepare IncomingOp = "prepare"
	// OpCommit records the migrated domain as this host's VM (phase applied, with a define
	// step, so destroy here stops and undefines it). It refuses while the domain does not run
	// here.
	OpCommit IncomingOp = "commit"
	// OpAbort undoes a prepare: the journal's steps newest first, then the reservation. It
	// refuses while the domain runs here (the migration went through: commit instead).
	OpAbort IncomingOp = "abort"
)

// MigratingDevice is one host device of a migrating VM: what it is on the source, and (in the
// target's answer) what the target gives the VM instead.
type MigratingDevice struct {
	// Kind is the ledger's claim kind: mdev or vendor-vgpu (pci devices do not migrate).
	Kind vgpu.ClaimKind `json:"kind"`
	// Type is the mdev type ID ("mtty-2", "nvidia-558") or the vendor vGPU type
	// ("NVIDIA H100-3-40C", its ID when the source knew no name).
	Type string `json:"type"`
	// Source is the source's mdev UUID or VF address; Target the target's.
	Source string `json:"source"`
	Target string `json:"target,omitempty"`
}

// IncomingRequest is one request of a migration's source to its target. It is decoded
// strictly (unknown fields refused) and every decision on it is made on these typed fields.
type IncomingRequest struct {
	Op IncomingOp `json:"op"`
	VM string     `json:"vm"`
	// Devices are the VM's host devices on the source, in its spec order (plan, prepare).
	Devices []MigratingDevice `json:"devices,omitempty"`
	// VirtType is the domain type the VM runs with on the source (kvm or qemu).
	VirtType string `json:"virt_type,omitempty"`
}

// IncomingReply is the target's answer.
type IncomingReply struct {
	VM string `json:"vm"`
	// Devices are the request's, with Target filled in (plan, prepare).
	Devices []MigratingDevice `json:"devices,omitempty"`
	// Steps are the host steps the target takes (plan) or took (prepare), or undid (abort).
	Steps []string `json:"steps"`
	// Claims are the target's ledger claims for the VM.
	Claims []ledger.Claim `json:"claims,omitempty"`
	// URI is the target's libvirt connection, as the target's vgpu-host sees it.
	URI string `json:"uri"`
}

// Check refuses a malformed request (host.ErrInvalid).
func (r *IncomingRequest) Check() error {
	switch r.Op {
	case OpPlan, OpPrepare, OpCommit, OpAbort:
	default:
		return fmt.Errorf("migration request: unknown op %q (plan, prepare, commit, abort): %w", r.Op, host.ErrInvalid)
	}
	if err := host.CheckComponent("VM name", r.VM); err != nil {
		return fmt.Errorf("migration request: %w", err)
	}
	if r.VirtType != "" && r.VirtType != "kvm" && r.VirtType != "qemu" {
		return fmt.Errorf("migration request: virt_type %q: want kvm or qemu: %w", r.VirtType, host.ErrInvalid)
	}
	for i, d := range r.Devices {
		if d.Kind != vgpu.ClaimMdev && d.Kind != vgpu.ClaimVendorVGPU {
			return fmt.Errorf("migration request: devices[%d]: kind %q does not migrate (mdev, vendor-vgpu): %w", i, d.Kind, host.ErrInvalid)
		}
		if d.Type == "" || d.Source == "" {
			return fmt.Errorf("migration request: devices[%d]: needs type and source: %w", i, host.ErrInvalid)
		}
	}
	return nil
}

// Incoming serves one request of a migration's source: this Lifecycle is the target's.
// Prepare, commit and abort hold the VM's lock, as apply does.
func (l *Lifecycle) Incoming(ctx context.Context, req IncomingRequest) (*IncomingReply, error) {
	if err := req.Check(); err != nil {
		return nil, err
	}
	name := req.VM
	if req.Op != OpPlan {
		unlock, err := l.o.Ledger.LockVM(name)
		if err != nil {
			return nil, fmt.Errorf("migration target %s: %w", name, err)
		}
		defer unlock()
	}
	switch req.Op {
	case OpPlan:
		return l.incomingPlanOnly(ctx, req)
	case OpPrepare:
		return l.incomingPrepare(ctx, req)
	case OpCommit:
		return l.incomingCommit(ctx, name)
	default:
		return l.incomingAbort(ctx, name)
	}
}

// incomingSpec is the spec the target resolves: one gpus[] entry per migrating device, asking
// for the same type, so the target's own resolver, safety checks and instance numbering
// choose its device.
func incomingSpec(req IncomingRequest) *domains.VM {
	vm := &domains.VM{APIVersion: "vgpu-host/v1", Kind: "VirtualMachine"}
	vm.Metadata.Name = req.VM
	vm.Spec.VirtType = req.VirtType
	for _, d := range req.Devices {
		g := domains.GPU{VGPU: &domains.VGPU{Profile: d.Type}}
		if d.Kind == vgpu.ClaimVendorVGPU {
			g.VGPU.Mode = "vendor-vfio"
		}
		vm.Spec.GPUs = append(vm.Spec.GPUs, g)
	}
	return vm
}

// vendorTypeOf is the vendor vGPU type a vendor-vgpu claim's Detail names: "NAME" of
// "ID (NAME)", else "ID".
// Compiled on first use (TestNoCompileAtInit): not at every start of the binary.
var vendorDetail = lazy.Regexp{Expr: `^(\d+)(?: \((.+)\))?$`}

func vendorTypeOf(detail string) string {
	m := vendorDetail.Get().FindStringSubmatch(detail)
	if m == nil {
		return detail
	}
	if m[2] != "" {
		return m[2]
	}
	return m[1]
}

// incomingPlan resolves the request's devices on this host: the target's allocation (each
// device's target filled in), its claims and its host steps. It changes nothing.
func (l *Lifecycle) incomingPlan(ctx context.Context, req IncomingRequest) (*IncomingReply, *VMPlan, error) {
	name := req.VM
	if _, err := l.o.Conn.State(ctx, name); err == nil {
		return nil, nil, fmt.Errorf("migration target: a domain %s exists on %s already: %w", name, l.o.Conn.URI(), host.ErrBusy)
	} else if !virt.IsNotFound(err) {
		return nil, nil, fmt.Errorf("migration target: look up domain %s: %w", name, err)
	}
	inv, err := l.o.Scan(l.o.Root)
	if err != nil {
		return nil, nil, fmt.Errorf("migration target %s: scan host: %w", name, err)
	}
	vm := incomingSpec(req)
	vt := req.VirtType
	if vt == "" {
		vt = "qemu"
	}
	var known map[string]bool
	if err := l.o.Ledger.View(func(b *ledger.Book) error {
		if e := b.VM(name); e != nil {
			return fmt.Errorf("migration target: VM %s is in this host's ledger already (phase %s); vgpu-host destroy %s here first if it is stale: %w", name, e.Phase, name, host.ErrBusy)
		}
		known = map[string]bool{}
		for _, n := range b.Names() {
			known[n] = true
		}
		return nil
	}); err != nil {
		return nil, nil, err
	}
	fp, fm, err := l.foreign(ctx, func(n string) bool { return known[n] })
	if err != nil {
		return nil, nil, err
	}
	var p *VMPlan
	if err := l.o.Ledger.View(func(b *ledger.Book) error {
		p, err = l.resolveIncoming(ctx, vm, vt, inv, b, fp, fm)
		return err
	}); err != nil {
		return nil, nil, err
	}
	rep, err := incomingReply(req, p)
	rep.URI = l.o.Conn.URI()
	return rep, p, err
}

// resolveIncoming is resolve for the devices only: the allocation, claims, host steps and
// safety checks; no storage, no domain (the domain comes with the migration).
func (l *Lifecycle) resolveIncoming(ctx context.Context, vm *domains.VM, vt string, inv *host.Inventory, book *ledger.Book, fp map[host.Address]string, fm map[string]string) (*VMPlan, error) {
	name := vm.Metadata.Name
	alloc, err := domains.Resolve(vm, inv, domains.ResolveOptions{VirtType: vt, InUse: inUse(book, name, fp)})
	if err != nil {
		return nil, fmt.Errorf("migration target %s: no equivalent device here: %w", name, err)
	}
	p := &VMPlan{VM: name, VirtType: vt, Alloc: alloc, Claims: alloc.Claims()}
	for _, g := range alloc.GPUs {
		if g.FellBack || g.Kind == vgpu.VirtioGPU {
			return nil, fmt.Errorf("migration target %s: gpus[%d]: no equivalent device here: %w", name, g.Index, host.ErrBusy)
		}
	}
	if err := checkClaims(p.Claims, name, book.Holder, fm); err != nil {
		return nil, fmt.Errorf("migration target %s: %w", name, err)
	}
	hostSteps, notes, err := alloc.HostSteps(&domains.Numbering{Owned: func(c ledger.Claim) bool { return book.Holder(c) == name }})
	if err != nil {
		return nil, err
	}
	p.Alloc.Notes = append(p.Alloc.Notes, notes...)
	p.add(hostSteps...)
	if err := l.preflight(ctx, p); err != nil {
		return nil, err
	}
	if err := p.Refused(); err != nil {
		return nil, err
	}
	return p, nil
}

// incomingReply pairs the request's devices with the plan's claims: the n-th device of a kind
// with the n-th claim of that kind (both in spec order).
func incomingReply(req IncomingRequest, p *VMPlan) (*IncomingReply, error) {
	rep := &IncomingReply{VM: req.VM, Claims: p.Claims, Steps: []string{}}
	for _, s := range p.Steps {
		rep.Steps = append(rep.Steps, s.Text())
	}
	next := map[vgpu.ClaimKind]int{}
	for _, d := range req.Devices {
		i := next[d.Kind]
		var c *ledger.Claim
		for j, n := 0, 0; j < len(p.Claims); j++ {
			if p.Claims[j].Kind != d.Kind {
				continue
			}
			if n == i {
				c = &p.Claims[j]
				break
			}
			n++
		}
		if c == nil {
			return rep, fmt.Errorf("migration target %s: no %s here for %s %s: %w", req.VM, d.Kind, d.Type, d.Source, host.ErrBusy)
		}
		next[d.Kind] = i + 1
		d.Target = c.ID
		rep.Devices = append(rep.Devices, d)
	}
	return rep, nil
}

func (l *Lifecycle) incomingPlanOnly(ctx context.Context, req IncomingRequest) (*IncomingReply, error) {
	rep, _, err := l.incomingPlan(ctx, req)
	return rep, err
}

// incomingPrepare claims the devices (phase incoming) and takes their host steps, each
// journalled before it is taken; a failure undoes what it took and forgets the reservation.
func (l *Lifecycle) incomingPrepare(ctx context.Context, req IncomingRequest) (*IncomingReply, error) {
	name := req.VM
	// The plan's checks first (no domain of that name here, the devices resolve), outside the
	// ledger's transaction; its reply is built again from the plan the transaction claims.
	if _, _, err := l.incomingPlan(ctx, req); err != nil {
		return nil, err
	}
	// Resolve again inside the transaction that claims: the ledger may have changed since.
	var plan *VMPlan
	fp, fm, err := l.foreign(ctx, func(string) bool { return true })
	if err != nil {
		return nil, err
	}
	inv, err := l.o.Scan(l.o.Root)
	if err != nil {
		return nil, fmt.Errorf("migration target %s: scan host: %w", name, err)
	}
	vt := req.VirtType
	if vt == "" {
		vt = "qemu"
	}
	if err := l.o.Ledger.Update(func(b *ledger.Book) error {
		if e := b.VM(name); e != nil {
			return fmt.Errorf("migration target: VM %s is in this host's ledger already (phase %s): %w", name, e.Phase, host.ErrBusy)
		}
		p, err := l.resolveIncoming(ctx, incomingSpec(req), vt, inv, b, fp, fm)
		if err != nil {
			return err
		}
		plan = p
		if err := b.Claim(name, p.Claims...); err != nil {
			return err
		}
		e := b.Entry(name)
		e.Phase, e.URI, e.Pool = ledger.PhaseIncoming, l.o.Conn.URI(), l.o.Pool
		return nil
	}); err != nil {
		return nil, err
	}
	rep, err := incomingReply(req, plan)
	if err != nil {
		return nil, l.fail(ctx, name, true, nil, err)
	}
	rep.URI = l.o.Conn.URI()
	rep.Steps = []string{}
	env := l.env(name, nil, plan)
	var taken []ledger.JournalStep
	for _, pl := range plan.Steps {
		ps := pl.Step
		var n int
		if err := l.o.Ledger.Update(func(b *ledger.Book) error {
			n = b.Entry(name).Record(string(ps.Action()), ps.Target(), ps.Params())
			return nil
		}); err != nil {
			return nil, l.fail(ctx, name, true, taken, fmt.Errorf("migration target %s: record %s: %w", name, ps.Text(), err))
		}
		taken = append(taken, ledger.JournalStep{N: n, Action: string(ps.Action()), Target: ps.Target(), Params: ps.Params()})
		if err := l.take(ctx, name, ps, step.RecordOf(ps), env, n); err != nil {
			return nil, l.fail(ctx, name, true, taken, fmt.Errorf("migration target %s: %s: %w", name, ps.Text(), err))
		}
		if err := l.o.Ledger.Update(func(b *ledger.Book) error { b.Entry(name).Mark(n, ledger.StepDone); return nil }); err != nil {
			return nil, l.fail(ctx, name, true, taken, fmt.Errorf("migration target %s: record %s: %w", name, ps.Text(), err))
		}
		rep.Steps = append(rep.Steps, ps.Text())
	}
	return rep, nil
}

// incomingCommit makes the reservation the VM's: phase applied, and a define step (done) in
// its journal, so destroy here stops and undefines the migrated domain before it releases the
// devices. The domain must run here.
func (l *Lifecycle) incomingCommit(ctx context.Context, name string) (*IncomingReply, error) {
	st, err := l.o.Conn.State(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("migration target: commit %s: the domain is not here (%w); abort instead", name, err)
	}
	vt := "qemu"
	if x, err := l.o.Conn.DomainXML(ctx, name); err == nil {
		var d libvirtxml.Domain
		if d.Unmarshal(x) == nil && d.Type != "" {
			vt = d.Type
		}
	}
	rep := &IncomingReply{VM: name, URI: l.o.Conn.URI(), Steps: []string{}}
	err = l.o.Ledger.Update(func(b *ledger.Book) error {
		e := b.VM(name)
		if e == nil {
			return fmt.Errorf("migration target: commit %s: no reservation in this host's ledger %s: %w", name, l.o.Ledger.Path(), host.ErrNotFound)
		}
		if e.Phase == ledger.PhaseApplied {
			rep.Claims = e.Claims
			return errNoop // committed already
		}
		if e.Phase != ledger.PhaseIncoming {
			return fmt.Errorf("migration target: commit %s: its ledger entry is %s, not incoming: %w", name, e.Phase, host.ErrBusy)
		}
		d := step.Define{VM: name, VirtType: vt}
		e.Mark(e.Record(string(d.Action()), d.Target(), d.Params()), ledger.StepDone)
		e.Phase, e.SpecHash = ledger.PhaseApplied, "migrated"
		rep.Claims = e.Claims
		rep.Steps = append(rep.Steps, fmt.Sprintf("record domain %s (%s) as this host's VM", name, st))
		return nil
	})
	if errors.Is(err, errNoop) {
		err = nil
	}
	return rep, err
}

// incomingAbort undoes a prepare. It refuses while the domain exists here: the migration went
// through, and undoing the devices would pull them from under a running guest.
func (l *Lifecycle) incomingAbort(ctx context.Context, name string) (*IncomingReply, error) {
	rep := &IncomingReply{VM: name, URI: l.o.Conn.URI(), Steps: []string{}}
	if st, err := l.o.Conn.State(ctx, name); err == nil {
		return nil, fmt.Errorf("migration target: abort %s: the domain is here (%s): the migration went through; commit instead: %w", name, st, host.ErrBusy)
	} else if !virt.IsNotFound(err) {
		return nil, fmt.Errorf("migration target: abort %s: look up domain: %w", name, err)
	}
	var phase string
	if err := l.o.Ledger.View(func(b *ledger.Book) error {
		if e := b.VM(name); e != nil {
			phase = e.Phase
		}
		return nil
	}); err != nil {
		return nil, err
	}
	switch phase {
	case "":
		return rep, nil // nothing reserved (prepare failed and undid itself): nothing to do
	case ledger.PhaseIncoming:
	default:
		return nil, fmt.Errorf("migration target: abort %s: its ledger entry is %s, not incoming: %w", name, phase, host.ErrBusy)
	}
	undone, err := l.teardown(ctx, name)
	rep.Steps = append(rep.Steps, undone...)
	return rep, err
}
