package clitree

import (
	"context"
	"io"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/lifecycle"
)

func detachCommand() *cli.Command {
	return &cli.Command{
		Name:      "detach",
		Usage:     "unplug a device vgpu-host attach gave a VM, and release it (docs/hotplug.md)",
		ArgsUsage: "VM DEVICE",
		Description: "DEVICE is what attach printed: the GPU's PCI address, the vGPU instance's UUID or\n" +
			"\"virtio-gpu\". libvirt detaches it from the running guest, which must release it within\n" +
			"--timeout, and from the definition; then the host steps of its attach are undone (mdev removed,\n" +
			"drivers restored) and its claims released, as destroy would for it. A device the VM's spec gave\n" +
			"it is apply's: change the spec. Detaching it again says it is gone. Exit codes: 0 detached (or\n" +
			"gone already), 1 failed, 2 usage, 5 busy (the guest did not release it in time: nothing\n" +
			"was released), 6 not found, 7 the device came with the spec.",
		Flags: []cli.Flag{
			connectFlag(),
			&cli.DurationFlag{Name: "timeout", Value: 30 * time.Second, Usage: "wait at most `DURATION` for the guest to release the device"},
		},
		Action: runDetach,
	}
}

func runDetach(ctx context.Context, cmd *cli.Command) error {
	if cmd.Args().Len() != 2 {
		return usageErr("detach needs a VM name and a DEVICE (a PCI address, an mdev UUID or virtio-gpu)")
	}
	name, err := vmName(cmd.Args().Get(0))
	if err != nil {
		return err
	}
	if cmd.Duration("timeout") <= 0 {
		return usageErr("--timeout %s: want a positive duration", cmd.Duration("timeout"))
	}
	lc, conn, err := lifecycleOf(cmd)
	if err != nil {
		return err
	}
	defer conn.Close()
	res, err := lc.Detach(ctx, name, cmd.Args().Get(1), cmd.Duration("timeout"))
	if err != nil {
		return err
	}
	if res.Changed {
		if root, err := rootOf(cmd); err == nil {
			w, _ := hostIOFor(cmd, root)
			handBack(ctx, cmd, root, w, releasedBy(&lifecycle.DestroyResult{Released: res.Claims}), "detach "+name+" "+res.Device)
		}
	}
	return emit(cmd, res, func(w io.Writer) error { return hotplugTable(w, res, "detached") })
}
