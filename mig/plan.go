package mig

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/internal/revert"
)

// Op is one kind of change.
type Op string

// The changes Plan makes, in the order Apply runs them on a GPU.
const (
	OpEnable  Op = "enable-mig"  // turn MIG mode on
	OpDestroy Op = "destroy"     // destroy a GPU instance (and its compute instances)
	OpCreate  Op = "create"      // create a GPU instance with one compute instance
	OpDisable Op = "disable-mig" // turn MIG mode off (only when asked, on a GPU wanted empty)
)

// GPUChange is one step of a plan: a change to one GPU's MIG mode or GPU instances.
type GPUChange struct {
	Op      Op     `json:"op"`
	GPU     string `json:"gpu"`
	Profile string `json:"profile,omitempty"`
	// Instance is the GPU instance id a destroy removes.
	Instance int `json:"instance,omitempty"`
	// Placement is where a create puts the instance (or where a destroyed one was).
	Placement *Placement `json:"placement,omitempty"`
}

// String renders a change as plan prints it.
func (c GPUChange) String() string {
	switch c.Op {
	case OpEnable:
		return fmt.Sprintf("enable MIG mode on %s", c.GPU)
	case OpDisable:
		return fmt.Sprintf("disable MIG mode on %s", c.GPU)
	case OpDestroy:
		return fmt.Sprintf("destroy GPU instance %d (%s, slices %s) on %s", c.Instance, c.Profile, c.Placement, c.GPU)
	case OpCreate:
		return fmt.Sprintf("create a %s GPU instance at slices %s on %s", c.Profile, c.Placement, c.GPU)
	}
	return string(c.Op)
}

// Changes is a plan: the steps, in order, and the instances it keeps.
type Changes struct {
	Steps []GPUChange `json:"steps"`
	// Kept are the instances already matching the wanted profiles, left as they are.
	Kept []KeptInstance `json:"kept"`
}

// KeptInstance is an existing instance a plan leaves alone.
type KeptInstance struct {
	GPU string `json:"gpu"`
	Instance
}

// Empty reports whether the plan changes nothing.
func (c Changes) Empty() bool { return len(c.Steps) == 0 }

// PlanOptions tune Plan.
type PlanOptions struct {
	// DisableWhenEmpty turns MIG mode off on a GPU whose wanted list is empty (by default its
	// instances are destroyed and MIG mode is left on).
	DisableWhenEmpty bool
}

// Plan computes the changes that bring each GPU named in want (PCI address → profile names,
// repeated for several instances) to exactly that multiset of GPU instances, with default
// options. See PlanWith.
func Plan(s State, want map[string][]string) (Changes, error) {
	return PlanWith(s, want, PlanOptions{})
}

// PlanWith computes the changes that bring each GPU named in want to exactly that multiset of
// GPU instances: instances already of a wanted profile are kept as long as the rest still fits
// around them (the most that can be kept is kept), the others are destroyed, and the missing
// ones are created at placements where all of them fit; MIG mode is enabled first where it is
// off. Nothing is decided on a partial view: every GPU is checked (known address, MIG capable,
// known profiles, the list fits on the empty GPU) before any change is returned, and a refusal
// says why. GPUs not named in want are left alone.
func PlanWith(s State, want map[string][]string, opt PlanOptions) (Changes, error) {
	addrs := make([]string, 0, len(want))
	for a := range want {
		addrs = append(addrs, a)
	}
	sort.Strings(addrs)
	out := Changes{Steps: []GPUChange{}, Kept: []KeptInstance{}}
	var errs []error
	seen := map[string]string{}
	for _, a := range addrs {
		g, err := s.GPU(a)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if other, dup := seen[g.Address]; dup {
			errs = append(errs, fmt.Errorf("GPU %s: %w: named twice (%q and %q)", g.Address, host.ErrInvalid, other, a))
			continue
		}
		seen[g.Address] = a
		steps, kept, err := planGPU(g, want[a], opt)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out.Steps = append(out.Steps, steps...)
		for _, k := range kept {
			out.Kept = append(out.Kept, KeptInstance{GPU: g.Address, Instance: k})
		}
	}
	if len(errs) > 0 {
		return Changes{}, errors.Join(errs...)
	}
	return out, nil
}

// GPU finds the GPU at address (any form host.ParseAddress accepts), or by NVML index or UUID.
// An unknown one is an error wrapping host.ErrNotFound that lists the GPUs there are.
func (s State) GPU(address string) (GPU, error) {
	key := strings.TrimSpace(address)
	if a, err := host.ParseAddress(key); err == nil {
		key = a.String()
	}
	var have []string
	for _, g := range s.GPUs {
		if g.Address == key || strings.EqualFold(g.UUID, key) || fmt.Sprint(g.Index) == key {
			return g, nil
		}
		have = append(have, g.Address)
	}
	if len(have) == 0 {
		return GPU{}, fmt.Errorf("GPU %s: %w: NVML sees no NVIDIA GPU on this host", address, host.ErrNotFound)
	}
	return GPU{}, fmt.Errorf("GPU %s: %w: NVML sees %s", address, host.ErrNotFound, strings.Join(have, ", "))
}

func planGPU(g GPU, want []string, opt PlanOptions) ([]GPUChange, []Instance, error) {
	if !g.Capable {
		if len(want) == 0 {
			return nil, nil, nil
		}
		return nil, nil, fmt.Errorf("%s: %w: it does not support MIG", g.Where(), host.ErrUnsupported)
	}
	var steps []GPUChange
	destroy := func(in Instance) {
		pl := in.Placement
		steps = append(steps, GPUChange{Op: OpDestroy, GPU: g.Address, Profile: in.Profile, Instance: in.ID, Placement: &pl})
	}
	if len(want) == 0 {
		for _, in := range sortedInstances(g.Instances) {
			destroy(in)
		}
		if opt.DisableWhenEmpty && (g.Enabled || g.Pending) {
			steps = append(steps, GPUChange{Op: OpDisable, GPU: g.Address})
		}
		return steps, nil, nil
	}
	// Canonical names, and the proof it fits on the empty GPU at all.
	names := make([]string, len(want))
	for i, w := range want {
		p, err := g.LookupProfile(w)
		if err != nil {
			return nil, nil, err
		}
		names[i] = p.Name
	}
	empty := g
	empty.Instances = nil
	if _, err := Fit(empty, names); err != nil {
		return nil, nil, err
	}
	// MIG off, or on with "off" pending (nvidia-smi -mig 0 without a reset: the instances made
	// now would vanish at the next reset): enable, which cancels a pending disable and, where
	// the enable itself waits for a reset, fails saying so (mig.ErrModePending).
	if !g.Enabled || !g.Pending {
		steps = append(steps, GPUChange{Op: OpEnable, GPU: g.Address})
	}
	keep, rest, placed := bestKeep(g, names)
	kept := map[int]bool{}
	for _, in := range keep {
		kept[in.ID] = true
	}
	for _, in := range sortedInstances(g.Instances) {
		if !kept[in.ID] {
			destroy(in)
		}
	}
	for i, name := range rest {
		pl := placed[i]
		steps = append(steps, GPUChange{Op: OpCreate, GPU: g.Address, Profile: name, Placement: &pl})
	}
	sort.SliceStable(steps, func(i, j int) bool { return stepRank(steps[i].Op) < stepRank(steps[j].Op) })
	return steps, sortedInstances(keep), nil
}

func stepRank(op Op) int {
	switch op {
	case OpEnable:
		return 0
	case OpDestroy:
		return 1
	case OpCreate:
		return 2
	}
	return 3
}

// bestKeep chooses the largest set of existing instances of wanted profiles (no more of a
// profile than wanted; among sets of one size, those keeping lower placements first) around which the rest of names still fits, and returns it,
// the profiles left to create and their placements. The empty set always works (Fit on the
// empty GPU was checked first).
func bestKeep(g GPU, names []string) (keep []Instance, rest []string, placed []Placement) {
	left := map[string]int{}
	for _, n := range names {
		left[normName(n)]++
	}
	var cands []Instance
	for _, in := range sortedInstances(g.Instances) {
		if left[normName(in.Profile)] > 0 {
			cands = append(cands, in)
		}
	}
	// Subsets of the candidates, largest first (at most a handful of instances per GPU).
	n := len(cands)
	masks := make([]int, 0, 1<<n)
	for m := 0; m < 1<<n; m++ {
		masks = append(masks, m)
	}
	sort.SliceStable(masks, func(i, j int) bool { return popcount(masks[i]) > popcount(masks[j]) })
	for _, m := range masks {
		keep = keep[:0]
		need := map[string]int{}
		for _, nm := range names {
			need[normName(nm)]++
		}
		over := false
		for i, in := range cands {
			if m&(1<<i) != 0 {
				keep = append(keep, in)
				need[normName(in.Profile)]--
				over = over || need[normName(in.Profile)] < 0
			}
		}
		if over {
			continue // keeps more of a profile than wanted
		}
		rest = rest[:0]
		for _, nm := range names {
			if k := normName(nm); need[k] > 0 {
				need[k]--
				rest = append(rest, nm)
			}
		}
		if pl, err := FitWith(g, keep, rest); err == nil {
			return append([]Instance(nil), keep...), append([]string(nil), rest...), pl
		}
	}
	return nil, names, nil // not reached: the empty subset fits
}

func popcount(m int) int {
	n := 0
	for ; m != 0; m &= m - 1 {
		n++
	}
	return n
}

func sortedInstances(ins []Instance) []Instance {
	out := append([]Instance(nil), ins...)
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Placement.Start != out[j].Placement.Start {
			return out[i].Placement.Start < out[j].Placement.Start
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// Apply runs the changes in order through b. It stops at the first failure; the error says
// which step failed and what was done before it, and the instances this run created are
// destroyed again (destroyed instances are not re-created: their workloads were gone already).
// done lists the steps that took effect (after an undo, those that remain in effect).
func Apply(ctx context.Context, b Backend, c Changes) error {
	_, err := ApplySteps(ctx, b, c)
	return err
}

// ApplySteps is Apply returning the steps that took effect, with created instances' ids.
func ApplySteps(ctx context.Context, b Backend, c Changes) ([]GPUChange, error) {
	rv := revert.New()
	var done []GPUChange
	for i, st := range c.Steps {
		var err error
		switch st.Op {
		case OpEnable:
			err = b.SetMode(ctx, st.GPU, true)
		case OpDisable:
			err = b.SetMode(ctx, st.GPU, false)
		case OpDestroy:
			err = b.Destroy(ctx, st.GPU, st.Instance)
		case OpCreate:
			start := -1
			if st.Placement != nil {
				start = st.Placement.Start
			}
			var in Instance
			in, err = b.Create(ctx, st.GPU, st.Profile, start)
			if err == nil {
				gpu, id := st.GPU, in.ID
				rv.Add(func() error { return b.Destroy(context.WithoutCancel(ctx), gpu, id) })
				st.Instance = in.ID
				pl := in.Placement
				st.Placement = &pl
			}
		default:
			err = fmt.Errorf("unknown change %q: %w", st.Op, host.ErrInvalid)
		}
		if err != nil {
			undone := rv.Len()
			err = fmt.Errorf("MIG step %d of %d (%s): %w; %s", i+1, len(c.Steps), st, err, doneNote(done, undone))
			uerr := rv.Fail()
			if uerr == nil && undone > 0 {
				var kept []GPUChange
				for _, d := range done {
					if d.Op != OpCreate {
						kept = append(kept, d)
					}
				}
				done = kept
			}
			return done, revert.Wrap(err, uerr)
		}
		done = append(done, st)
	}
	rv.Success()
	return done, nil
}

func doneNote(done []GPUChange, created int) string {
	if len(done) == 0 {
		return "nothing was changed before it"
	}
	var s []string
	for _, d := range done {
		s = append(s, d.String())
	}
	note := "done before it: " + strings.Join(s, "; ")
	if created > 0 {
		note += fmt.Sprintf(" (the %d instance(s) created in this run are being destroyed again)", created)
	}
	return note
}
