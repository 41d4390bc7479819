package clitree

import (
	"fmt"
	"io"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/internal/termsafe"
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
		Action: opAction("render"),
	}
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

// renderSpecRequest is render's request with its spec loaded: read by the CLI, the content
// the caller sent in the agent.
func renderSpecRequest(f flagValues) (ops.RenderRequest, error) {
	req, err := renderRequest(f)
	if err != nil {
		return req, err
	}
	specs, err := specsOf(f, "render")
	if err != nil {
		return req, err
	}
	req.Spec = specs[0]
	return req, nil
}

// renderNoted prints render's result: with table output, what a user should know about the
// choices made (a fallback, placeholders, no NUMA placement) on stderr, so stdout stays pure
// XML (for virsh define); then renderRender's.
func renderNoted(o opOutput, res *ops.RenderResult) error {
	if o.format == "table" {
		for _, n := range res.Notes() {
			fmt.Fprintf(o.errw, "note: %s\n", termsafe.String(n))
		}
	}
	return renderRender(o.w, o.format, res)
}

// renderRender prints render's domain XML, or with JSON or YAML output the XML and its
// resolution.
func renderRender(w io.Writer, output string, res *ops.RenderResult) error {
	return emitTo(w, output, res, func(w io.Writer) error {
		_, err := fmt.Fprintln(w, res.XML)
		return err
	})
}
