package layout

import (
	"context"
	"fmt"

	"github.com/vgpu-host/vgpu-host/mig"
)

// NVMLPlanner is the MIGPlanner over package mig's planning: mig.Plan keeps the instances that
// already match and still let the rest fit, destroys only what must go and refuses what cannot
// fit before any change; mig.Apply makes the steps in order and undoes its own creates when one
// fails.
type NVMLPlanner struct{}

// migChanges wraps mig.Changes as a layout MIGChanges.
type migChanges struct{ c mig.Changes }

// Steps implements MIGChanges.
func (m migChanges) Steps() []string {
	out := make([]string, 0, len(m.c.Steps))
	for _, s := range m.c.Steps {
		out = append(out, s.String())
	}
	return out
}

// Plan implements MIGPlanner.
func (NVMLPlanner) Plan(st mig.State, want map[string][]string) (MIGChanges, error) {
	c, err := mig.Plan(st, want)
	if err != nil {
		return nil, err
	}
	return migChanges{c}, nil
}

// Apply implements MIGPlanner.
func (NVMLPlanner) Apply(ctx context.Context, b mig.Backend, c MIGChanges) error {
	mc, ok := c.(migChanges)
	if !ok {
		return fmt.Errorf("layout: MIG changes of another planner (%T)", c)
	}
	return mig.Apply(ctx, b, mc.c)
}
