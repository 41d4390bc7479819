package ops

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/layout"
	"github.com/vgpu-host/vgpu-host/mdev"
	"github.com/vgpu-host/vgpu-host/mig"
	"github.com/vgpu-host/vgpu-host/vfio"
)

// layoutHost builds the layout's view of the host on env: its mdev.Manager (MdevManager: the
// dry run's recorder, the allocation ledger, libvirt asked which domains use an instance on
// the real root, or under any root when askLibvirt), a vfio.Binder on the same writer, and
// the MIG backend when env has one. done lets them all go.
func layoutHost(env Env, timeout time.Duration, dryRun, askLibvirt bool) (*layout.Host, *host.Recorder, func()) {
	m, rec, done := MdevManager(env, timeout, dryRun)
	if askLibvirt && !env.Root.IsReal() {
		l := env.lazyLibvirt()
		m.Domains = l
		prev := done
		done = func() { prev(); l.Close() }
	}
	_, mods := env.HostIO()
	h := &layout.Host{Root: env.Root, Mdev: m, Binder: &vfio.Binder{Root: env.Root, W: m.W, Modules: mods, Timeout: m.Timeout}}
	if env.LayoutMIG != nil {
		var closeMIG func()
		h.MIG, h.MIGPlanner, closeMIG = env.LayoutMIG()
		prev := done
		done = func() { closeMIG(); prev() }
	}
	return h, rec, done
}

// LayoutShowRequest is `host layout show`: the layout the host is in now, or the one the last
// apply recorded.
type LayoutShowRequest struct {
	// Selected shows the configuration the last apply recorded instead (--selected).
	Selected bool `json:"selected,omitempty"`
	// Timeout bounds each sysfs read's wait (mdev.DefaultTimeout when not positive).
	Timeout time.Duration `json:"timeout,omitempty"`
}

// Op is "host layout show".
func (LayoutShowRequest) Op() string { return "host layout show" }

// Bool is the request's boolean setting by its flag's name.
func (r LayoutShowRequest) Bool(name string) bool { return name == "selected" && r.Selected }

// IsSet reports whether the request sets the named setting.
func (r LayoutShowRequest) IsSet(name string) bool {
	if name == "timeout" {
		return r.Timeout > 0 && r.Timeout != mdev.DefaultTimeout
	}
	return r.Bool(name)
}

// LayoutShowResult is host layout show's answer: the layout file the host is in, or with
// Selected the recorded selection and the file it holds.
type LayoutShowResult struct {
	// Selection is the selection the last apply recorded (Selected only).
	Selection *layout.Selection
	// File is the layout: the host's now, or the selection's.
	File *layout.File
}

// Value is the result as --output json prints it: the selection, or the layout file.
func (r *LayoutShowResult) Value() any {
	if r.Selection != nil {
		return r.Selection
	}
	return r.File
}

// LayoutShow is host layout show: the host's devices read back as a layout file (mode by mode),
// or with Selected the configuration the last apply recorded (exit 6 when none was).
func LayoutShow(ctx context.Context, env Env, req LayoutShowRequest) (*LayoutShowResult, error) {
	h, _, done := layoutHost(env, req.Timeout, false, false)
	defer done()
	if req.Selected {
		s, f, err := layout.LoadSelection(h.Root)
		if err != nil {
			return nil, err
		}
		if s == nil {
			return nil, fmt.Errorf("no layout was applied on this host (no %s): %w", host.HostPath(h.Root, layout.SelectionPath(h.Root)), host.ErrNotFound)
		}
		return &LayoutShowResult{Selection: s, File: f}, nil
	}
	f, err := layout.Show(ctx, h)
	if err != nil {
		return nil, err
	}
	return &LayoutShowResult{File: f}, nil
}

// LayoutPlanRequest is `host layout plan FILE`: the changes that bring the host to a
// configuration of a layout, in order. The layout travels as its content: the agent opens no
// file a caller names.
type LayoutPlanRequest struct {
	// File is the layout file's name as the caller gave it (errors and apply's record name it).
	File string `json:"file"`
	// Data is the layout file's content.
	Data []byte `json:"data"`
	// Config is the configuration to use (--config): needed when the file has several and
	// none is the default.
	Config string `json:"config,omitempty"`
	// Force are the safety checks to go past, each by name (layout.ForceableChecks).
	Force []string `json:"force,omitempty"`
	// AskLibvirt asks env's libvirt which domains use an instance even under a root that is
	// not this machine's (--connect); on the real root it is always asked.
	AskLibvirt bool `json:"ask_libvirt,omitempty"`
	// Timeout bounds each sysfs write and wait (mdev.DefaultTimeout when not positive).
	Timeout time.Duration `json:"timeout,omitempty"`
}

// Op is "host layout plan".
func (LayoutPlanRequest) Op() string { return "host layout plan" }

// Bool is false: host layout plan has no boolean setting.
func (LayoutPlanRequest) Bool(string) bool { return false }

// IsSet reports whether the request sets the named setting.
func (r LayoutPlanRequest) IsSet(name string) bool {
	switch name {
	case "config":
		return r.Config != ""
	case "force":
		return len(r.Force) > 0
	case "connect":
		return r.AskLibvirt
	case "timeout":
		return r.Timeout > 0 && r.Timeout != mdev.DefaultTimeout
	}
	return false
}

// file parses the request's layout and checks its --force names.
func (r LayoutPlanRequest) file() (*layout.File, []string, error) {
	f, err := layout.Parse(r.Data)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", r.File, err)
	}
	force, err := CheckForce(r.Force, layout.ForceableChecks())
	if err != nil {
		return nil, nil, err
	}
	return f, force, nil
}

// LayoutPlanResult is the plan host layout plan prints: its JSON is the command's --output json.
type LayoutPlanResult = layout.HostPlan

// LayoutPlan is host layout plan: the changes in dependency order, and nothing changed. A
// plan with refusals comes back with an error (exit 4).
func LayoutPlan(ctx context.Context, env Env, req LayoutPlanRequest) (*LayoutPlanResult, error) {
	f, force, err := req.file()
	if err != nil {
		return nil, err
	}
	h, _, done := layoutHost(env, req.Timeout, false, req.AskLibvirt)
	defer done()
	return layout.PlanConfig(ctx, h, f, req.Config, force)
}

// LayoutApplyRequest is `host layout apply FILE`: the plan's changes taken, undone all if one
// fails, and recorded for host restore.
type LayoutApplyRequest struct {
	LayoutPlanRequest
	// DryRun makes no change and reports the exact writes (--dry-run).
	DryRun bool `json:"dry_run,omitempty"`
}

// Op is "host layout apply".
func (LayoutApplyRequest) Op() string { return "host layout apply" }

// Bool is the request's boolean setting by its flag's name.
func (r LayoutApplyRequest) Bool(name string) bool { return name == "dry-run" && r.DryRun }

// IsSet reports whether the request sets the named setting.
func (r LayoutApplyRequest) IsSet(name string) bool {
	return r.Bool(name) || r.LayoutPlanRequest.IsSet(name)
}

// LayoutApplyResult is what host layout apply did, and with a dry run the report of the writes
// it would make (its JSON output then).
type LayoutApplyResult struct {
	Apply  *layout.HostApplyResult
	DryRun *DryRunReport
}

// Value is the result as --output json prints it.
func (r *LayoutApplyResult) Value() any {
	if r.DryRun != nil {
		return r.DryRun
	}
	return r.Apply
}

// LayoutApply is host layout apply: only what differs from the configuration changed, in
// dependency order, undone all if one change fails, and the selection recorded; with DryRun
// the exact writes and files, and nothing changed. A plan with refusals or a failed change
// comes back with its result and the error.
func LayoutApply(ctx context.Context, env Env, req LayoutApplyRequest) (*LayoutApplyResult, error) {
	f, force, err := req.file()
	if err != nil {
		return nil, err
	}
	h, rec, closeHost := layoutHost(env, req.Timeout, req.DryRun, req.AskLibvirt)
	done := sync.OnceFunc(closeHost)
	defer done()
	res, err := layout.ApplyConfig(ctx, h, f, req.Config, req.File, req.Data, layout.ApplyOptions{Force: force, DryRun: rec != nil})
	err = mig.WithHolders(env.Root, err, done)
	if res == nil {
		return nil, err
	}
	if rec != nil && err == nil {
		return &LayoutApplyResult{Apply: res, DryRun: DryRun(rec, res.Files, res)}, nil
	}
	return &LayoutApplyResult{Apply: res}, err
}
