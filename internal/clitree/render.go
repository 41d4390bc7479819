package clitree

import (
	"context"
	"fmt"
	"io"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/domains"
	"github.com/vgpu-host/vgpu-host/host"
)

// renderResult is `render --output json|yaml`: the domain XML and how the spec was resolved.
type renderResult struct {
	Name       string              `json:"name"`
	XML        string              `json:"xml"`
	Resolution *domains.Allocation `json:"resolution"`
}

func renderCommand() *cli.Command {
	var offline bool
	var virtType string
	return &cli.Command{
		Name:      "render",
		Usage:     "print the libvirt domain XML for a VM spec (read-only)",
		ArgsUsage: "SPEC.yaml",
		Description: "Parses and validates SPEC.yaml, resolves its gpus[] against the host inventory\n" +
			"(under --host-root) and prints the domain XML. --offline renders without a host:\n" +
			"addresses and UUIDs are used as given, vGPUs get placeholder UUIDs derived from the\n" +
			"VM name, selectors with fallback virtio-gpu fall back. See docs/spec.md.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "offline", Usage: "render without reading the host", Destination: &offline},
			&cli.StringFlag{Name: "virt-type", Usage: "domain type `kvm|qemu` (overrides spec.virtType)", Destination: &virtType},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.NArg() != 1 {
				return usageErr("render takes one SPEC.yaml, got %d arguments", cmd.NArg())
			}
			if virtType != "" && virtType != "kvm" && virtType != "qemu" {
				return usageErr("--virt-type %q: use kvm or qemu", virtType)
			}
			if _, err := outputOf(cmd); err != nil {
				return err
			}
			vm, err := domains.Load(cmd.Args().First())
			if err != nil {
				return err
			}
			opts := domains.ResolveOptions{Offline: offline, VirtType: virtType}
			var inv *host.Inventory
			if !offline {
				root, err := rootOf(cmd)
				if err != nil {
					return err
				}
				if inv, err = host.Scan(root); err != nil {
					return fmt.Errorf("render %s: scan host (use --offline to render without one): %w", vm.Metadata.Name, err)
				}
			}
			alloc, err := domains.Resolve(vm, inv, opts)
			if err != nil {
				return err
			}
			xml, err := domains.Render(vm, alloc, domains.BuildOptions{})
			if err != nil {
				return err
			}
			res := renderResult{Name: vm.Metadata.Name, XML: xml, Resolution: alloc}
			return emit(cmd, res, func(w io.Writer) error {
				if _, err := fmt.Fprintln(w, xml); err != nil {
					return err
				}
				// stdout stays pure XML (for virsh define); what a user should know about the
				// choices made (a fallback, placeholders, no NUMA placement) goes to stderr.
				for _, n := range renderNotes(alloc) {
					fmt.Fprintf(cmd.Root().ErrWriter, "note: %s\n", n)
				}
				return nil
			})
		},
	}
}

// renderNotes are the lines render prints on stderr in table mode: every fallback with its
// reason, then the allocation's notes.
func renderNotes(alloc *domains.Allocation) []string {
	var out []string
	for _, g := range alloc.GPUs {
		if g.FellBack {
			out = append(out, fmt.Sprintf("spec.gpus[%d]: fell back to virtio-gpu: %s", g.Index, g.Reason))
		}
	}
	return append(out, alloc.Notes...)
}
