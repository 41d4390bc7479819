package clitree

import (
	"context"
	"fmt"
	"io"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/lifecycle"
)

func verifyCommand() *cli.Command {
	return &cli.Command{
		Name:      "verify",
		Usage:     "ask the running QEMU (QMP query-pci via libvirt) whether every assigned device is in the guest",
		ArgsUsage: "NAME",
		Description: "Exit codes: 0 every hostdev and virtio GPU is on the guest's PCI bus, 1 one is missing\n" +
			"(listed), 6 no such domain.",
		Flags:  []cli.Flag{connectFlag()},
		Action: runVerify,
	}
}

func runVerify(ctx context.Context, cmd *cli.Command) error {
	if cmd.Args().Len() != 1 {
		return usageErr("verify needs one VM name")
	}
	lc, conn, err := lifecycleOf(cmd)
	if err != nil {
		return err
	}
	defer conn.Close()
	res, verr := lc.Verify(ctx, cmd.Args().First())
	if res == nil {
		return verr
	}
	if err := emit(cmd, res, func(w io.Writer) error { return verifyTable(w, res) }); err != nil {
		return err
	}
	return verr
}

func verifyTable(w io.Writer, r *lifecycle.VerifyResult) error {
	for _, c := range r.Checks {
		mark := "ok     "
		if !c.Found {
			mark = "MISSING"
		}
		fmt.Fprintf(w, "%s %-8s %-12s %-36s %s\n", mark, c.Device, c.Kind, c.Source, c.Guest)
	}
	return nil
}
