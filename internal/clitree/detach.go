package clitree

import (
	"io"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/ops"
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
			&cli.DurationFlag{Name: "timeout", Value: ops.DefaultDetachTimeout, Usage: "wait at most `DURATION` for the guest to release the device"},
		},
		Action: opAction("detach"),
	}
}

// detachRequest is detach's request: its operands, the VM (or a spec file naming it) and the
// DEVICE, and --timeout.
func detachRequest(f flagValues) (ops.DetachRequest, error) {
	if len(f.Operands()) != 2 {
		return ops.DetachRequest{}, usageErr("detach needs a VM name and a DEVICE (a PCI address, an mdev UUID or virtio-gpu)")
	}
	name, err := vmName(f.Operands()[0])
	if err != nil {
		return ops.DetachRequest{}, err
	}
	req := ops.DetachRequest{VM: name, Device: f.Operands()[1], Timeout: f.Duration("timeout")}
	return req, req.Check()
}

// renderDetach prints detach's result in output format output.
func renderDetach(w io.Writer, output string, res *ops.HotplugResult) error {
	return emitTo(w, output, res, func(w io.Writer) error { return hotplugTable(w, res, "detached") })
}
