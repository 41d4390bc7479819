package clitree

import (
	"fmt"
	"io"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/lifecycle"
	"github.com/vgpu-host/vgpu-host/ops"
)

func verifyCommand() *cli.Command {
	return &cli.Command{
		Name:      "verify",
		Usage:     "ask the running QEMU (QMP query-pci via libvirt) whether every assigned device is in the guest",
		ArgsUsage: "NAME",
		Description: "Exit codes: 0 every hostdev and virtio GPU is on the guest's PCI bus, 1 one is missing\n" +
			"(listed), 6 no such domain.",
		Flags:  []cli.Flag{connectFlag()},
		Action: opAction("verify"),
	}
}

// verifyRequest is verify's request: its one operand, the VM.
func verifyRequest(f flagValues) (ops.VerifyRequest, error) {
	if len(f.Operands()) != 1 {
		return ops.VerifyRequest{}, usageErr("verify needs one VM name")
	}
	return ops.VerifyRequest{Name: f.Operands()[0]}, nil
}

// renderVerify prints verify's result in output format output.
func renderVerify(w io.Writer, output string, res *ops.VerifyResult) error {
	return emitTo(w, output, res, func(w io.Writer) error { return verifyTable(w, res) })
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
