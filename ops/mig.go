package ops

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/mig"
)

// nvml opens env's MIG backend for mig show, plan and apply (Env.NVML).
func (e Env) nvml() (mig.Backend, func(), error) {
	if e.NVML == nil {
		return nil, nil, fmt.Errorf("mig: this vgpu-host has no way to NVML: %w", host.ErrUnsupported)
	}
	return e.NVML()
}

// MIGShowRequest is `mig show [GPU]`: the NVIDIA GPUs with their MIG mode, profiles, free
// placements and GPU instances, as NVML reports them.
type MIGShowRequest struct {
	// GPU names one GPU (PCI address, NVML index or UUID); empty: all.
	GPU string `json:"gpu,omitempty"`
}

// Op is "mig show".
func (MIGShowRequest) Op() string { return "mig show" }

// Bool is false: mig show has no boolean setting.
func (MIGShowRequest) Bool(string) bool { return false }

// IsSet is false: mig show has no flag.
func (MIGShowRequest) IsSet(string) bool { return false }

// MIGShowResult is what mig show lists: its JSON is the command's --output json.
type MIGShowResult []MIGGPUView

// MIGShow is mig show: NVML's MIG state (kept in the root's MIG state cache), one GPU's or
// every GPU's.
func MIGShow(ctx context.Context, env Env, req MIGShowRequest) (*MIGShowResult, error) {
	b, done, err := env.nvml()
	if err != nil {
		return nil, err
	}
	defer done()
	st, err := b.State(ctx)
	if err != nil {
		return nil, err
	}
	if req.GPU != "" {
		g, err := st.GPU(req.GPU)
		if err != nil {
			return nil, err
		}
		st.GPUs = []mig.GPU{g}
	}
	res := MIGShowResult(MIGView(st))
	return &res, nil
}

// MIGPlanRequest is `mig plan` and `mig apply`: one GPU brought to exactly a list of MIG
// profiles.
type MIGPlanRequest struct {
	// GPU is the GPU: PCI address, NVML index or UUID.
	GPU string `json:"gpu"`
	// Profiles are the GPU instances wanted, each a profile as nvidia-smi mig -lgip names it
	// or its profile ID, NAME*N (or NAME×N) for N of one; none: no instances.
	Profiles []string `json:"profiles"`
	// DisableMIG also turns MIG mode off; only with no Profiles (--disable-mig).
	DisableMIG bool `json:"disable_mig,omitempty"`
}

// Op is "mig plan".
func (MIGPlanRequest) Op() string { return "mig plan" }

// Bool is the request's boolean setting by its flag's name.
func (r MIGPlanRequest) Bool(name string) bool { return name == "disable-mig" && r.DisableMIG }

// IsSet reports whether the request sets the named setting.
func (r MIGPlanRequest) IsSet(name string) bool {
	switch name {
	case "gpu", "profiles":
		return true
	}
	return r.Bool(name)
}

// wanted is the instances the request wants, one entry per instance (NAME*N expanded); a
// count that is not 1 to 64, or --disable-mig with instances wanted, is refused (exit 2).
// spec is how the caller wrote the list (--profiles' value), for the message.
func (r MIGPlanRequest) wanted() ([]string, error) {
	spec := strings.Join(r.Profiles, ",")
	out := []string{}
	for _, f := range r.Profiles {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		name, n := f, 1
		for _, sep := range []string{"*", "×"} {
			if a, b, ok := strings.Cut(f, sep); ok {
				c, err := strconv.Atoi(strings.TrimSpace(b))
				if err != nil || c < 1 || c > 64 {
					return nil, Usagef("--profiles %q: %q is not NAME*COUNT with a count from 1 to 64", spec, f)
				}
				name, n = strings.TrimSpace(a), c
			}
		}
		for i := 0; i < n; i++ {
			out = append(out, name)
		}
	}
	if r.DisableMIG && len(out) > 0 {
		return nil, Usagef("--disable-mig goes with --profiles '' (no instances)")
	}
	return out, nil
}

// MIGApplyRequest is `mig apply`: MIGPlanRequest's plan taken, or with DryRun only shown.
type MIGApplyRequest struct {
	MIGPlanRequest
	// DryRun shows the changes and makes none (--dry-run).
	DryRun bool `json:"dry_run,omitempty"`
}

// Op is "mig apply".
func (MIGApplyRequest) Op() string { return "mig apply" }

// Bool is the request's boolean setting by its flag's name.
func (r MIGApplyRequest) Bool(name string) bool {
	if name == "dry-run" {
		return r.DryRun
	}
	return r.MIGPlanRequest.Bool(name)
}

// IsSet reports whether the request sets the named setting.
func (r MIGApplyRequest) IsSet(name string) bool { return r.Bool(name) || r.MIGPlanRequest.IsSet(name) }

// MIGPlanResult is the changes mig plan would make, in order, and the instances it keeps: its
// JSON is the command's --output json.
type MIGPlanResult = mig.Changes

// MIGApplyResult is what mig apply did (or with DryRun would do): its JSON is the command's
// --output json.
type MIGApplyResult struct {
	mig.Changes
	// DryRun says nothing was changed: the steps are the plan.
	DryRun bool `json:"-"`
}

// migPlan reads the state through b and plans req.
func migPlan(ctx context.Context, b mig.Backend, req MIGPlanRequest) (mig.Changes, error) {
	want, err := req.wanted()
	if err != nil {
		return mig.Changes{}, err
	}
	st, err := b.State(ctx)
	if err != nil {
		return mig.Changes{}, err
	}
	g, err := st.GPU(req.GPU)
	if err != nil {
		return mig.Changes{}, err
	}
	return mig.PlanWith(st, map[string][]string{g.Address: want}, mig.PlanOptions{DisableWhenEmpty: req.DisableMIG})
}

// MIGPlan is mig plan: the changes that bring the GPU to exactly the profiles (instances
// already right are kept); nothing is changed. Profiles that cannot fit exit 5, an unknown
// GPU or profile 6.
func MIGPlan(ctx context.Context, env Env, req MIGPlanRequest) (*MIGPlanResult, error) {
	b, done, err := env.nvml()
	if err != nil {
		return nil, err
	}
	defer done()
	ch, err := migPlan(ctx, b, req)
	if err != nil {
		return nil, err
	}
	return &ch, nil
}

// MIGApply is mig apply: MIGPlan's changes taken in order, and what was done; with DryRun the
// plan and nothing changed.
func MIGApply(ctx context.Context, env Env, req MIGApplyRequest) (*MIGApplyResult, error) {
	b, closeNVML, err := env.nvml()
	if err != nil {
		return nil, err
	}
	done := sync.OnceFunc(closeNVML)
	defer done()
	ch, err := migPlan(ctx, b, req.MIGPlanRequest)
	if err != nil {
		return nil, err
	}
	if req.DryRun {
		return &MIGApplyResult{Changes: ch, DryRun: true}, nil
	}
	steps, err := mig.ApplySteps(ctx, b, ch)
	if err != nil {
		return nil, mig.WithHolders(env.Root, err, done)
	}
	if steps == nil {
		steps = []mig.GPUChange{}
	}
	return &MIGApplyResult{Changes: mig.Changes{Steps: steps, Kept: ch.Kept}}, nil
}
