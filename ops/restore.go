package ops

import (
	"context"
	"errors"
	"time"

	"github.com/vgpu-host/vgpu-host/agent/reconcile"
	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/mdev"
	"github.com/vgpu-host/vgpu-host/vfio"
)

// RestoreRequest is `host restore`, POST /v1/host/restore.
type RestoreRequest struct {
	// DryRun is --dry-run: the exact writes, nothing changed.
	DryRun bool
	// Timeout bounds each sysfs write and wait (mdev.DefaultTimeout when not positive; the
	// bindings' each write and driver wait by this value as given).
	Timeout time.Duration
}

// Op is "host restore".
func (RestoreRequest) Op() string { return "host restore" }

// Bool is the request's boolean setting by its flag's name.
func (r RestoreRequest) Bool(name string) bool { return name == "dry-run" && r.DryRun }

// IsSet reports whether the request sets the named setting.
func (r RestoreRequest) IsSet(name string) bool {
	return r.Bool(name) || name == "timeout" && r.Timeout != mdev.DefaultTimeout
}

// RestoreResult is what host restore did: each step, or with a dry run the report of the
// writes it would make (its JSON output then).
type RestoreResult struct {
	reconcile.Result
	DryRun *DryRunReport
}

// Value is the result as --output json prints it.
func (r *RestoreResult) Value() any {
	if r.DryRun != nil {
		return r.DryRun
	}
	return r.Steps
}

// Restore is host restore: the persisted state re-applied in order (SR-IOV VFs, vendor vGPU
// types, mdev instances, vfio-pci bindings), what is in place left alone; a failed step does
// not stop the others. Its result holds every step even when it fails.
func Restore(ctx context.Context, env Env, req RestoreRequest) (*RestoreResult, error) {
	m, rec, done := MdevManager(env, req.Timeout, req.DryRun)
	defer done()
	w, mods := env.HostIO()
	r := &reconcile.Reconciler{Mdev: m, Binder: &vfio.Binder{Root: m.Root, W: w, Modules: mods, Timeout: req.Timeout},
		OpenMIG: env.OpenMIG}
	res, rerr := r.Run(ctx)
	if rec != nil && rerr == nil {
		// The bindings' dry-run writes come after the mdev ones, as a real run makes them.
		for _, s := range res.Steps {
			for _, wr := range s.Writes {
				_ = rec.Write(ctx, wr.Path, wr.Value)
			}
		}
		return &RestoreResult{Result: res, DryRun: DryRun(rec, nil, res.Steps)}, nil
	}
	return &RestoreResult{Result: res}, damagedState(rerr)
}

// damagedState gives an error of an operation that reads no input but vgpu-host's own state
// files (host restore) the exit code docs/security.md promises for a damaged one: 1, not the 2
// of a bad spec or command line, although the strict decode inside wraps host.ErrInvalid.
// The other errors joined with it keep their code (5 for a busy device, ...).
func damagedState(err error) error {
	if err == nil || !errors.Is(err, host.ErrInvalid) {
		return err
	}
	code := ExitFailure
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var rest []error
		for _, e := range j.Unwrap() {
			if !errors.Is(e, host.ErrInvalid) {
				rest = append(rest, e)
			}
		}
		if c := ExitCode(errors.Join(rest...)); c != ExitOK {
			code = c
		}
	}
	return &Error{Code: code, Err: err}
}
