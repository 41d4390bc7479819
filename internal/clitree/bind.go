package clitree

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/ops"
	"github.com/vgpu-host/vgpu-host/vfio"
)

// kernelHostIO returns the Writer and ModuleLoader for root: the real sysfs and modprobe
// (Env.HostIO; tests give hosttest's kernel emulator).
func kernelHostIO(root host.Root) (host.Writer, host.ModuleLoader) {
	return host.SysfsWriter{Root: root}, host.Modprobe{Root: root}
}

func bindCommand() *cli.Command {
	return &cli.Command{
		Name:      "bind",
		Usage:     "bind PCI devices and every other endpoint of their IOMMU groups to vfio-pci (docs/vfio.md)",
		ArgsUsage: "ADDR...",
		Description: "Moves each device and the rest of its IOMMU group to vfio-pci by address (driver_override,\n" +
			"unbind, drivers_probe; never new_id), recording the original drivers so 'unbind' can restore\n" +
			"them. Bridges stay. Refuses the boot VGA, groups with host-critical devices (storage, NICs,\n" +
			"USB controllers, mounted disks, routed interfaces), devices held open and hosts without\n" +
			"interrupt remapping unless --force. Exit codes: 0 bound (or already bound), 1 failed,\n" +
			"2 usage, 4 refused by a safety check, 5 busy (held open, timed out), 6 no such device,\n" +
			"7 unsupported (no IOMMU).",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "dry-run", Usage: "print the exact sysfs writes in order and change nothing"},
			&cli.BoolFlag{Name: "force", Usage: "override the safety checks (boot VGA, host-critical, held open, no interrupt remapping)"},
			&cli.BoolFlag{Name: "persist", Usage: "also keep the binding across reboots (driverctl override + modprobe softdep)"},
			&cli.DurationFlag{Name: "timeout", Value: vfio.DefaultTimeout, Usage: "bound each sysfs write and driver wait by `DURATION`"},
		},
		Action: opAction("bind"),
	}
}

// bindRequest is bind's request: the addresses, --force, --persist, --dry-run, --timeout.
func bindRequest(f flagValues) (ops.BindRequest, error) {
	return ops.BindRequest{Addresses: f.Operands(), Force: f.Bool("force"), Persist: f.Bool("persist"),
		DryRun: f.Bool("dry-run"), Timeout: f.Duration("timeout")}, nil
}

// renderBindResult prints a bind or unbind result.
func renderBindResult(o opOutput, res *vfio.Result) error {
	return o.emit(res, func(w io.Writer) error { return resultTable(w, res) })
}

// resultTable prints a bind/unbind result: the dry-run steps, or one line per function.
func resultTable(out io.Writer, res *vfio.Result) error {
	if res.DryRun {
		fmt.Fprintf(out, "# dry run: %s would make these changes, in order (nothing was changed)\n", res.Action)
		for _, s := range res.Steps {
			fmt.Fprintln(out, s.String())
		}
		if len(res.Steps) == 0 {
			fmt.Fprintln(out, "# nothing to do")
		}
	} else {
		w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "ADDRESS\tGROUP\tFROM\tTO\tRESULT")
		for _, c := range res.Devices {
			result := c.Note
			if c.Changed && result == "" {
				result = map[string]string{"bind": "bound", "unbind": "restored"}[res.Action]
			}
			fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\n", c.Address, c.Group, driverCell(c.From), driverCell(c.To), result)
		}
		if err := w.Flush(); err != nil {
			return err
		}
		for _, g := range res.Groups {
			state := "not viable (an endpoint is on a host driver)"
			if res.Action == "unbind" {
				state = "back on host drivers"
			}
			if g.Viable {
				state = "viable"
			}
			dev := "no vfio device node"
			if g.VFIODev != "" {
				dev = g.VFIODev
			}
			fmt.Fprintf(out, "group %d: %s, %s\n", g.ID, state, dev)
		}
		for _, s := range res.Steps {
			if s.Op == vfio.OpFile || s.Op == vfio.OpRemove {
				fmt.Fprintf(out, "persist: %s\n", strings.SplitN(s.String(), "\n", 2)[0])
			}
		}
	}
	for _, wmsg := range res.Warnings {
		fmt.Fprintf(out, "warning: %s\n", wmsg)
	}
	return nil
}

func driverCell(d string) string {
	if d == "" {
		return "-"
	}
	return d
}
