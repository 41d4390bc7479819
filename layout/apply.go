package layout

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/internal/filelock"
	"github.com/vgpu-host/vgpu-host/internal/revert"
	"github.com/vgpu-host/vgpu-host/mdev"
	"github.com/vgpu-host/vgpu-host/vfio"
)

// Done is one change Apply made (or, in a dry run, would make).
type Done struct {
	HostChange
	// Result is "done", or "undone" when a later change failed and this one was undone.
	Result string `json:"result"`
	// Instances are the instances it created (mdev UUIDs, VF addresses).
	Created []string `json:"created,omitempty"`
}

// ApplyOptions control Apply.
type ApplyOptions struct {
	// Force names the checks to go past (ForceableChecks).
	Force []string
	// DryRun makes no change: h.Mdev writes to a host.Recorder (the caller's), binds are
	// only recorded, no file is written. Files lists what would be.
	DryRun bool
}

// HostApplyResult is what Apply did.
type HostApplyResult struct {
	Plan *HostPlan `json:"plan"`
	Done []Done    `json:"done"`
	// Files are the files a dry run would write (persistence); empty otherwise.
	Files []string `json:"files,omitempty"`
}

// Apply makes the changes of plan in its order, each through the verb the imperative command
// uses (mdev remove --undefine, vf enable/disable --persist, mdev create + define, bind/unbind
// --persist). A change that fails undoes, newest first, every change this run made, and the
// error says both what failed and whether the undo did. A plan with refusals is not applied.
func Apply(ctx context.Context, h *Host, plan *HostPlan, opts ApplyOptions) (*HostApplyResult, error) {
	res := &HostApplyResult{Plan: plan, Done: []Done{}}
	if err := plan.Err(); err != nil {
		return res, err
	}
	rv := revert.New()
	env := Env{Host: h, ApplyOptions: opts}
	bg := context.WithoutCancel(ctx)
	for _, c := range plan.Changes {
		d := Done{HostChange: c, Result: "done"}
		out, err := do(ctx, env, c)
		res.Files = append(res.Files, out.Files...)
		if err != nil {
			uerr := rv.Fail()
			for i := range res.Done {
				res.Done[i].Result = "undone"
			}
			note := "nothing before it to undo"
			if len(res.Done) > 0 {
				note = fmt.Sprintf("the %d change(s) before it were undone", len(res.Done))
				if uerr != nil {
					note = fmt.Sprintf("undoing the %d change(s) before it failed too", len(res.Done))
				}
			}
			return res, revert.Wrap(fmt.Errorf("layout %s: %s %s (%s): %w (%s)", plan.Config, c.Action, c.Target, c.Detail, err, note), uerr)
		}
		d.Created = out.Created
		op := c.Op
		rv.Add(func() error { return op.Undo(bg, env, out) })
		res.Done = append(res.Done, d)
	}
	rv.Success()
	return res, nil
}

// do makes one change through its Op.
func do(ctx context.Context, env Env, c HostChange) (Outcome, error) {
	if c.Op == nil {
		return Outcome{}, fmt.Errorf("layout: %w: unknown change %q", host.ErrInvalid, c.Action)
	}
	return c.Op.Do(ctx, env)
}

// dryOps copies a dry-run bind/unbind's sysfs writes into the Manager's recorder (so the dry
// run lists every write in order) and returns the files it would write or remove (a module it
// would load is not a file: the bind's own dry run shows it).
func (h *Host) dryOps(res *vfio.Result, dry bool) []string {
	if !dry || res == nil {
		return nil
	}
	var files []string
	for _, s := range res.Steps {
		switch s.Op {
		case vfio.OpWrite:
			_ = h.Mdev.W.Write(context.Background(), s.Path, s.Value)
		case vfio.OpFile:
			files = append(files, s.Path)
		case vfio.OpRemove:
			files = append(files, s.Path+" (removed)")
		}
	}
	return files
}

// recreate puts back removed instances (the undo of a removal): mdevs with their UUID and
// definition, vendor types on their VF.
func (h *Host) recreate(ctx context.Context, ins []mdev.Instance) error {
	var errs []error
	for _, in := range ins {
		if in.Backend == mdev.BackendNvidiaVFIO && in.VF != nil {
			_, err := h.Mdev.Create(ctx, mdev.CreateRequest{Parent: in.Parent, Profile: in.Type, Count: 1, VFs: []host.Address{*in.VF}})
			errs = append(errs, err)
			continue
		}
		if in.Active {
			if _, err := h.Mdev.Create(ctx, mdev.CreateRequest{Parent: in.Parent, Profile: in.Type, UUIDs: []string{in.UUID}}); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		if in.Defined {
			_, err := h.Mdev.Define(mdev.Definition{UUID: in.UUID, Parent: in.Parent, Type: in.Type, Start: in.Start})
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ApplyConfig is `host layout apply`: under the layout lock it plans configuration name of f
// (source is the file's path, data its content), applies the plan and, unless a dry run,
// records the selection (SaveSelection). A plan with refusals changes nothing and is
// returned with its error.
func ApplyConfig(ctx context.Context, h *Host, f *File, name, source string, data []byte, opts ApplyOptions) (*HostApplyResult, error) {
	var res *HostApplyResult
	run := func() error {
		plan, err := PlanConfig(ctx, h, f, name, opts.Force)
		if plan == nil {
			return err
		}
		res, err = Apply(ctx, h, plan, opts)
		if err != nil || opts.DryRun {
			if opts.DryRun && err == nil {
				res.Files = append(res.Files, SelectionPath(h.Root))
			}
			return err
		}
		return SaveSelection(h.Root, Selection{Config: plan.Config, Source: source, Layout: string(data), AppliedAt: time.Now().UTC()})
	}
	if opts.DryRun {
		return res, run()
	}
	err := filelock.WithIn(h.Root, h.Root.StateDir("layout.lock"), filelock.Exclusive, filelock.DefaultTimeout, run)
	return res, err
}
