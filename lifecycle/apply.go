package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/vgpu-host/vgpu-host/domains"
	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/ledger"
	"github.com/vgpu-host/vgpu-host/step"
	"github.com/vgpu-host/vgpu-host/vfio"
	"github.com/vgpu-host/vgpu-host/vgpu"
	"github.com/vgpu-host/vgpu-host/virt"
)

// VMApplyResult reports what Apply did for one VM.
type VMApplyResult struct {
	VM string `json:"vm"`
	// Changed is false when the spec was applied already and nothing had to change.
	Changed bool `json:"changed"`
	// Converged lists journal steps of an earlier, interrupted apply that were undone first.
	Converged []string `json:"converged,omitempty"`
	// Steps are the steps taken, in order.
	Steps []string `json:"steps"`
	// Fallback says which gpus[] entries got virtio-gpu instead of a GPU, and why.
	Fallback []string `json:"fallback,omitempty"`
	// RestartNeeded is set when the domain was redefined while running: the new definition
	// takes effect at its next boot.
	RestartNeeded bool `json:"restart_needed,omitempty"`
	// Replaced is set when the spec's devices changed: the VM was destroyed first (what was
	// undone and which devices were released), then applied afresh.
	Replaced *DestroyResult `json:"replaced,omitempty"`
	State    virt.State     `json:"state"`
	Claims   []ledger.Claim `json:"claims"`
}

var (
	errTeardown = errors.New("devices changed: tear down and apply again")
	errNoop     = errors.New("nothing to write")
	// errNotTaken marks a step that failed without changing anything because what it would
	// create exists already and is not this apply's: it must not be undone (that would delete
	// someone else's volume).
	errNotTaken = errors.New("step not taken")
)

// ErrDamagedJournal marks a journal entry of the ledger that cannot be decoded (step.Decode
// refused a field). It is damaged state, not bad input: the CLI exits 1 for it, as for any
// other damaged state file (docs/security.md), although the error also wraps host.ErrInvalid.
var ErrDamagedJournal = errors.New("damaged ledger journal")

// refuseExisting fails with host.ErrBusy (and errNotTaken) when the volume a create-overlay
// or first write-seed step would create is in the pool already: vgpu-host did not create it
// (a disk kept after the domain was undefined by hand, a lost ledger), so it is neither
// replaced nor, on undo, deleted. It runs before the step is journalled, so a crash right
// after can never make a later undo delete that volume.
func (l *Lifecycle) refuseExisting(ctx context.Context, ps step.Step) error {
	var vol, pool string
	switch s := ps.(type) {
	case step.CreateOverlay:
		vol, pool = s.Volume, s.Pool
	case step.CreateBlank:
		vol, pool = s.Volume, s.Pool
	case step.WriteSeed:
		vol, pool = s.Volume, s.Pool
	default:
		return nil
	}
	if pool == "" {
		pool = l.o.Pool
	}
	path, err := l.o.Conn.VolumePath(ctx, pool, vol)
	if err == nil {
		return fmt.Errorf("volume %s (%s) exists in pool %s and vgpu-host did not create it for this VM; "+
			"move or delete it (virsh vol-delete %s --pool %s) and apply again: %w: %w", vol, path, pool, vol, pool, host.ErrBusy, errNotTaken)
	}
	if virt.IsNotFound(err) {
		return nil
	}
	return err
}

func (l *Lifecycle) progress(format string, a ...any) {
	if l.o.Progress != nil {
		fmt.Fprintf(l.o.Progress, format+"\n", a...)
	}
}

// Apply makes vm exist as specified: devices allocated in the ledger, host prepared, volumes
// and seed created, domain defined and (unless NoStart) running. See the package comment for
// how it converges after a crash; a failed apply undoes the steps it took, newest first.
//
// Apply holds vm's lock (ledger.LockVM) throughout: a second apply or destroy of the same VM
// meanwhile fails with host.ErrBusy rather than undoing this one's steps as "interrupted".
func (l *Lifecycle) Apply(ctx context.Context, vm *domains.VM) (*VMApplyResult, error) {
	unlock, err := l.o.Ledger.LockVM(vm.Metadata.Name)
	if err != nil {
		return &VMApplyResult{VM: vm.Metadata.Name}, fmt.Errorf("apply %s: %w", vm.Metadata.Name, err)
	}
	defer unlock()
	l.checked = map[string][]vfio.Refusal{}
	return l.apply(ctx, vm)
}

func (l *Lifecycle) apply(ctx context.Context, vm *domains.VM) (*VMApplyResult, error) {
	name := vm.Metadata.Name
	res := &VMApplyResult{VM: name}
	c, err := l.claim(ctx, vm, res)
	if err != nil {
		return res, err
	}
	res.Fallback, res.Claims = c.plan.Fallback, c.plan.Claims
	for _, f := range c.plan.Fallback {
		l.progress("%s: %s", name, f)
	}
	if c.unchanged {
		return l.keepRunning(ctx, vm, c.plan, res)
	}
	res.Changed = true
	pending, err := l.takeSteps(ctx, vm, c, res)
	if err != nil {
		return res, err
	}
	if err := l.markApplied(name, c.plan, pending); err != nil {
		return res, err
	}
	if c.fresh && l.o.NoStart {
		// Just defined, never started: no need to ask libvirt.
		res.State = virt.StateShutoff
	} else {
		res.State, _ = l.o.Conn.State(ctx, name)
	}
	return res, nil
}

// claimed is what apply's claiming transaction decided.
type claimed struct {
	plan *VMPlan
	// unchanged: the VM is applied with this very spec; fresh: it was not in the ledger.
	unchanged, fresh bool
	// preN is the journal number of the first step, recorded with the claims (0 when none).
	preN int
	// journal is the live journal of a VM applied before (nil when fresh).
	journal []ledger.JournalStep
}

// claim resolves vm against the host and claims its devices in one ledger transaction. On the
// way it converges what an interrupted apply or destroy of vm left (undoing its journal), and
// tears the VM down first when the spec's devices changed (res.Replaced); after either it
// scans the host again, since the teardown changed it.
func (l *Lifecycle) claim(ctx context.Context, vm *domains.VM, res *VMApplyResult) (claimed, error) {
	name := vm.Metadata.Name
	inv, err := l.o.Scan(l.o.Root)
	if err != nil {
		return claimed{}, fmt.Errorf("apply %s: scan host: %w", name, err)
	}
	tornDown := false
	for {
		c, interrupted, err := l.claimOnce(ctx, vm, inv)
		switch {
		case errors.Is(err, errNoop) && interrupted != "" && res.Converged == nil:
			undone, err := l.teardown(ctx, name)
			res.Converged = append(undone, []string{}...)
			if err != nil {
				return c, fmt.Errorf("apply %s: converge interrupted %s: %w", name, interrupted, err)
			}
		case errors.Is(err, errTeardown) && !tornDown:
			tornDown = true
			l.progress("%s: devices changed: destroying and re-creating it", name)
			if res.Replaced, err = l.destroy(ctx, name); err != nil {
				return c, fmt.Errorf("apply %s: %w", name, err)
			}
		case interrupted != "":
			return c, fmt.Errorf("apply %s: still %s after converging it; run vgpu-host destroy %s", name, interrupted, name)
		case err != nil:
			return c, fmt.Errorf("apply %s: %w", name, err)
		default:
			return c, nil
		}
		// The teardown changed the host (drivers, mdevs, vGPU types): look again.
		if inv, err = l.o.Scan(l.o.Root); err != nil {
			return claimed{}, fmt.Errorf("apply %s: scan host: %w", name, err)
		}
	}
}

// claimOnce is one claiming transaction: errNoop with the phase when an interrupted apply or
// destroy must be converged first, errTeardown when the devices changed.
//
// Everything that asks libvirt (the domain type, the domains vgpu-host did not create, whether
// a domain of this name exists) is asked before the ledger's lock is taken, so a slow libvirtd
// never stalls every other vgpu-host on the host; the transaction itself decides from the
// ledger as it finds it.
func (l *Lifecycle) claimOnce(ctx context.Context, vm *domains.VM, inv *host.Inventory) (c claimed, interrupted string, err error) {
	name := vm.Metadata.Name
	vt, err := l.virtType(ctx, vm)
	if err != nil {
		return c, "", err
	}
	// Devices of domains vgpu-host did not create only matter to a VM that takes devices:
	// look (one XML per domain on the connection) only then, knowing the VM names the ledger
	// has. The spec says whether it may take any; it is resolved once, in the transaction.
	// foreign asks only about domains that hold a device: most are the ledger's VMs that hold
	// claims, known from the claims index; any other is looked up by name. (Listing the
	// ledger's 10,000 names was half an apply's time on the scale bench, #32.)
	var fp map[host.Address]string
	var fm map[string]string
	if vm.TakesDevices(inv) {
		var holders map[string]bool
		var kerr error
		isKnown := func(name string) bool {
			if kerr != nil {
				return false
			}
			if holders == nil {
				kerr = l.o.Ledger.View(func(before *ledger.Book) error {
					holders = before.ClaimHolders()
					return nil
				})
			}
			if holders[name] {
				return true
			}
			known := false
			if err := l.o.Ledger.View(func(before *ledger.Book) error {
				known = before.VM(name) != nil
				return nil
			}); err != nil && kerr == nil {
				kerr = err
			}
			return known
		}
		if fp, fm, err = l.foreign(ctx, isKnown); err == nil {
			err = kerr
		}
		if err != nil {
			return c, "", err
		}
	}
	_, serr := l.o.Conn.State(ctx, name)
	if serr != nil && !virt.IsNotFound(serr) {
		// Not "no such domain" but libvirt itself (the connection could not be opened or was
		// lost): stop before the transaction claims anything.
		return c, "", fmt.Errorf("look up domain %s: %w", name, serr)
	}
	domainExists := serr == nil
	err = l.o.Ledger.Update(func(b *ledger.Book) error {
		// An interrupted apply or destroy of this VM (we hold its lock, so its process is
		// gone): undo its journal before anything else.
		if e := b.VM(name); e != nil && e.Phase != ledger.PhaseApplied {
			interrupted = e.Phase
			return errNoop
		}
		plan, err := l.resolve(ctx, vm, vt, inv, b, fp, fm)
		if err != nil {
			return err
		}
		if err := plan.Refused(); err != nil {
			return err
		}
		c.plan = plan
		e := b.VM(name)
		if e != nil {
			c.journal = e.Live()
			if e.SpecHash == plan.SpecHash {
				c.unchanged = true
				return nil
			}
			if !vgpu.SameClaims(e.Claims, plan.Claims) {
				return errTeardown
			}
		}
		c.fresh = e == nil
		if c.fresh && domainExists {
			return fmt.Errorf("domain %s exists and vgpu-host did not create it (not in the ledger): %w", name, host.ErrBusy)
		}
		if err := b.Claim(name, plan.Claims...); err != nil {
			return err
		}
		e = b.Entry(name)
		e.Phase, e.URI, e.Pool, e.Fallback = ledger.PhaseApplying, l.o.Conn.URI(), l.o.Pool, plan.Fallback
		if c.fresh && len(plan.Steps) > 0 {
			// Record the first step in the claiming transaction (one fsync'd write less).
			r0 := plan.record(0)
			c.preN = e.Record(string(r0.Action), r0.Target, r0.Params)
		}
		return nil
	})
	if c.fresh {
		c.journal = nil
	}
	return c, interrupted, err
}

// keepRunning handles a re-apply of the same spec: nothing changes, but a domain removed
// behind vgpu-host's back is converged from scratch, and a stopped one is started.
func (l *Lifecycle) keepRunning(ctx context.Context, vm *domains.VM, plan *VMPlan, res *VMApplyResult) (*VMApplyResult, error) {
	name := vm.Metadata.Name
	st, err := l.o.Conn.State(ctx, name)
	if errors.Is(err, virt.ErrNoDomain) {
		// Someone removed the domain behind our back: converge from scratch.
		if _, err := l.teardown(ctx, name); err != nil {
			return res, err
		}
		return l.apply(ctx, vm)
	}
	if err != nil {
		return res, err
	}
	if st != virt.StateRunning && !l.o.NoStart && plan.starts() {
		if err := l.o.Conn.Start(ctx, name); err != nil {
			return res, fmt.Errorf("apply %s: %w", name, err)
		}
		res.Changed = true
		res.Steps = append(res.Steps, "start domain "+name)
		st = virt.StateRunning
	}
	res.State = st
	return res, nil
}

// takeSteps takes the plan's steps in order, each recorded in the journal before it is taken
// (in the same transaction that marks the previous one done, so an apply costs one ledger
// write per step, plus one). Steps the journal lists as done are skipped, except the seed and
// the definition, which are redone. A failure undoes what this apply took. It returns the
// journal number of the last step taken, not yet marked done.
func (l *Lifecycle) takeSteps(ctx context.Context, vm *domains.VM, c claimed, res *VMApplyResult) (int, error) {
	name := vm.Metadata.Name
	env := l.env(name, vm, c.plan)
	preN := c.preN
	var taken []ledger.JournalStep
	pending := 0 // a step taken but not yet marked done
	for i, pl := range c.plan.Steps {
		ps, rec := pl.Step, c.plan.record(i)
		if handled, err := l.redoOrSkip(ctx, name, ps, rec, c.journal, env, res); err != nil {
			return pending, err
		} else if handled {
			continue
		}
		if rec.Action == step.ActStart {
			if st, err := l.o.Conn.State(ctx, name); err == nil && st == virt.StateRunning {
				res.RestartNeeded = true
				continue
			}
		}
		if err := l.refuseExisting(ctx, ps); err != nil {
			if pending > 0 {
				// The previous step was taken: say so before undoing it with the rest.
				_ = l.o.Ledger.Update(func(b *ledger.Book) error { b.Entry(name).Mark(pending, ledger.StepDone); return nil })
			}
			if preN > 0 {
				// Recorded with the claims but not taken: nothing to undo.
				_ = l.o.Ledger.Update(func(b *ledger.Book) error { b.Entry(name).Mark(preN, ledger.StepUndone); return nil })
			}
			return pending, l.fail(ctx, name, c.fresh, taken, fmt.Errorf("apply %s: %s: %w", name, rec.Text, err))
		}
		n := preN
		if n > 0 {
			preN = 0
		} else if err := l.o.Ledger.Update(func(b *ledger.Book) error {
			e := b.Entry(name)
			if pending > 0 {
				e.Mark(pending, ledger.StepDone)
			}
			n = e.Record(string(rec.Action), rec.Target, rec.Params)
			return nil
		}); err != nil {
			return pending, l.fail(ctx, name, c.fresh, taken, fmt.Errorf("apply %s: record %s: %w", name, rec.Text, err))
		}
		pending = 0
		taken = append(taken, ledger.JournalStep{N: n, Action: string(rec.Action), Target: rec.Target, Params: rec.Params})
		if err := l.take(ctx, name, ps, rec, env, n); err != nil {
			if errors.Is(err, errNotTaken) || errors.Is(err, virt.ErrVolumeExists) {
				taken = taken[:len(taken)-1] // nothing was created: forgotten, not undone
			}
			return pending, l.fail(ctx, name, c.fresh, taken, fmt.Errorf("apply %s: %s: %w", name, rec.Text, err))
		}
		pending = n
		res.Steps = append(res.Steps, rec.Text)
	}
	return pending, nil
}

// redoOrSkip handles a step the journal lists as done: skipped, except the seed and the
// definition, which are taken again. It returns true for a step it handled.
func (l *Lifecycle) redoOrSkip(ctx context.Context, name string, ps step.Step, rec step.Record, journal []ledger.JournalStep, env step.Env, res *VMApplyResult) (bool, error) {
	if !slices.ContainsFunc(journal, func(s ledger.JournalStep) bool {
		return s.Action == string(rec.Action) && s.Target == rec.Target && s.Status == ledger.StepDone
	}) {
		return false, nil
	}
	if rec.Action != step.ActWriteSeed && rec.Action != step.ActDefine {
		return true, nil
	}
	if err := l.do(ctx, name, ps, rec, env, " (again)"); err != nil {
		return true, fmt.Errorf("apply %s: %s: %w", name, rec.Text, err)
	}
	res.Steps = append(res.Steps, rec.Text)
	if rec.Action == step.ActDefine {
		if st, err := l.o.Conn.State(ctx, name); err == nil && st == virt.StateRunning {
			res.RestartNeeded = true
		}
	}
	return true, nil
}

// take takes one step recorded as journal number n, stopping dead where the crash test asks
// (CrashAt). A step that created nothing (errNotTaken, an existing volume) is marked undone.
func (l *Lifecycle) take(ctx context.Context, name string, ps step.Step, rec step.Record, env step.Env, n int) error {
	l.taken++
	crash := l.o.CrashAt > 0 && l.taken == l.o.CrashAt && l.o.Crash != nil
	if crash && l.o.CrashBefore {
		l.o.Crash()
	}
	if err := l.do(ctx, name, ps, rec, env, ""); err != nil {
		if errors.Is(err, errNotTaken) || errors.Is(err, virt.ErrVolumeExists) {
			_ = l.o.Ledger.Update(func(b *ledger.Book) error { b.Entry(name).Mark(n, ledger.StepUndone); return nil })
		}
		return err
	}
	if crash {
		l.o.Crash()
	}
	return nil
}

// do takes step ps (written down as rec), saying so on the progress writer (with note).
func (l *Lifecycle) do(ctx context.Context, name string, ps step.Step, rec step.Record, env step.Env, note string) error {
	l.progress("%s: %s%s", name, rec.Text, note)
	return ps.Do(ctx, env)
}

// markApplied marks the last step done and the VM applied with the plan's spec. Nothing is
// done on the strength of that record, so it settles (ledger.Settle): a power loss may leave
// the last step recorded as taken, not done, as a kill -9 before it would.
func (l *Lifecycle) markApplied(name string, plan *VMPlan, pending int) error {
	err := l.o.Ledger.Settle(func(b *ledger.Book) error {
		e := b.Entry(name)
		if pending > 0 {
			e.Mark(pending, ledger.StepDone)
		} else if e.Phase == ledger.PhaseApplied && e.SpecHash == plan.SpecHash {
			return errNoop
		}
		e.Phase, e.SpecHash = ledger.PhaseApplied, plan.SpecHash
		return nil
	})
	if errors.Is(err, errNoop) {
		return nil
	}
	return err
}

// fail undoes the steps this apply took, newest first; a fresh VM's entry and claims go too.
func (l *Lifecycle) fail(ctx context.Context, name string, fresh bool, taken []ledger.JournalStep, cause error) error {
	for i := len(taken) - 1; i >= 0; i-- {
		if err := l.undo(ctx, name, taken[i]); err != nil {
			return fmt.Errorf("%w; undo also failed (run vgpu-host destroy %s): %w", cause, name, err)
		}
	}
	if fresh {
		if err := l.o.Ledger.Update(func(b *ledger.Book) error { b.Delete(name); return nil }); err != nil {
			return fmt.Errorf("%w; releasing its devices failed: %w", cause, err)
		}
	}
	return cause
}

// env is what a step of vm (spec spec, plan plan; both nil for an undo) is taken in.
func (l *Lifecycle) env(vm string, spec *domains.VM, plan *VMPlan) step.Env {
	return &stepEnv{l: l, vm: vm, spec: spec, plan: plan}
}

type stepEnv struct {
	l    *Lifecycle
	vm   string
	spec *domains.VM
	plan *VMPlan
}

func (e *stepEnv) VM() string        { return e.vm }
func (e *stepEnv) Conn() virt.Conn   { return e.l.o.Conn }
func (e *stepEnv) Pool() string      { return e.l.o.Pool }
func (e *stepEnv) PoolDir() string   { return e.l.o.PoolDir }
func (e *stepEnv) DomainXML() string { return e.plan.XML }

// DetachTimeout bounds the wait for the guest to release a device (Options.DetachTimeout).
func (e *stepEnv) DetachTimeout() time.Duration { return e.l.o.DetachTimeout }

func (e *stepEnv) Host(what string) (step.HostPrep, error) {
	if e.l.o.Host == nil {
		return nil, fmt.Errorf("%s: this build has no host preparation wired in: %w", what, host.ErrUnsupported)
	}
	return e.l.o.Host, nil
}

func (e *stepEnv) SeedISO() ([]byte, error) {
	s, err := e.l.seedOf(e.spec)
	if err != nil {
		return nil, err
	}
	return s.ISO()
}

func (e *stepEnv) Forced() []string { return e.l.o.Force }

// Fetch downloads through Options.Fetch, reporting to Options.Progress.
func (e *stepEnv) Fetch(ctx context.Context, url, checksum, dest string) error {
	if e.l.o.Fetch == nil {
		return fmt.Errorf("fetch %s: this build has no downloader wired in: %w", url, host.ErrUnsupported)
	}
	return e.l.o.Fetch(ctx, url, checksum, dest, e.l.o.Progress)
}

// undo reverts one journal step and marks it undone. Every undo is safe to repeat.
func (l *Lifecycle) undo(ctx context.Context, name string, s ledger.JournalStep) error {
	return l.undoWith(ctx, name, s, l.env(name, nil, nil))
}

// undoWith is undo with the step taken in env (hotplug bounds its wait there).
func (l *Lifecycle) undoWith(ctx context.Context, name string, s ledger.JournalStep, env step.Env) error {
	st, err := step.Decode(s.Action, s.Target, s.Params)
	if err != nil {
		return fmt.Errorf("undo step %d of %s: %w; the ledger entry %s is damaged, so vgpu-host stops rather than guess "+
			"what to undo: repair the step by hand and run again: %w", s.N, name, err, l.o.Ledger.VMPath(name), ErrDamagedJournal)
	}
	err = st.Undo(ctx, env)
	if err != nil && !virt.IsNotFound(err) {
		return fmt.Errorf("undo %s %s: %w", s.Action, s.Target, err)
	}
	l.progress("%s: undid %s %s", name, s.Action, s.Target)
	return l.o.Ledger.Update(func(b *ledger.Book) error {
		if e := b.VM(name); e != nil {
			e.Mark(s.N, ledger.StepUndone)
		}
		return nil
	})
}

// teardown undoes every live journal step of name, newest first, then forgets the VM
// (releasing its claims). It returns the steps it undid.
func (l *Lifecycle) teardown(ctx context.Context, name string) ([]string, error) {
	var live []ledger.JournalStep
	if err := l.o.Ledger.Update(func(b *ledger.Book) error {
		e := b.VM(name)
		if e == nil {
			return fmt.Errorf("VM %q is not in the ledger (vgpu-host did not create it): %w", name, host.ErrNotFound)
		}
		e.Phase = ledger.PhaseDestroying
		live = e.Live()
		return nil
	}); err != nil {
		return nil, err
	}
	var undone []string
	if err := l.stopForHotplugged(ctx, name, live); err != nil {
		return undone, err
	}
	for i := len(live) - 1; i >= 0; i-- {
		late := l.mayLandLate(ctx, live[i])
		if err := l.undo(ctx, name, live[i]); err != nil {
			return undone, err
		}
		if late {
			if err := l.awaitLateDefine(ctx, name, live[i]); err != nil {
				return undone, err
			}
		}
		undone = append(undone, live[i].Action+" "+live[i].Target)
	}
	return undone, l.o.Ledger.Update(func(b *ledger.Book) error { b.Delete(name); return nil })
}

// stopForHotplugged stops the running domain name before teardown undoes a device an attach
// hotplugged into it: the undo would ask the guest to release it and wait (a guest with no OS
// or one that refuses never does: seen in the lab with libvirt 9.0 and QEMU 7.2), and the
// kernel blocks the removal of an mdev QEMU still holds, while the VM is going anyway. Stopping
// the guest releases every device at once; each undo then finds it only in the definition.
func (l *Lifecycle) stopForHotplugged(ctx context.Context, name string, live []ledger.JournalStep) error {
	hot := false
	for _, s := range live {
		if s.Action != string(step.ActAttachDevice) {
			continue
		}
		st, err := step.Decode(s.Action, s.Target, s.Params)
		if err != nil {
			return fmt.Errorf("journal step %d of %s: %w: %w", s.N, name, err, ErrDamagedJournal)
		}
		if a, ok := st.(step.AttachDevice); ok && a.Scope&virt.DeviceLive != 0 {
			hot = true
		}
	}
	if !hot {
		return nil
	}
	state, err := l.o.Conn.State(ctx, name)
	if err != nil || (state != virt.StateRunning && state != virt.StatePaused) {
		return nil // no domain, or stopped: nothing holds the devices
	}
	l.progress("%s: stopping the domain first: it holds devices vgpu-host attach hotplugged", name)
	if err := l.o.Conn.Destroy(ctx, name); err != nil {
		return fmt.Errorf("stop domain %s before releasing its hotplugged devices: %w", name, err)
	}
	return nil
}

// DefaultLateDefineGrace is how long teardown watches for the domain of a define that an
// apply recorded and then died in (kill -9): libvirtd finishes a call whose client is gone,
// and a define becomes visible only at its end (after parsing and the schema check), so the
// undo can find no domain and the define land after it. Options.LateDefineGrace overrides it
// (tests shorten it).
const DefaultLateDefineGrace = 3 * time.Second

// mayLandLate reports whether s is such a define: started, not marked done (its apply died:
// teardown holds the VM's lock), and no domain of that name now.
func (l *Lifecycle) mayLandLate(ctx context.Context, s ledger.JournalStep) bool {
	if s.Action != string(step.ActDefine) || s.Status != ledger.StepStarted {
		return false
	}
	_, err := l.o.Conn.State(ctx, s.Target)
	return virt.IsNotFound(err)
}

// awaitLateDefine is teardown's answer to a define that may land late (mayLandLate): it
// watches for the domain for Options.LateDefineGrace after the undo, and undoes it again if it
// appears.
func (l *Lifecycle) awaitLateDefine(ctx context.Context, name string, s ledger.JournalStep) error {
	deadline := time.Now().Add(l.o.LateDefineGrace)
	for {
		_, err := l.o.Conn.State(ctx, s.Target)
		if err == nil {
			break
		}
		if !virt.IsNotFound(err) {
			return fmt.Errorf("watch for a late define of %s: %w", s.Target, err)
		}
		if time.Now().After(deadline) {
			return nil // it did not land
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("watch for a late define of %s: %w", s.Target, ctx.Err())
		case <-time.After(25 * time.Millisecond):
		}
	}
	l.progress("%s: a define of the interrupted apply landed after its undo", name)
	return l.undo(ctx, name, s)
}

// DestroyResult reports what Destroy undid.
type DestroyResult struct {
	VM       string         `json:"vm"`
	Undone   []string       `json:"undone"`
	Released []ledger.Claim `json:"released"`
}

// Destroy stops and undefines the VM's domain, deletes the volumes and seed apply created,
// releases its devices (removes mdevs, restores drivers) and forgets it: only what vgpu-host
// created, as its journal records. A VM vgpu-host does not know is ErrNotFound.
// Destroy holds the VM's lock, as Apply does.
func (l *Lifecycle) Destroy(ctx context.Context, name string) (*DestroyResult, error) {
	unlock, err := l.o.Ledger.LockVM(name)
	if err != nil {
		if errors.Is(err, host.ErrInvalid) {
			// Not a name vgpu-host could have applied.
			return nil, fmt.Errorf("destroy %s: not in the ledger %s: %w", name, l.o.Ledger.Path(), host.ErrNotFound)
		}
		return nil, fmt.Errorf("destroy %s: %w", name, err)
	}
	defer unlock()
	return l.destroy(ctx, name)
}

func (l *Lifecycle) destroy(ctx context.Context, name string) (*DestroyResult, error) {
	var e *ledger.VM
	if err := l.o.Ledger.View(func(b *ledger.Book) error { e = b.VM(name); return nil }); err != nil {
		return nil, err
	}
	if e == nil {
		return nil, fmt.Errorf("destroy %s: not in the ledger %s (vgpu-host did not create it, or it is gone already): %w", name, l.o.Ledger.Path(), host.ErrNotFound)
	}
	res := &DestroyResult{VM: name, Released: e.Claims}
	var err error
	res.Undone, err = l.teardown(ctx, name)
	if err != nil {
		return res, fmt.Errorf("destroy %s: %w", name, err)
	}
	return res, nil
}

// VMStatus is one VM in Status.
type VMStatus struct {
	Name      string         `json:"name"`
	Phase     string         `json:"phase"`
	State     virt.State     `json:"state"`
	URI       string         `json:"uri"`
	Claims    []ledger.Claim `json:"claims"`
	Fallback  []string       `json:"fallback,omitempty"`
	Steps     int            `json:"journal_steps"`
	UpdatedAt time.Time      `json:"updated_at"`
}

// Status lists the VMs in the ledger with their devices and libvirt state ("missing" when
// the domain is gone).
func (l *Lifecycle) Status(ctx context.Context) ([]VMStatus, error) {
	// A damaged ledger still lists its intact entries; the error comes back with them.
	book, rerr := l.o.Ledger.Read()
	if book == nil {
		return nil, rerr
	}
	out := []VMStatus{}
	for _, name := range book.Names() {
		e := book.VM(name)
		st, err := l.o.Conn.State(ctx, name)
		if errors.Is(err, virt.ErrNoDomain) {
			st = "missing"
		} else if err != nil {
			st = virt.State("unknown: " + err.Error())
		}
		out = append(out, VMStatus{Name: name, Phase: e.Phase, State: st, URI: e.URI, Claims: e.Claims, Fallback: e.Fallback, Steps: len(e.Live()), UpdatedAt: e.UpdatedAt})
	}
	return out, rerr
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
