package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/vgpu-host/vgpu-host/domains"
	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/ledger"
	"github.com/vgpu-host/vgpu-host/virt"
)

// Result reports what Apply did for one VM.
type Result struct {
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

// refuseExisting fails with host.ErrBusy (and errNotTaken) when the volume a create-overlay
// or first write-seed step would create is in the pool already: vgpu-host did not create it
// (a disk kept after the domain was undefined by hand, a lost ledger), so it is neither
// replaced nor, on undo, deleted. It runs before the step is journalled, so a crash right
// after can never make a later undo delete that volume.
func (l *Lifecycle) refuseExisting(ctx context.Context, ps PlannedStep) error {
	if ps.Action != ActCreateOverlay && ps.Action != ActWriteSeed {
		return nil
	}
	pool := ps.Params["pool"]
	if pool == "" {
		pool = l.o.Pool
	}
	path, err := l.o.Conn.VolumePath(ctx, pool, ps.Target)
	if err == nil {
		return fmt.Errorf("volume %s (%s) exists in pool %s and vgpu-host did not create it for this VM; "+
			"move or delete it (virsh vol-delete %s --pool %s) and apply again: %w: %w", ps.Target, path, pool, ps.Target, pool, host.ErrBusy, errNotTaken)
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
func (l *Lifecycle) Apply(ctx context.Context, vm *domains.VM) (*Result, error) {
	unlock, err := l.o.Ledger.LockVM(vm.Metadata.Name)
	if err != nil {
		return &Result{VM: vm.Metadata.Name}, fmt.Errorf("apply %s: %w", vm.Metadata.Name, err)
	}
	defer unlock()
	return l.apply(ctx, vm)
}

func (l *Lifecycle) apply(ctx context.Context, vm *domains.VM) (*Result, error) {
	name := vm.Metadata.Name
	res := &Result{VM: name}

	inv, err := l.o.Scan(l.o.Root)
	if err != nil {
		return res, fmt.Errorf("apply %s: scan host: %w", name, err)
	}

	var plan *Plan
	var unchanged, fresh, tornDown bool
	var preN int              // first step, recorded with the claims
	var journal []ledger.Step // the live steps of an applied VM's entry
	var interrupted string    // the phase of an interrupted apply or destroy of this VM
	for {
		unchanged, fresh, preN, journal, interrupted = false, false, 0, nil, ""
		err = l.o.Ledger.Update(func(b *ledger.Book) error {
			// An interrupted apply or destroy of this VM (we hold its lock, so its process is
			// gone): undo its journal before anything else.
			if e := b.VMs[name]; e != nil && e.Phase != ledger.PhaseApplied {
				interrupted = e.Phase
				return errNoop
			}
			// Devices of domains vgpu-host did not create only matter to an allocation that
			// takes devices: resolve without them first, and look (one XML per domain on the
			// connection) only when the allocation claims something.
			plan, err = l.resolve(ctx, vm, inv, b, nil, nil)
			if err == nil && len(plan.Claims) > 0 {
				fp, fm, ferr := l.foreign(ctx, b)
				if ferr != nil {
					return ferr
				}
				plan, err = l.resolve(ctx, vm, inv, b, fp, fm)
			}
			if err != nil {
				return err
			}
			e := b.VMs[name]
			if e != nil {
				journal = e.Live()
				if e.SpecHash == plan.SpecHash {
					unchanged = true
					return nil
				}
				if !sameClaims(e.Claims, plan.Claims) {
					return errTeardown
				}
			}
			fresh = e == nil
			if fresh {
				if _, err := l.o.Conn.State(ctx, name); err == nil {
					return fmt.Errorf("domain %s exists and vgpu-host did not create it (not in the ledger): %w", name, host.ErrBusy)
				}
			}
			if err := b.Claim(name, plan.Claims...); err != nil {
				return err
			}
			e = b.Entry(name)
			e.Phase, e.URI, e.Pool, e.Fallback = ledger.PhaseApplying, l.o.Conn.URI(), l.o.Pool, plan.Fallback
			if fresh && len(plan.Steps) > 0 {
				// Record the first step in the claiming transaction (one fsync'd write less).
				s0 := plan.Steps[0]
				preN = e.Record(s0.Action, s0.Target, s0.Params)
			}
			return nil
		})
		if errors.Is(err, errNoop) && interrupted != "" && res.Converged == nil {
			undone, err := l.teardown(ctx, name)
			res.Converged = append(undone, []string{}...)
			if err != nil {
				return res, fmt.Errorf("apply %s: converge interrupted %s: %w", name, interrupted, err)
			}
			// The teardown changed the host (drivers, mdevs, vGPU types): look again.
			if inv, err = l.o.Scan(l.o.Root); err != nil {
				return res, fmt.Errorf("apply %s: scan host: %w", name, err)
			}
			continue
		}
		if errors.Is(err, errTeardown) && !tornDown {
			tornDown = true
			l.progress("%s: devices changed: destroying and re-creating it", name)
			if res.Replaced, err = l.destroy(ctx, name); err != nil {
				return res, fmt.Errorf("apply %s: %w", name, err)
			}
			if inv, err = l.o.Scan(l.o.Root); err != nil {
				return res, fmt.Errorf("apply %s: scan host: %w", name, err)
			}
			continue
		}
		break
	}
	if interrupted != "" {
		return res, fmt.Errorf("apply %s: still %s after converging it; run vgpu-host destroy %s", name, interrupted, name)
	}
	if err != nil {
		return res, fmt.Errorf("apply %s: %w", name, err)
	}
	res.Fallback, res.Claims = plan.Fallback, plan.Claims
	for _, f := range plan.Fallback {
		l.progress("%s: %s", name, f)
	}

	if unchanged {
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
		if st != virt.StateRunning && !l.o.NoStart && slices.ContainsFunc(plan.Steps, func(s PlannedStep) bool { return s.Action == ActStart }) {
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

	res.Changed = true
	if fresh {
		journal = nil
	}
	var taken []ledger.Step
	pending := 0 // a step taken but not yet marked done
	for _, ps := range plan.Steps {
		redo := ps.Action == ActWriteSeed || ps.Action == ActDefine
		if i := slices.IndexFunc(journal, func(s ledger.Step) bool {
			return s.Action == ps.Action && s.Target == ps.Target && s.Status == ledger.StepDone
		}); i >= 0 && !redo {
			continue
		} else if i >= 0 && redo {
			l.progress("%s: %s (again)", name, ps.Text)
			if err := l.do(ctx, vm, plan, ps); err != nil {
				return res, fmt.Errorf("apply %s: %s: %w", name, ps.Text, err)
			}
			res.Steps = append(res.Steps, ps.Text)
			if ps.Action == ActDefine {
				if st, err := l.o.Conn.State(ctx, name); err == nil && st == virt.StateRunning {
					res.RestartNeeded = true
				}
			}
			continue
		}
		if ps.Action == ActStart {
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
			return res, l.fail(ctx, name, fresh, taken, fmt.Errorf("apply %s: %s: %w", name, ps.Text, err))
		}
		// Each step is recorded before it is taken, in the same transaction that marks the
		// previous step done (so an apply costs one ledger write per step, plus one).
		var n int
		if preN > 0 {
			n, preN = preN, 0
		} else if err := l.o.Ledger.Update(func(b *ledger.Book) error {
			e := b.Entry(name)
			if pending > 0 {
				e.Mark(pending, ledger.StepDone)
			}
			n = e.Record(ps.Action, ps.Target, ps.Params)
			return nil
		}); err != nil {
			return res, l.fail(ctx, name, fresh, taken, fmt.Errorf("apply %s: record %s: %w", name, ps.Text, err))
		}
		pending = 0
		step := ledger.Step{N: n, Action: ps.Action, Target: ps.Target, Params: ps.Params}
		taken = append(taken, step)
		l.taken++
		crash := l.o.CrashAt > 0 && l.taken == l.o.CrashAt && l.o.Crash != nil
		if crash && l.o.CrashBefore {
			l.o.Crash()
		}
		l.progress("%s: %s", name, ps.Text)
		if err := l.do(ctx, vm, plan, ps); err != nil {
			if errors.Is(err, errNotTaken) || errors.Is(err, virt.ErrVolumeExists) {
				// Nothing was created: forget the step rather than undo it.
				taken = taken[:len(taken)-1]
				_ = l.o.Ledger.Update(func(b *ledger.Book) error { b.Entry(name).Mark(n, ledger.StepUndone); return nil })
			}
			return res, l.fail(ctx, name, fresh, taken, fmt.Errorf("apply %s: %s: %w", name, ps.Text, err))
		}
		if crash {
			l.o.Crash()
		}
		pending = n
		res.Steps = append(res.Steps, ps.Text)
	}
	if err := l.o.Ledger.Update(func(b *ledger.Book) error {
		e := b.Entry(name)
		if pending > 0 {
			e.Mark(pending, ledger.StepDone)
		} else if e.Phase == ledger.PhaseApplied && e.SpecHash == plan.SpecHash {
			return errNoop
		}
		e.Phase, e.SpecHash = ledger.PhaseApplied, plan.SpecHash
		return nil
	}); err != nil && !errors.Is(err, errNoop) {
		return res, err
	}
	if fresh && l.o.NoStart {
		// Just defined, never started: no need to ask libvirt.
		res.State = virt.StateShutoff
	} else {
		res.State, _ = l.o.Conn.State(ctx, name)
	}
	return res, nil
}

// fail undoes the steps this apply took, newest first; a fresh VM's entry and claims go too.
func (l *Lifecycle) fail(ctx context.Context, name string, fresh bool, taken []ledger.Step, cause error) error {
	for i := len(taken) - 1; i >= 0; i-- {
		if err := l.undo(ctx, name, taken[i]); err != nil {
			return fmt.Errorf("%w; undo also failed (run vgpu-host destroy %s): %w", cause, name, err)
		}
	}
	if fresh {
		if err := l.o.Ledger.Update(func(b *ledger.Book) error { delete(b.VMs, name); return nil }); err != nil {
			return fmt.Errorf("%w; releasing its devices failed: %w", cause, err)
		}
	}
	return cause
}

func sameClaims(a, b []ledger.Claim) bool {
	if len(a) != len(b) {
		return false
	}
	keys := map[string]bool{}
	for _, c := range a {
		keys[c.Key()] = true
	}
	for _, c := range b {
		if !keys[c.Key()] {
			return false
		}
	}
	return true
}

func splitAddrs(s string) ([]host.Address, error) {
	var out []host.Address
	for _, f := range splitComma(s) {
		a, err := host.ParseAddress(f)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

func splitComma(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			if i > start {
				out = append(out, s[start:i])
			}
			start = i + 1
		}
	}
	return out
}

func (l *Lifecycle) needHost(what string) error {
	if l.o.Host == nil {
		return fmt.Errorf("%s: this build has no host preparation wired in: %w", what, host.ErrUnsupported)
	}
	return nil
}

// do takes one step.
func (l *Lifecycle) do(ctx context.Context, vm *domains.VM, plan *Plan, s PlannedStep) error {
	name := vm.Metadata.Name
	switch s.Action {
	case ActBindGroup:
		if err := l.needHost(s.Text); err != nil {
			return err
		}
		addrs, err := splitAddrs(s.Params["functions"])
		if err != nil {
			return err
		}
		return l.o.Host.BindGroup(ctx, name, addrs)
	case ActCreateMdev:
		if err := l.needHost(s.Text); err != nil {
			return err
		}
		return l.o.Host.CreateMdev(ctx, name, s.Params["parent"], s.Params["type"], s.Target)
	case ActAssignVGPU:
		if err := l.needHost(s.Text); err != nil {
			return err
		}
		vf, err := host.ParseAddress(s.Target)
		if err != nil {
			return err
		}
		index, _ := strconv.Atoi(s.Params["index"])
		return l.o.Host.AssignVGPU(ctx, name, vf, s.Params["type"], index)
	case ActEnsurePool:
		return l.o.Conn.EnsureDirPool(ctx, l.o.Pool, l.o.PoolDir)
	case ActCreateOverlay:
		size, _ := strconv.ParseUint(s.Params["size"], 10, 64)
		return l.o.Conn.CreateVolume(ctx, l.o.Pool, virt.Volume{Name: s.Target, Format: "qcow2", Capacity: size,
			BackingPath: s.Params["backing"], BackingFormat: s.Params["backing_format"]})
	case ActWriteSeed:
		iso, err := seedOf(vm).ISO()
		if err != nil {
			return err
		}
		return l.o.Conn.UploadVolume(ctx, l.o.Pool, s.Target, iso)
	case ActDefine:
		_, err := l.o.Conn.Define(ctx, plan.XML)
		return err
	case ActStart:
		return l.o.Conn.Start(ctx, name)
	}
	return fmt.Errorf("unknown step %q", s.Action)
}

// undo reverts one journal step and marks it undone. Every undo is safe to repeat.
func (l *Lifecycle) undo(ctx context.Context, name string, s ledger.Step) error {
	var err error
	switch s.Action {
	case ActStart:
		err = l.o.Conn.Destroy(ctx, s.Target)
	case ActDefine:
		if err = l.o.Conn.Destroy(ctx, s.Target); err == nil || virt.IsNotFound(err) {
			err = l.o.Conn.Undefine(ctx, s.Target)
		}
	case ActCreateOverlay, ActWriteSeed:
		pool := s.Params["pool"]
		if pool == "" {
			pool = l.o.Pool
		}
		// The ledger is a file on disk: its names are input like any other.
		if err = errors.Join(host.CheckComponent("pool in ledger step", pool), host.CheckComponent("volume in ledger step", s.Target)); err == nil {
			err = l.o.Conn.DeleteVolume(ctx, pool, s.Target)
		}
	case ActCreateMdev:
		if err = l.needHost("remove mdev " + s.Target); err == nil {
			err = l.o.Host.RemoveMdev(ctx, name, s.Target)
		}
	case ActAssignVGPU:
		var vf host.Address
		if vf, err = host.ParseAddress(s.Target); err == nil {
			if err = l.needHost("clear vGPU type of " + s.Target); err == nil {
				err = l.o.Host.ClearVGPU(ctx, name, vf, s.Params["type"])
			}
		}
	case ActBindGroup:
		var addrs []host.Address
		if addrs, err = splitAddrs(s.Params["functions"]); err == nil {
			if err = l.needHost("restore drivers of " + s.Target); err == nil {
				err = l.o.Host.RestoreGroup(ctx, name, addrs)
			}
		}
	case ActEnsurePool:
		// The pool is shared by every VM: never removed.
	}
	if err != nil && !virt.IsNotFound(err) {
		return fmt.Errorf("undo %s %s: %w", s.Action, s.Target, err)
	}
	l.progress("%s: undid %s %s", name, s.Action, s.Target)
	return l.o.Ledger.Update(func(b *ledger.Book) error {
		if e := b.VMs[name]; e != nil {
			e.Mark(s.N, ledger.StepUndone)
		}
		return nil
	})
}

// teardown undoes every live journal step of name, newest first, then forgets the VM
// (releasing its claims). It returns the steps it undid.
func (l *Lifecycle) teardown(ctx context.Context, name string) ([]string, error) {
	var live []ledger.Step
	if err := l.o.Ledger.Update(func(b *ledger.Book) error {
		e := b.VMs[name]
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
	for i := len(live) - 1; i >= 0; i-- {
		if err := l.undo(ctx, name, live[i]); err != nil {
			return undone, err
		}
		undone = append(undone, live[i].Action+" "+live[i].Target)
	}
	return undone, l.o.Ledger.Update(func(b *ledger.Book) error { delete(b.VMs, name); return nil })
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
	book, err := l.o.Ledger.Read()
	if err != nil {
		return nil, err
	}
	e := book.VMs[name]
	if e == nil {
		return nil, fmt.Errorf("destroy %s: not in the ledger %s (vgpu-host did not create it, or it is gone already): %w", name, l.o.Ledger.Path(), host.ErrNotFound)
	}
	res := &DestroyResult{VM: name, Released: e.Claims}
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
	for _, name := range sortedKeys(book.VMs) {
		e := book.VMs[name]
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
