package vfio

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/vgpu-host/vgpu-host/host"
)

// Unbind restores every function of the IOMMU groups of addrs that vgpu-host moved to
// vfio-pci: driver_override as it was, unbound from vfio-pci, re-probed so the original driver
// comes back, and driverless what was driverless; then it checks the result. A named device
// that is not on vfio-pci is a no-op; one on vfio-pci that is not in the ledger is refused
// (ErrNotInLedger, host.ErrRefused) unless Force, which restores it to its native driver.
// A function that cannot be restored stays in the ledger; the others are still restored.
func (b *Binder) Unbind(ctx context.Context, addrs []host.Address, opts UnbindOptions) (*Result, error) {
	groups, err := groupsOf(b.Root, addrs)
	if err != nil {
		return nil, err
	}
	r, unlock, err := b.start("unbind", opts.DryRun)
	if err != nil {
		return nil, err
	}
	defer unlock()
	res := r.res

	named := map[host.Address]bool{}
	for _, a := range addrs {
		named[a] = true
	}
	type target struct {
		e      Entry
		native bool
	}
	var targets []target
	var refusals []Refusal
	for _, g := range groups {
		var held []host.GroupMember
		for _, m := range g.Members {
			a := m.Address
			c := Change{Address: a, Group: g.ID, From: m.Driver, To: m.Driver}
			e, inLedger := r.ledger.Lookup(a)
			switch {
			case m.IsBridge:
				c.Note = "bridge stays on " + orNone(m.Driver)
			case inLedger:
				if opts.Owner != "" && e.Owner != "" && e.Owner != opts.Owner {
					refusals = append(refusals, Refusal{Address: &a, Check: CheckOwner, Reason: fmt.Sprintf("was bound for %q, not %q", e.Owner, opts.Owner)})
				}
				if m.Driver != DriverName && m.Driver != e.Driver && m.Driver != "" {
					refusals = append(refusals, Refusal{Address: &a, Check: CheckNotInLedger, Reason: fmt.Sprintf(
						"is on %s now, neither vfio-pci nor its original %s: something else moved it since vgpu-host bound it", m.Driver, orNone(e.Driver))})
				}
				if m.Driver == e.Driver && m.DriverOverride == e.Override {
					c.Note = "already restored"
					// Drop the stale entry below, with no sysfs write.
					targets = append(targets, target{e: e})
					break
				}
				c.To, c.Changed = e.Driver, true
				if e.Driver == "" {
					c.Note = "left without a driver, as before"
				}
				targets = append(targets, target{e: e})
				held = append(held, m)
			case m.Driver == DriverName:
				if !named[a] && !opts.Force {
					c.Note = "on vfio-pci but not bound by vgpu-host: left alone"
					break
				}
				if !opts.Force {
					refusals = append(refusals, Refusal{Address: &a, Check: CheckNotInLedger, Reason: fmt.Sprintf(
						"is on vfio-pci but %v %s: vgpu-host did not bind it (another tool, a VM manager or vfio-pci.ids= did), so it does not know the original driver; --force unbinds it anyway and lets the kernel probe its native driver",
						ErrNotInLedger, host.HostPath(b.Root, LedgerPath(b.Root)))})
				}
				c.To, c.Changed, c.Note = "(native)", true, "not in the ledger: restored to the native driver"
				targets = append(targets, target{e: Entry{Address: a, Group: g.ID}, native: true})
				held = append(held, m)
			default:
				c.Note = "not on vfio-pci: nothing to do"
			}
			res.Devices = append(res.Devices, c)
		}
		if len(held) > 0 {
			if hs := host.Holders(b.Root, []string{host.HostPath(b.Root, host.VFIODev(b.Root, g.ID))}); len(hs) > 0 {
				a := held[0].Address
				rf := heldRefusal(a, hs)
				rf.Reason = fmt.Sprintf("IOMMU group %d is in use (a VM runs on it?): %s", g.ID, strings.TrimPrefix(rf.Reason, "is held open, so unbinding it would block until they let go: "))
				refusals = append(refusals, rf)
			}
		}
	}
	if len(refusals) > 0 {
		if !opts.Force {
			err := refusalError("unbind "+addrList(addrs), refusals)
			for _, rf := range refusals {
				if rf.Check == CheckNotInLedger {
					err = fmt.Errorf("%w (%w)", err, ErrNotInLedger)
					break
				}
			}
			return res, err
		}
		for _, rf := range refusals {
			res.Warnings = append(res.Warnings, "forced past ["+rf.Check+"] "+rf.String())
		}
	}

	var errs []error
	for i := len(targets) - 1; i >= 0; i-- {
		t := targets[i]
		err := r.restoreOne(ctx, t.e, t.native)
		if err != nil {
			errs = append(errs, fmt.Errorf("unbind %s: %w", t.e.Address, err))
			continue
		}
		delete(r.ledger.Devices, t.e.Address.String())
	}
	// One ledger write for the whole run: a crash before it leaves entries of functions already
	// restored, which the next unbind drops as "already restored" and the next bind keeps.
	if len(targets) > 0 {
		if err := r.saveLedger(); err != nil {
			errs = append(errs, err)
		}
	}
	r.flushWrites()
	res.Changed = len(res.Steps) > 0 && !r.dry
	for i := range res.Devices {
		c := &res.Devices[i]
		if c.Changed && !r.dry {
			now, _ := host.Driver(b.Root, c.Address)
			c.To = now
		}
	}
	if opts.Persist {
		if err := r.unpersist(groups, opts.DryRun); err != nil {
			errs = append(errs, err)
		}
	} else {
		r.persistedWarnings(groups)
	}
	for _, g := range groups {
		st := GroupState{ID: g.ID}
		if now, err := host.ReadGroup(b.Root, g.ID); err == nil {
			st.Viable = now.Viable
		}
		if dev := host.VFIODev(b.Root, g.ID); host.VFIODevExists(b.Root, g.ID) {
			st.VFIODev = host.HostPath(b.Root, dev)
		}
		res.Groups = append(res.Groups, st)
	}
	return res, errors.Join(errs...)
}

// explainUnbind adds the processes holding the group to an unbind from vfio-pci that timed
// out (vfio-pci's remove waits for the group's users to let go), reported as busy.
func (r *run) explainUnbind(err error, e Entry) error {
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
