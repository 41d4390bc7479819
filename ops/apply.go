package ops

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/vgpu-host/vgpu-host/domains"
	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/lifecycle"
	"github.com/vgpu-host/vgpu-host/vfio"
	"github.com/vgpu-host/vgpu-host/virt"
)

// Spec is one VM spec of an apply or plan: loaded already (VM, by the CLI, which reads the
// caller's files as the caller), or content sent to the agent (Data, which Path names in
// messages), loaded by the operation.
type Spec struct {
	Path string
	Data []byte
	VM   *domains.VM
}

// String is the spec's path: what a log of the request shows, never its content.
func (s Spec) String() string { return s.Path }

// LoadSpecs loads every spec of operation op that is not loaded yet; two specs naming one VM
// are refused.
func LoadSpecs(op string, specs []Spec) ([]*domains.VM, error) {
	if len(specs) == 0 {
		return nil, Usagef("%s needs at least one SPEC file", op)
	}
	var vms []*domains.VM
	seen := map[string]string{}
	for _, s := range specs {
		vm := s.VM
		if vm == nil {
			var err error
			if s.Data != nil {
				vm, err = domains.LoadData(s.Path, s.Data)
			} else {
				vm, err = domains.Load(s.Path)
			}
			if err != nil {
				return nil, err
			}
		}
		if other, dup := seen[vm.Metadata.Name]; dup {
			return nil, fmt.Errorf("%s and %s both name VM %q: %w", other, s.Path, vm.Metadata.Name, host.ErrInvalid)
		}
		seen[vm.Metadata.Name] = s.Path
		vms = append(vms, vm)
	}
	return vms, nil
}

// CheckForce returns the --force names in values (each may be comma-separated), each one of
// allowed.
func CheckForce(values, allowed []string) ([]string, error) {
	var out []string
	for _, v := range values {
		for _, n := range strings.Split(v, ",") {
			n = strings.TrimSpace(n)
			if !slices.Contains(allowed, n) {
				return nil, Usagef("--force %q: name the check to go past: %s", n, strings.Join(allowed, ", "))
			}
			out = append(out, n)
		}
	}
	return out, nil
}

// CheckVirtType checks --virt-type: empty (libvirt's best) or kvm or qemu.
func CheckVirtType(vt string) error {
	if vt != "" && vt != "kvm" && vt != "qemu" {
		return Usagef("--virt-type %q: use kvm or qemu", vt)
	}
	return nil
}

// specLifecycle is the Lifecycle of an apply or plan named op: the specs loaded, then its
// virt type, forced checks and libvirt connection, in that order (the first error is the
// one the CLI always gave first).
func specLifecycle(env Env, op string, specs []Spec, virtType string, force []string, noStart bool) ([]*domains.VM, *lifecycle.Lifecycle, func(), error) {
	vms, err := LoadSpecs(op, specs)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := CheckVirtType(virtType); err != nil {
		return nil, nil, nil, err
	}
	forced, err := CheckForce(force, vfio.ForceableChecks)
	if err != nil {
		return nil, nil, nil, err
	}
	lc, done, err := env.lifecycle(op, lifecycle.Options{VirtType: virtType, Force: forced, NoStart: noStart})
	if err != nil {
		return nil, nil, nil, err
	}
	return vms, lc, done, nil
}

// ApplyRequest is `apply SPEC...`, POST /v1/vms.
type ApplyRequest struct {
	Specs []Spec
	// VirtType is --virt-type: "" (the best libvirt offers), kvm or qemu.
	VirtType string
	// Force are the safety checks to go past (--force; names may be comma-separated).
	Force []string
	// NoStart defines the domain without starting it.
	NoStart bool
	// WaitShutdown waits, after the start, until the guest powers itself off, at most
	// Timeout (image builders); the ticks of the wait are EventTick events.
	WaitShutdown bool
	Timeout      time.Duration
}

// Op is "apply".
func (ApplyRequest) Op() string { return "apply" }

// Bool is the request's boolean setting by its flag's name.
func (r ApplyRequest) Bool(name string) bool {
	switch name {
	case "no-start":
		return r.NoStart
	case "wait-shutdown":
		return r.WaitShutdown
	}
	return false
}

// IsSet reports whether the request sets the named setting.
func (r ApplyRequest) IsSet(name string) bool {
	switch name {
	case "virt-type":
		return r.VirtType != ""
	case "force":
		return len(r.Force) > 0
	}
	return r.Bool(name)
}

// Apply is apply: each VM made to exist as its spec says. A record for each VM applied; one
// that failed has none (the first failure is the error). Nothing applied and an error: no
// result.
func Apply(ctx context.Context, env Env, req ApplyRequest) ([]*lifecycle.VMApplyResult, error) {
	vms, lc, done, err := specLifecycle(env, "apply", req.Specs, req.VirtType, req.Force, req.NoStart)
	if err != nil {
		return nil, err
	}
	defer done()
	results := []*lifecycle.VMApplyResult{}
	var firstErr error
	for _, vm := range vms {
		res, err := lc.Apply(ctx, vm)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		if req.WaitShutdown && !req.NoStart {
			name := vm.Metadata.Name
			wctx, cancel := context.WithTimeout(ctx, req.Timeout)
			err := lc.WaitShutdown(wctx, name, func(d time.Duration) {
				env.tick("apply", name, "%s: waiting for the guest to power off (%s)", name, d.Truncate(time.Second))
			})
			cancel()
			env.tick("apply", name, "")
			if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
				err = fmt.Errorf("apply %s: %s did not power off within %s (--timeout); it is still running: wait for it with another apply --wait-shutdown, or stop it with vgpu-host destroy %s: %w",
					name, name, req.Timeout, name, err)
			}
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				continue
			}
			res.State = virt.StateShutoff
		}
		results = append(results, res)
	}
	if len(results) == 0 && firstErr != nil {
		return nil, firstErr // nothing was applied: nothing on stdout
	}
	return results, firstErr
}

// PlanRequest is `plan SPEC...`, POST /v1/plan (the migration's plan, plan --migrate, is
// the CLI's migrate --dry-run).
type PlanRequest struct {
	Specs    []Spec
	VirtType string
	Force    []string
	// NoStart plans without the start step.
	NoStart bool
}

// Op is "plan".
func (PlanRequest) Op() string { return "plan" }

// Bool is the request's boolean setting by its flag's name.
func (r PlanRequest) Bool(name string) bool { return name == "no-start" && r.NoStart }

// IsSet reports whether the request sets the named setting (never migrate: a migration's
// plan is not this request).
func (r PlanRequest) IsSet(name string) bool {
	switch name {
	case "virt-type":
		return r.VirtType != ""
	case "force":
		return len(r.Force) > 0
	}
	return r.Bool(name)
}

// PlanResult is plan's: the plans, printed, and the first refusal, which decides the exit
// code as apply's would.
type PlanResult struct {
	Plans []*lifecycle.VMPlan
}

// Plan is plan: in order, what apply would do for each spec, and every safety check that
// would refuse it. It changes nothing; it fails as apply would (4 refused, 5 busy) after the
// plans are printed.
func Plan(ctx context.Context, env Env, req PlanRequest) (*PlanResult, error) {
	vms, lc, done, err := specLifecycle(env, "plan", req.Specs, req.VirtType, req.Force, req.NoStart)
	if err != nil {
		return nil, err
	}
	defer done()
	plans, err := lc.Plan(ctx, vms)
	if err != nil {
		return nil, err
	}
	// Exit as apply would: the first plan a safety check refuses.
	for _, p := range plans {
		if err := p.Refused(); err != nil {
			return &PlanResult{Plans: plans}, err
		}
	}
	return &PlanResult{Plans: plans}, nil
}
