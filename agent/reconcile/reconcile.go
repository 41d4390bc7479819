// Package reconcile brings a host back to its persisted state after a boot, in the order
// guests need it:
//
//  0. MIG GPU instances of the stored host layout (`host layout apply`): NVML forgets them at
//     every reboot, and MIG-backed vGPU types on the VFs need them;
//  1. SR-IOV VF counts (`vf enable --persist`): vendor vGPU VFs and mdev parents on VFs need them;
//  2. vendor-VFIO vGPU types on those VFs (NVIDIA vGPU 17+);
//  3. mdev instances defined with start "auto" (`mdev define`, mdevctl's files);
//  4. vfio-pci bindings made with `bind --persist` (their driverctl overrides);
//
// and nothing else. The first three are mdev.Manager.Restore, the fourth is vfio.Binder.Bind
// of each persisted group: reconcile adds no second writer of either, only the order, a
// duration per step, structured logs and a Result the agent's health, status and metrics
// show. `vgpu-host host restore` runs the same code without the agent.
//
// A step that fails does not stop the others; everything already in place is left alone and
// reported as "already".
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/layout"
	"github.com/vgpu-host/vgpu-host/mdev"
	"github.com/vgpu-host/vgpu-host/mig"
	"github.com/vgpu-host/vgpu-host/vfio"
)

// Step kinds, in the order Run takes them.
const (
	KindMIG        = "mig"
	KindSRIOV      = "sriov"
	KindVendorVGPU = "vendor-vgpu"
	KindMdev       = "mdev"
	KindVFIO       = "vfio"
)

// Kinds lists the step kinds in dependency order.
var Kinds = []string{KindMIG, KindSRIOV, KindVendorVGPU, KindMdev, KindVFIO}

// Step results.
const (
	Applied = "applied" // it was not in place; now it is
	Already = "already" // it was in place; nothing was written
	Skipped = "skipped" // persisted, but not to be applied at boot (an mdev with start "manual")
	Failed  = "failed"  // it could not be applied; Error says why
)

// Results lists every step result.
var Results = []string{Applied, Already, Skipped, Failed}

// Step is one persisted fact Run checked and, if needed, applied.
type Step struct {
	Kind   string `json:"kind"`
	Target string `json:"target"`
	Want   string `json:"want"`
	Result string `json:"result"`
	Error  string `json:"error,omitempty"`
	// Duration is how long the step took; Took is the same as text ("3.237ms") for JSON,
	// where every field of a step stays a string, as `host restore -o json` always printed.
	Duration time.Duration `json:"-"`
	Took     string        `json:"duration"`
	// Writes are the sysfs writes a dry run of a vfio step would make (dry runs only).
	Writes []host.RecordedWrite `json:"writes,omitempty"`
}

// Result is one reconcile: every step in the order taken, and totals.
type Result struct {
	Started    time.Time     `json:"started"`
	Duration   time.Duration `json:"-"`
	DurationMS float64       `json:"duration_ms"`
	DryRun     bool          `json:"dry_run,omitempty"`
	Steps      []Step        `json:"steps"`
	Applied    int           `json:"applied"`
	Already    int           `json:"already"`
	Skipped    int           `json:"skipped"`
	Failed     int           `json:"failed"`
}

// OK reports whether no step failed.
func (r Result) OK() bool { return r.Failed == 0 }

// Count returns how many steps of kind ended with result ("" matches any kind).
func (r Result) Count(kind, result string) int {
	n := 0
	for _, s := range r.Steps {
		if (kind == "" || s.Kind == kind) && s.Result == result {
			n++
		}
	}
	return n
}

// KindDuration is the time the steps of kind took together.
func (r Result) KindDuration(kind string) time.Duration {
	var d time.Duration
	for _, s := range r.Steps {
		if s.Kind == kind {
			d += s.Duration
		}
	}
	return d
}

// Summary is the one line a person reads: "reconciled 5 steps in 84ms: 3 applied, 2 already,
// 0 skipped, 0 failed".
func (r Result) Summary() string {
	return fmt.Sprintf("reconciled %d steps in %s: %d applied, %d already, %d skipped, %d failed",
		len(r.Steps), r.Duration.Round(time.Millisecond), r.Applied, r.Already, r.Skipped, r.Failed)
}

// Reconciler holds what Run needs. Mdev restores VFs, vendor types and mdevs (its DryRun makes
// the whole run a dry run); Binder binds the persisted groups (nil: no vfio step). Log gets
// one line per step and a summary (nil: discarded).
type Reconciler struct {
	Mdev   *mdev.Manager
	Binder *vfio.Binder
	Log    *slog.Logger
	// OpenMIG reaches NVML (the NVML helper); it is called only when the stored host layout
	// wants MIG instances (nil: such a layout's MIG step fails, saying NVML is not wired in).
	OpenMIG func() (mig.Backend, func(), error)
}

// Run takes every step in dependency order and returns the Result with the failures joined
// (nil when none failed). It never stops at a failed step.
func (r *Reconciler) Run(ctx context.Context) (Result, error) {
	log := r.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dry := r.Mdev != nil && r.Mdev.DryRun
	res := Result{Started: time.Now(), DryRun: dry, Steps: []Step{}}
	var errs []error
	add := func(s Step) {
		s.Took = s.Duration.Round(time.Microsecond).String()
		res.Steps = append(res.Steps, s)
		switch s.Result {
		case Applied:
			res.Applied++
		case Already:
			res.Already++
		case Skipped:
			res.Skipped++
		case Failed:
			res.Failed++
		}
		logStep(ctx, log, s)
	}
	log.InfoContext(ctx, "reconcile: start", "dry_run", dry, "order", strings.Join(Kinds, ","))

	if r.Mdev != nil {
		if err := r.migInstances(ctx, dry, add); err != nil {
			errs = append(errs, err)
		}
		_, err := r.Mdev.RestoreEach(ctx, func(m mdev.RestoreStep) {
			add(Step{Kind: m.Kind, Target: m.Target, Want: m.Want, Result: m.Result, Error: m.Error, Duration: m.Duration})
		})
		if err != nil {
			errs = append(errs, err)
		}
	}
	if r.Binder != nil {
		if err := r.bindings(ctx, dry, add); err != nil {
			errs = append(errs, err)
		}
	}
	res.Duration = time.Since(res.Started)
	res.DurationMS = float64(res.Duration.Microseconds()) / 1000
	lvl := slog.LevelInfo
	if res.Failed > 0 {
		lvl = slog.LevelWarn
	}
	log.Log(ctx, lvl, "reconcile: done", "steps", len(res.Steps), "applied", res.Applied, "already", res.Already,
		"skipped", res.Skipped, "failed", res.Failed, "duration", res.Duration)
	return res, errors.Join(errs...)
}

func logStep(ctx context.Context, log *slog.Logger, s Step) {
	attrs := []any{"kind", s.Kind, "target", s.Target, "want", s.Want, "result", s.Result, "duration", s.Duration}
	if s.Result == Failed {
		log.WarnContext(ctx, "reconcile step", append(attrs, "error", s.Error)...)
		return
	}
	log.InfoContext(ctx, "reconcile step", attrs...)
}

// bindings binds the IOMMU group of every persisted binding (vfio.PersistedBindings) that is
// not on vfio-pci, one step per group, through Binder.Bind: the same checks, ledger and
// revert as `vgpu-host bind`. A group whose functions are all on vfio-pci already is "already"
// (Bind writes nothing for it).
func (r *Reconciler) bindings(ctx context.Context, dry bool, add func(Step)) error {
	root := r.Binder.Root
	t0 := time.Now()
	entries, err := vfio.PersistedBindings(root)
	if err != nil {
		add(Step{Kind: KindVFIO, Target: host.HostPath(root, vfio.LedgerPath(root)), Result: Failed, Error: err.Error(), Duration: time.Since(t0)})
		return err
	}
	// One step per IOMMU group as the kernel numbers it now (numbers follow probe order).
	type group struct {
		id    int
		addrs []host.Address
	}
	var groups []*group
	byID := map[int]*group{}
	var errs []error
	for _, e := range entries {
		g, err := r.Binder.Group(e.Address)
		if err != nil {
			err = fmt.Errorf("restore the vfio-pci binding of %s (bind --persist): %w", e.Address, err)
			add(Step{Kind: KindVFIO, Target: e.Address.String(), Want: vfio.DriverName, Result: Failed, Error: err.Error(), Duration: time.Since(t0)})
			errs = append(errs, err)
			t0 = time.Now()
			continue
		}
		if byID[g.ID] == nil {
			byID[g.ID] = &group{id: g.ID}
			groups = append(groups, byID[g.ID])
		}
		byID[g.ID].addrs = append(byID[g.ID].addrs, e.Address)
	}
	for _, g := range groups {
		names := make([]string, len(g.addrs))
		for i, a := range g.addrs {
			names[i] = a.String()
		}
		s := Step{Kind: KindVFIO, Target: strings.Join(names, ","), Want: fmt.Sprintf("IOMMU group %d on %s", g.id, vfio.DriverName)}
		out, err := r.Binder.Bind(ctx, g.addrs, vfio.BindOptions{DryRun: dry})
		switch {
		case err != nil:
			err = fmt.Errorf("restore the vfio-pci binding of %s (bind --persist): %w", s.Target, err)
			s.Result, s.Error = Failed, err.Error()
			errs = append(errs, err)
		case len(out.Steps) == 0:
			s.Result = Already
		default:
			s.Result = Applied
		}
		if dry && out != nil {
			for _, op := range out.Steps {
				if op.Op == vfio.OpWrite {
					s.Writes = append(s.Writes, host.RecordedWrite{Path: op.Path, Value: op.Value})
				}
			}
		}
		s.Duration = time.Since(t0)
		add(s)
		t0 = time.Now()
	}
	return errors.Join(errs...)
}

// migInstances creates again the MIG GPU instances the stored host layout wants (through
// package mig: what exists and matches is kept), one step per GPU. No stored layout, or none
// with mig entries, is no step.
func (r *Reconciler) migInstances(ctx context.Context, dry bool, add func(Step)) error {
	t0 := time.Now()
	want, config, err := layout.StoredMIG(r.Mdev.Root)
	if err != nil {
		add(Step{Kind: KindMIG, Target: host.HostPath(r.Mdev.Root, layout.SelectionPath(r.Mdev.Root)), Result: Failed, Error: err.Error(), Duration: time.Since(t0)})
		return err
	}
	if len(want) == 0 {
		return nil
	}
	gpus := make([]string, 0, len(want))
	for a := range want {
		gpus = append(gpus, a)
	}
	sort.Strings(gpus)
	fail := func(err error) error {
		err = fmt.Errorf("restore the MIG instances of host layout %q: %w", config, err)
		for _, g := range gpus {
			add(Step{Kind: KindMIG, Target: g, Want: strings.Join(want[g], ","), Result: Failed, Error: err.Error(), Duration: time.Since(t0)})
		}
		return err
	}
	if r.OpenMIG == nil {
		return fail(fmt.Errorf("NVML is not available here: %w", host.ErrUnsupported))
	}
	b, closeMIG, err := r.OpenMIG()
	if err != nil {
		return fail(err)
	}
	done := sync.OnceFunc(closeMIG)
	defer done()
	st, err := b.State(ctx)
	if err != nil {
		return fail(err)
	}
	ch, err := mig.Plan(st, want)
	if err != nil {
		return fail(err)
	}
	byGPU := map[string]mig.Changes{}
	for _, c := range ch.Steps {
		g := byGPU[c.GPU]
		g.Steps = append(g.Steps, c)
		byGPU[c.GPU] = g
	}
	var errs []error
	steps := make([]Step, 0, len(gpus))
	stepErrs := make([]error, 0, len(gpus))
	for _, g := range gpus {
		t1 := time.Now()
		s := Step{Kind: KindMIG, Target: g, Want: strings.Join(want[g], ","), Result: Already}
		var serr error
		if c, ok := byGPU[g]; ok && len(c.Steps) > 0 {
			s.Result = Applied
			if !dry {
				if serr = mig.Apply(ctx, b, c); serr != nil {
					s.Result, s.Error = Failed, serr.Error()
					errs = append(errs, serr)
				}
			}
		}
		s.Duration = time.Since(t1)
		steps, stepErrs = append(steps, s), append(stepErrs, serr)
	}
	// A mode change left pending says who holds the GPU, once this run's own NVML helper is gone
	// (mig.PendingHolders): in each such step and in the error.
	err = errors.Join(errs...)
	held := mig.PendingHolders(r.Mdev.Root, err, done)
	for i := range steps {
		if held != "" && errors.Is(stepErrs[i], mig.ErrModePending) {
			steps[i].Error += "; " + held
		}
		add(steps[i])
	}
	if held != "" {
		return fmt.Errorf("%w; %s", err, held)
	}
	return err
}
