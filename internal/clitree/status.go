package clitree

import (
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
		Action: opAction("status"),
	}
}

// statusRequest is status's request: the VMs named, or every one.
func statusRequest(f flagValues) (ops.StatusRequest, error) {
	return ops.StatusRequest{Names: f.Operands()}, nil
}

// renderStatus prints the VMs status lists, then the quarantined devices.
func renderStatus(o opOutput, res *ops.StatusResult) error {
	st := res.VMs
	return o.emit(st, func(w io.Writer) error {
		if len(st) == 0 {
			// A header over nothing told nobody why (JSON stays []).
			fmt.Fprintln(w, "no VMs: vgpu-host apply has created none on this host (vgpu-host apply SPEC creates one)")
		} else {
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
		}
		// Devices no VM gets until they check healthy again (docs/health.md).
		for _, l := range quarantineLines(o.root) {
			fmt.Fprintf(w, "quarantined: %s\n", l)
		}
		return nil
	})
}
