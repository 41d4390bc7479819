package clitree

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/ops"
)

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:      "status",
		Usage:     "list the VMs vgpu-host applied, with their devices and libvirt state",
		ArgsUsage: "[NAME...]",
		Description: "Lists every VM in the ledger, or only those named. The ledger is one JSON file per VM,\n" +
			"/var/lib/vgpu-host/ledger/vms/NAME.json under --host-root, and the claims index\n" +
			"ledger/claims.json (who holds each device); both read with jq (docs/apply.md).\n" +
			"Exit codes: 0 listed, 6 a named VM is not in the ledger (the others named are still listed).",
		Flags:  []cli.Flag{connectFlag()},
		Action: runStatus,
	}
}

func runStatus(ctx context.Context, cmd *cli.Command) error {
	root, err := rootOf(cmd)
	if err != nil {
		return err
	}
	if _, err := outputOf(cmd); err != nil {
		return err
	}
	uri, err := connURI(cmd, root)
	if err != nil {
		return err
	}
	// A damaged ledger: show the entries that are intact, then fail with the reason (exit 1).
	res, err := ops.Status(ctx, opsEnv(cmd, root, uri), ops.StatusRequest{Names: cmd.Args().Slice()})
	if res == nil {
		return err
	}
	st := res.VMs
	if eerr := emit(cmd, st, func(w io.Writer) error {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "VM\tSTATE\tPHASE\tDEVICES")
		for _, s := range st {
			var devs []string
			for _, c := range s.Claims {
				devs = append(devs, c.Key())
			}
			if len(s.Fallback) > 0 {
				devs = append(devs, "virtio-gpu (fallback)")
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.Name, s.State, s.Phase, strings.Join(devs, " "))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		// Devices no VM gets until they check healthy again (docs/health.md).
		for _, l := range quarantineLines(root) {
			fmt.Fprintf(w, "quarantined: %s\n", l)
		}
		return nil
	}); eerr != nil {
		return eerr
	}
	return err
}
