package main

import (
	"context"
	"errors"
	"io"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/host"
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
		Action: runUnbind,
	}
}

func runUnbind(ctx context.Context, cmd *cli.Command) error {
	b, addrs, err := binderOf(cmd, cmd.Duration("timeout"))
	if err != nil {
		return err
	}
	res, err := b.Unbind(ctx, addrs, vfio.UnbindOptions{
		Force: cmd.Bool("force"), Persist: cmd.Bool("persist"), DryRun: cmd.Bool("dry-run"),
	})
	if err != nil {
		if errors.Is(err, host.ErrNotFound) && !cmd.Bool("dry-run") {
			// A function vgpu-host bound has left the bus (removed, or fell off and the
			// kernel removed it): it is quarantined, so that when a rescan brings it back
			// nothing hands it to a VM before a clean check.
			handBack(ctx, cmd, b.Root, b.W, goneFromLedger(b, addrs), "unbind")
		}
		return err
	}
	if !res.DryRun {
		handBack(ctx, cmd, b.Root, b.W, unbound(res), "unbind")
	}
	return emit(cmd, res, func(w io.Writer) error { return resultTable(w, res) })
}

// unbound are the functions an unbind moved off vfio-pci, each with the driver it should be on
// now ("-": none, as it had none before bind).
func unbound(res *vfio.Result) []host.Released {
	var rel []host.Released
	for _, d := range res.Devices {
		if !d.Changed || d.From != vfio.DriverName {
			continue
		}
		drv := d.To
		if drv == "" {
			drv = "-"
		}
		rel = append(rel, host.Released{Address: d.Address, Driver: drv})
	}
	return rel
}

// goneFromLedger are the addresses among addrs that the vfio ledger records as bound by
// vgpu-host and that are no longer on the PCI bus.
func goneFromLedger(b *vfio.Binder, addrs []host.Address) []host.Released {
	l, err := b.Ledger()
	if err != nil {
		return nil
	}
	var rel []host.Released
	for _, a := range addrs {
		if _, ours := l.Lookup(a); ours && !host.OnBus(b.Root, a) {
			rel = append(rel, host.Released{Address: a})
		}
	}
	return rel
}
