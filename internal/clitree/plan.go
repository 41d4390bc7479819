package clitree

import (
	"context"
	"fmt"
	"io"
	"slices"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/ops"
)

func planCommand() *cli.Command {
	return &cli.Command{
		Name:  "plan",
		Usage: "print, in order, what apply would do for each SPEC, and every safety check that would refuse it; changes nothing (docs/apply.md)",
		Description: "Exits as apply would: 4 when a safety check refuses (boot VGA, host-critical group\n" +
			"member, missing interrupt remapping), 5 when only processes holding a device do; the plan\n" +
			"(with its refusals) is printed either way. --force=CHECK predicts apply --force=CHECK.\n" +
			"--migrate VM --to URI prints what `vgpu-host migrate VM --to URI` would do on both hosts\n" +
			"(the same as migrate --dry-run; docs/migrate.md).",
		ArgsUsage: "SPEC... | --migrate VM --to URI",
		Flags: append([]cli.Flag{
			connectFlag(),
			virtTypeFlag(),
			forceFlag(),
			&cli.BoolFlag{Name: "no-start", Usage: "plan without the start step"},
			&cli.StringFlag{Name: "migrate", Usage: "plan the live migration of the applied `VM` to --to instead of SPECs"},
		}, migrateFlags(false)...),
		Action: opAction("plan"),
	}
}

// planMigrateUsage is what plan --migrate VM --to URI checks first: no SPEC, and --to.
func planMigrateUsage(f flagValues) error {
	if len(f.Operands()) > 0 {
		return usageErr("plan --migrate VM takes no SPEC")
	}
	if f.String("to") == "" {
		return usageErr("plan --migrate VM needs --to URI")
	}
	return nil
}

// planMigrateRequest is plan --migrate's request: the migration's plan on both hosts (a
// migrate --dry-run), named plan with --migrate set, so the agent decides its class as
// plan --migrate's (classOf: a change's right, as it reaches another host).
type planMigrateRequest struct{ ops.MigrateRequest }

// Op is the command the request is: plan.
func (planMigrateRequest) Op() string { return "plan" }

// IsSet reports whether the request sets the named flag: --migrate always.
func (r planMigrateRequest) IsSet(name string) bool {
	return name == "migrate" || r.MigrateRequest.IsSet(name)
}

// planMigrateRequestOf is plan --migrate VM's request: migrate's, for VM, as a dry run.
func planMigrateRequestOf(f flagValues) (planMigrateRequest, error) {
	r, err := migrateRequestFor(f, f.String("migrate"), true)
	return planMigrateRequest{r}, err
}

// planMigrateOp runs plan --migrate: the migration's dry run.
func planMigrateOp(ctx context.Context, env ops.Env, req planMigrateRequest) (*ops.MigrateResult, error) {
	return ops.Migrate(ctx, env, req.MigrateRequest)
}

// planRequest is plan's request: the specs loaded, --virt-type, --force, --no-start; the
// migration's flags go with --migrate only.
func planRequest(f flagValues) (ops.PlanRequest, error) {
	for _, n := range []string{"to", "target-cmd", "migrate-uri", "copy-storage", "shared-storage"} {
		if f.IsSet(n) {
			return ops.PlanRequest{}, usageErr("plan: --%s goes with --migrate VM", n)
		}
	}
	specs, err := specsOf(f, "plan")
	if err != nil {
		return ops.PlanRequest{}, err
	}
	return ops.PlanRequest{Specs: specs, VirtType: f.String("virt-type"), Force: f.StringSlice("force"), NoStart: f.Bool("no-start")}, nil
}

// renderPlan prints each plan: its fallbacks, refusals and steps. The operation's error (the
// first refusal) is the command's exit, as apply's would be.
func renderPlan(o opOutput, res *ops.PlanResult) error {
	plans := res.Plans
	return o.emit(plans, func(w io.Writer) error {
		for _, p := range plans {
			fmt.Fprintf(w, "%s (virt type %s):\n", p.VM, p.VirtType)
			for _, f := range p.Fallback {
				fmt.Fprintf(w, "  FALLBACK %s\n", f)
			}
			if m := p.MMIO64; m != nil && m.Fits {
				fmt.Fprintf(w, "  MMIO64 fits (%s): %s\n", m.BitsFrom, m.Reason)
			}
			for _, r := range p.Refusals {
				verdict := "REFUSED"
				if slices.Contains(p.Forced, r.Check) {
					verdict = "FORCED"
				}
				fmt.Fprintf(w, "  %s [%s] %s\n", verdict, r.Check, r)
			}
			for i, s := range p.Steps {
				fmt.Fprintf(w, "  %2d. %s\n", i+1, s.Text())
			}
		}
		return nil
	})
}
