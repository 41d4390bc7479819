package vfio

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/internal/future"
)

// Unbind restores every function of the IOMMU groups of addrs that vgpu-host moved to
// vfio-pci: driver_override as it was, unbound from vfio-pci, re-probed so the original driver
// comes back, and driverless what was driverless; then it checks the result. A named device
// that is not on vfio-pci is a no-op; one on vfio-pci that is not in the ledger is refused
// (ErrNotInLedger, host.ErrRefused) unless Force, which restores it to its native driver.
// A function that cannot be restored stays in the ledger; the others are still restored.
func (b *Binder) Unbind(ctx context.Context, addrs []host.Address, opts UnbindOptions) (*Result, error) {
	// Which processes hold a /dev/vfio node is searched for while the groups are read, the
	// lock taken and the ledger read (#32); unbindTargets picks out the groups that move.
	family := []string{host.VFIODevFamily(b.Root)}
	held := future.Go(func() []host.Holder { return host.Holders(b.Root, family) })
	defer held.Wait() // no goroutine of the call outlives it
	groups, err := groupsOf(b.Root, addrs)
	if err != nil {
		return nil, err
	}
	r, unlock, err := b.start("unbind", opts.DryRun)
	if err != nil {
		return nil, err
	}
	defer unlock()
	targets, refusals := r.unbindTargets(groups, addrs, opts, held)
	if err := r.refuseOrWarn("unbind "+addrList(addrs), refusals, func(string) bool { return opts.Force }); err != nil {
		return r.res, err
	}
	resume := b.pauseForReturn(targets, opts.DryRun)
	defer resume() // once only: a panic in the restore must not leave the gate paused
	errs := []error{r.restoreTargets(ctx, targets)}
	resume()
	if opts.Persist {
		errs = append(errs, r.unpersist(groups, opts.DryRun))
	} else {
		r.persistedWarnings(groups)
	}
	r.groupStates(groups)
	return r.res, errors.Join(errs...)
}

// pauseForReturn pauses this process's own users of the NVIDIA driver's nodes while targets
// return to nvidia (a ledger entry naming it, or a native restore, whose driver the kernel
// picks): their NVML helpers start again after the resume, and so see the GPUs that came back
// (NVML lists the GPUs it found at its start). A dry run pauses nothing.
func (b *Binder) pauseForReturn(targets []unbindTarget, dryRun bool) (resume func()) {
	if !dryRun {
		for _, t := range targets {
			if t.native || t.e.Driver == host.NVIDIADriver {
				return b.nvidiaGate().Pause()
			}
		}
	}
	return func() {}
}

// unbindTarget is one function Unbind restores: to its ledger entry, or (native) to whatever
// driver the kernel probes.
type unbindTarget struct {
	e      Binding
	native bool
}

// unbindTargets decides, function by function, what Unbind does (res.Devices says it) and
// what refuses it: a function bound for another owner or moved by something else since, one on
// vfio-pci that vgpu-host did not bind (unless forced), a group a process holds (held: the
// processes holding any /dev/vfio node).
func (r *run) unbindTargets(groups []*host.Group, addrs []host.Address, opts UnbindOptions, held *future.Value[[]host.Holder]) ([]unbindTarget, []Refusal) {
	named := map[host.Address]bool{}
	for _, a := range addrs {
		named[a] = true
	}
	var targets []unbindTarget
	var refusals []Refusal
	byGroup := make([][]Refusal, len(groups))
	moving := make([]*host.Address, len(groups)) // a member that moves, for the held refusal
	for i, g := range groups {
		for _, m := range g.Members {
			c, t, rs := r.unbindMember(g, m, named[m.Address], opts)
			byGroup[i] = append(byGroup[i], rs...)
			if t != nil {
				targets = append(targets, *t)
				if c.Changed && moving[i] == nil {
					a := m.Address
					moving[i] = &a
				}
			}
			r.res.Devices = append(r.res.Devices, c)
		}
	}
	// The one search of every process's open files, started by Unbind; each moving group
	// keeps the holders of its own /dev/vfio/N.
	hs := held.Wait()
	for i, g := range groups {
		refusals = append(refusals, byGroup[i]...)
		if moving[i] == nil {
			continue
		}
		var mine []host.Holder
		dev := host.HostPath(r.root, host.VFIODev(r.root, g.ID))
		for _, h := range hs {
			if h.Path == dev {
				mine = append(mine, h)
			}
		}
		if len(mine) > 0 {
			rf := heldRefusal(*moving[i], mine)
			rf.Reason = fmt.Sprintf("IOMMU group %d is in use (a VM runs on it?): %s", g.ID, strings.TrimPrefix(rf.Reason, "is held open, so unbinding it would block until they let go: "))
			refusals = append(refusals, rf)
		}
	}
	return targets, refusals
}

// unbindMember decides about one member m of g: the change it gets, its target (nil when it
// is left alone) and its refusals. named is true when the caller named m itself.
func (r *run) unbindMember(g *host.Group, m host.GroupMember, named bool, opts UnbindOptions) (DriverChange, *unbindTarget, []Refusal) {
	a := m.Address
	c := DriverChange{Address: a, Group: g.ID, From: m.Driver, To: m.Driver}
	e, inLedger := r.ledger.Lookup(a)
	var rs []Refusal
	switch {
	case m.IsBridge:
		c.Note = "bridge stays on " + orNone(m.Driver)
	case inLedger:
		if e.Owner != "" && e.Owner != opts.Owner {
			why := fmt.Sprintf("was bound for %q, not %q", e.Owner, opts.Owner)
			if opts.Owner == "" {
				why = fmt.Sprintf("was bound by vgpu-host apply for VM %q, which uses it: vgpu-host destroy %s gives it back (or --force)", e.Owner, e.Owner)
			}
			rs = append(rs, Refusal{Address: &a, Check: CheckOwner, Reason: why})
		}
		if m.Driver != DriverName && m.Driver != e.Driver && m.Driver != "" {
			rs = append(rs, Refusal{Address: &a, Check: CheckNotInLedger, Reason: fmt.Sprintf(
				"is on %s now, neither vfio-pci nor its original %s: something else moved it since vgpu-host bound it", m.Driver, orNone(e.Driver))})
		}
		if m.Driver == e.Driver && m.DriverOverride == e.Override {
			c.Note = "already restored" // the stale entry is dropped, with no sysfs write
			return c, &unbindTarget{e: e}, rs
		}
		c.To, c.Changed = e.Driver, true
		if e.Driver == "" {
			c.Note = "left without a driver, as before"
		}
		return c, &unbindTarget{e: e}, rs
	case m.Driver == DriverName:
		if !named && !opts.Force {
			c.Note = "on vfio-pci but not bound by vgpu-host: left alone"
			return c, nil, nil
		}
		if !opts.Force {
			rs = append(rs, Refusal{Address: &a, Check: CheckNotInLedger, Reason: fmt.Sprintf(
				"is on vfio-pci but %v %s: vgpu-host did not bind it (another tool, a VM manager or vfio-pci.ids= did), so it does not know the original driver; --force unbinds it anyway and lets the kernel probe its native driver",
				ErrNotInLedger, host.HostPath(r.root, LedgerPath(r.root)))})
		}
		c.To, c.Changed, c.Note = "(native)", true, "not in the ledger: restored to the native driver"
		return c, &unbindTarget{e: Binding{Address: a, Group: g.ID}, native: true}, rs
	default:
		c.Note = "not on vfio-pci: nothing to do"
	}
	return c, nil, rs
}

// refuseOrWarn turns the refusals forced does not override into the error, and those it does
// into warnings.
func (r *run) refuseOrWarn(op string, refusals []Refusal, forced func(check string) bool) error {
	var refused []Refusal
	for _, rf := range refusals {
		if forced(rf.Check) {
			r.res.Warnings = append(r.res.Warnings, "forced past ["+rf.Check+"] "+rf.String())
		} else {
			refused = append(refused, rf)
		}
	}
	if len(refused) == 0 {
		return nil
	}
	err := RefusalError(op, refused)
	for _, rf := range refused {
		if rf.Check == CheckNotInLedger {
			return fmt.Errorf("%w (%w)", err, ErrNotInLedger)
		}
	}
	return err
}

// restoreTargets restores the targets, last first. A function that cannot be restored stays
// in the ledger; the others are still restored. The ledger is written once for the whole run:
// a crash before it leaves entries of functions already restored, which the next unbind drops
// as "already restored" and the next bind keeps.
func (r *run) restoreTargets(ctx context.Context, targets []unbindTarget) error {
	var errs []error
	for i := len(targets) - 1; i >= 0; i-- {
		t := targets[i]
		if err := r.restoreOne(ctx, t.e, t.native); err != nil {
			errs = append(errs, fmt.Errorf("unbind %s: %w", t.e.Address, err))
			continue
		}
		delete(r.ledger.Devices, t.e.Address.String())
	}
	if len(targets) > 0 {
		if err := r.saveLedger(); err != nil {
			errs = append(errs, err)
		}
	}
	r.flushWrites()
	r.res.Changed = len(r.res.Steps) > 0 && !r.dry
	for i := range r.res.Devices {
		c := &r.res.Devices[i]
		if c.Changed && !r.dry {
			if d, ok := r.confirmed[c.Address]; ok {
				c.To = d // the driver link read after the restore's write
			} else {
				c.To, _ = host.Driver(r.root, c.Address)
			}
		}
	}
	return errors.Join(errs...)
}

// groupStates reports each group as it is now: viable or not, and its /dev/vfio/N.
func (r *run) groupStates(groups []*host.Group) {
	for _, g := range groups {
		st := GroupState{ID: g.ID}
		if now, err := r.groupAfter(g); err == nil {
			st.Viable = now.Viable
		}
		if host.VFIODevExists(r.root, g.ID) {
			st.VFIODev = host.HostPath(r.root, host.VFIODev(r.root, g.ID))
		}
		r.res.Groups = append(r.res.Groups, st)
	}
}

// explainUnbind adds the processes holding the group to an unbind from vfio-pci that timed
// out (vfio-pci's remove waits for the group's users to let go), reported as busy.
func (r *run) explainUnbind(err error, e Binding) error {
	if !errors.Is(err, host.ErrWriteTimeout) {
		return err
	}
	held := "no holder found in /proc/*/fd"
	if hs := host.Holders(r.root, []string{host.HostPath(r.root, host.VFIODev(r.root, e.Group))}); len(hs) > 0 {
		var parts []string
		for _, h := range hs {
			parts = append(parts, h.String())
		}
		held = "held by: " + strings.Join(parts, "; ")
	}
	return fmt.Errorf("%w: %w; %s (the ledger keeps it: run vgpu-host unbind again when they let go)", err, host.ErrBusy, held)
}
