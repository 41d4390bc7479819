package main

import (
	"context"
	"fmt"
	"io"

	"github.com/urfave/cli/v3"
)

func planCommand() *cli.Command {
	return &cli.Command{
		Name:      "plan",
		Usage:     "print, in order, what apply would do for each SPEC; changes nothing (docs/apply.md)",
		ArgsUsage: "SPEC...",
		Flags: []cli.Flag{
			connectFlag(),
			virtTypeFlag(),
			&cli.BoolFlag{Name: "no-start", Usage: "plan without the start step"},
		},
		Action: runPlan,
	}
}

func runPlan(ctx context.Context, cmd *cli.Command) error {
	vms, err := loadSpecs(cmd)
	if err != nil {
		return err
	}
	lc, conn, err := lifecycleOf(cmd)
	if err != nil {
		return err
	}
	defer conn.Close()
	plans, err := lc.Plan(ctx, vms)
	if err != nil {
		return err
	}
	return emit(cmd, plans, func(w io.Writer) error {
		for _, p := range plans {
			fmt.Fprintf(w, "%s (virt type %s):\n", p.VM, p.VirtType)
			for _, f := range p.Fallback {
				fmt.Fprintf(w, "  FALLBACK %s\n", f)
			}
			for i, s := range p.Steps {
				fmt.Fprintf(w, "  %2d. %s\n", i+1, s.Text())
			}
		}
		return nil
	})
}
