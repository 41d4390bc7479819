package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/ledger"
	"github.com/vgpu-host/vgpu-host/lifecycle"
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
	lc, conn, err := lifecycleOf(cmd)
	if err != nil {
		return err
	}
	defer conn.Close()
	// A damaged ledger: show the entries that are intact, then fail with the reason (exit 1).
	all, damaged := lc.Status(ctx)
	if all == nil {
		return damaged
	}
	st, missing := all, []string(nil)
	if cmd.Args().Len() > 0 {
		st = []lifecycle.VMStatus{}
		for _, n := range cmd.Args().Slice() {
			if i := slices.IndexFunc(all, func(s lifecycle.VMStatus) bool { return s.Name == n }); i >= 0 {
				st = append(st, all[i])
			} else {
				missing = append(missing, strconv.Quote(n))
			}
		}
	}
	if err := emit(cmd, st, func(w io.Writer) error {
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
		if root, err := rootOf(cmd); err == nil {
			for _, l := range quarantineLines(root) {
				fmt.Fprintf(w, "quarantined: %s\n", l)
			}
		}
		return nil
	}); err != nil {
		return err
	}
	if len(missing) > 0 {
		root, _ := rootOf(cmd)
		return errors.Join(damaged, fmt.Errorf("status: no VM %s in the ledger %s (vgpu-host did not create it, or it was destroyed): %w",
			strings.Join(missing, ", "), ledger.Open(root).Path(), host.ErrNotFound))
	}
	return damaged
}
