package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v3"
)

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:   "status",
		Usage:  "list the VMs vgpu-host applied, with their devices and libvirt state",
		Flags:  []cli.Flag{connectFlag()},
		Action: runStatus,
	}
}

func runStatus(ctx context.Context, cmd *cli.Command) error {
	lc, conn, err := lifecycleOf(cmd)
	if err != nil {
		return err
	}
	defer conn.Close()
	st, err := lc.Status(ctx)
	if err != nil {
		return err
	}
	return emit(cmd, st, func(w io.Writer) error {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "VM\tSTATE\tPHASE\tDEVICES")
		for _, s := range st {
			var devs []string
			for _, c := range s.Claims {
				devs = append(devs, c.Kind+":"+c.ID)
			}
			if len(s.Fallback) > 0 {
				devs = append(devs, "virtio-gpu (fallback)")
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.Name, s.State, s.Phase, strings.Join(devs, " "))
		}
		return tw.Flush()
	})
}
