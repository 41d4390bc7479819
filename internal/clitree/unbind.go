package clitree

import (
	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/ops"
	"github.com/vgpu-host/vgpu-host/vfio"
)

func unbindCommand() *cli.Command {
	return &cli.Command{
		Name:      "unbind",
		Usage:     "restore the original drivers of IOMMU groups that 'bind' moved to vfio-pci (docs/vfio.md)",
		ArgsUsage: "ADDR...",
		Description: "Restores exactly what 'bind' recorded: clears driver_override, unbinds from vfio-pci and\n" +
			"re-probes so the original driver comes back; functions that had no driver stay driverless.\n" +
			"A device on vfio-pci that vgpu-host did not bind is refused (exit 4) unless --force, which\n" +
			"hands it to its native driver. A group in use (/dev/vfio/N open) is refused (exit 5) unless\n" +
			"--force. With --persist the reboot persistence of 'bind --persist' is removed too.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "dry-run", Usage: "print the exact sysfs writes in order and change nothing"},
			&cli.BoolFlag{Name: "force", Usage: "also restore devices vgpu-host did not bind, and groups held open"},
			&cli.BoolFlag{Name: "persist", Usage: "also remove the reboot persistence written by bind --persist"},
			&cli.DurationFlag{Name: "timeout", Value: vfio.DefaultTimeout, Usage: "bound each sysfs write and driver wait by `DURATION`"},
			resetFlag(),
		},
		Action: opAction("unbind"),
	}
}

// unbindRequest is unbind's request: the addresses, --force, --persist, --dry-run, --reset,
// --timeout.
func unbindRequest(f flagValues) (ops.UnbindRequest, error) {
	return ops.UnbindRequest{Addresses: f.Operands(), Force: f.Bool("force"), Persist: f.Bool("persist"),
		DryRun: f.Bool("dry-run"), Reset: f.Bool("reset"), Timeout: f.Duration("timeout")}, nil
}
