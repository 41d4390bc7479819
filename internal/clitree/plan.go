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
		Action: runPlan,
	}
}

func runPlan(ctx context.Context, cmd *cli.Command) error {
	if cmd.IsSet("migrate") {
		if cmd.Args().Len() > 0 {
			return usageErr("plan --migrate VM takes no SPEC")
		}
		if cmd.String("to") == "" {
			return usageErr("plan --migrate VM needs --to URI")
		}
		return migrateVM(ctx, cmd, cmd.String("migrate"), true)
	}
	for _, f := range []string{"to", "target-cmd", "migrate-uri", "copy-storage", "shared-storage"} {
		if cmd.IsSet(f) {
			return usageErr("plan: --%s goes with --migrate VM", f)
		}
	}
	specs, err := loadSpecs(cmd)
	if err != nil {
		return err
	}
	env, err := specEnv(cmd)
	if err != nil {
		return err
	}
	res, err := ops.Plan(ctx, env, ops.PlanRequest{Specs: specs, VirtType: cmd.String("virt-type"), Force: cmd.StringSlice("force"), NoStart: cmd.Bool("no-start")})
	if res == nil {
		return err
	}
	refused, plans := err, res.Plans
	if err := emit(cmd, plans, func(w io.Writer) error {
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
	}); err != nil {
		return err
	}
	// Exit as apply would: the first plan a safety check refuses.
	return refused
}
