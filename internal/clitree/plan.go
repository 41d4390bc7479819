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
		Action: opAction("plan", runPlanMigrate),
	}
}

// runPlanMigrate is plan --migrate VM --to URI: the migration's plan, which has no operation
// yet (it runs as a command line in the agent too).
func runPlanMigrate(ctx context.Context, cmd *cli.Command) error {
	if cmd.Args().Len() > 0 {
		return usageErr("plan --migrate VM takes no SPEC")
	}
	if cmd.String("to") == "" {
		return usageErr("plan --migrate VM needs --to URI")
	}
	return migrateVM(ctx, cmd, cmd.String("migrate"), true)
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
