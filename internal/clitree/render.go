package clitree

import (
	"context"
	"fmt"
	"io"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/ops"
)

func renderCommand() *cli.Command {
	return &cli.Command{
		Name:      "render",
		Usage:     "print the libvirt domain XML for a VM spec (read-only)",
		ArgsUsage: "SPEC.yaml",
		Description: "Parses and validates SPEC.yaml, resolves its gpus[] against the host inventory\n" +
			"(under --host-root) and prints the domain XML. --offline renders without a host:\n" +
			"addresses and UUIDs are used as given, vGPUs get placeholder UUIDs derived from the\n" +
			"VM name, selectors with fallback virtio-gpu fall back. See docs/spec.md.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "offline", Usage: "render without reading the host"},
			&cli.StringFlag{Name: "virt-type", Usage: "domain type `kvm|qemu` (overrides spec.virtType)"},
		},
		Action: runRender,
	}
}

func runRender(ctx context.Context, cmd *cli.Command) error {
	req, err := renderRequest(flagsOf(cmd))
	if err != nil {
		return err
	}
	o, err := outputOf(cmd)
	if err != nil {
		return err
	}
	// The spec first, then the root (unread with --offline): the errors' order as always.
	vms, err := ops.LoadSpecs("render", []ops.Spec{req.Spec})
	if err != nil {
		return err
	}
	req.Spec.VM = vms[0]
	var root host.Root
	if !req.Offline {
		if root, err = rootOf(cmd); err != nil {
			return err
		}
	}
	res, err := ops.Render(ctx, ops.Env{Root: root}, req)
	if err != nil {
		return err
	}
	if o == "table" {
		// stdout stays pure XML (for virsh define); what a user should know about the choices
		// made (a fallback, placeholders, no NUMA placement) goes to stderr.
		for _, n := range res.Notes() {
			fmt.Fprintf(cmd.Root().ErrWriter, "note: %s\n", n)
		}
	}
	return renderRender(cmd.Root().Writer, o, res)
}

// renderRequest is render's request: its one operand, the spec (loaded by the operation),
// --offline and --virt-type.
func renderRequest(f flagValues) (ops.RenderRequest, error) {
	if n := len(f.Operands()); n != 1 {
		return ops.RenderRequest{}, usageErr("render takes one SPEC.yaml, got %d arguments", n)
	}
	req := ops.RenderRequest{Spec: ops.Spec{Path: f.Operands()[0]}, Offline: f.Bool("offline"), VirtType: f.String("virt-type")}
	return req, ops.CheckVirtType(req.VirtType)
}

// renderRender prints render's domain XML, or with JSON or YAML output the XML and its
// resolution.
func renderRender(w io.Writer, output string, res *ops.RenderResult) error {
	return emitTo(w, output, res, func(w io.Writer) error {
		_, err := fmt.Fprintln(w, res.XML)
		return err
	})
}
