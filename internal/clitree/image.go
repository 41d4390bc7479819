package clitree

import (
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/lifecycle"
	"github.com/vgpu-host/vgpu-host/ops"
)

func imageCommand() *cli.Command {
	return &cli.Command{
		Name:  "image",
		Usage: "cloud-image pipeline: export a builder VM's disk as a standalone image",
		Commands: []*cli.Command{{
			Name:      "export",
			Usage:     "flatten a shut-off VM's overlay (and its base image) into a standalone image, sealed if asked",
			ArgsUsage: "NAME --to FILE",
			Description: "Writes FILE.partial beside FILE and renames it to FILE only when every step succeeded.\n" +
				"-o json prints the result (vm, source, destination, format, sizes, sealed, duration);\n" +
				"the image always goes to --to. docs/image.md lists the sealing operations.",
			Flags: []cli.Flag{
				connectFlag(),
				// Not --output: that is the global output format (-o json).
				&cli.StringFlag{Name: "to", Usage: "write the image to `FILE`"},
				&cli.StringFlag{Name: "format", Value: lifecycle.FormatQcow2, Usage: "image `FORMAT`: qcow2 (compressed), raw (fully allocated) or sparse (raw, holes kept)"},
				&cli.BoolFlag{Name: "no-compress", Usage: "write qcow2 clusters uncompressed (larger, faster)"},
				&cli.BoolFlag{Name: "seal", Usage: "run virt-sysprep on the exported copy so it boots as a fresh instance (machine-id, SSH host keys, cloud-init state, logs removed)"},
				&cli.BoolFlag{Name: "force", Usage: "overwrite FILE if it exists"},
				&cli.BoolFlag{Name: "dry-run", Usage: "print the exact qemu-img and virt-sysprep command lines and change nothing"},
			},
			Action: opAction("image export"),
		}},
	}
}

// exportUsage is what image export checks first: one operand, and --output a format (a path
// there is a mistake of its own: the image goes to --to).
func exportUsage(f flagValues) error {
	if len(f.Operands()) != 1 {
		return usageErr("image export needs one VM name (and --to FILE)")
	}
	if _, err := outputFormat(f.String("output")); err != nil && strings.ContainsAny(f.String("output"), "./") {
		return usageErr("-o/--output is the output format (table, json or yaml); image export writes the image to --to FILE")
	}
	return nil
}

// exportRequest is image export's request: its one operand, the VM, --to, --format,
// --no-compress, --seal, --force and --dry-run.
func exportRequest(f flagValues) (ops.ExportRequest, error) {
	if len(f.Operands()) != 1 {
		return ops.ExportRequest{}, usageErr("image export needs one VM name (and --to FILE)")
	}
	req := ops.ExportRequest{VM: f.Operands()[0], To: f.String("to"), Format: f.String("format"), NoCompress: f.Bool("no-compress"),
		Seal: f.Bool("seal"), Force: f.Bool("force"), DryRun: f.Bool("dry-run")}
	return req, req.Check()
}

// renderExport prints image export's result in output format output.
func renderExport(w io.Writer, output string, res *ops.ExportResult) error {
	return emitTo(w, output, res, func(w io.Writer) error { return exportTable(w, res) })
}

// exportTable prints the commands of a dry run, or one line saying what was written.
func exportTable(w io.Writer, r *lifecycle.ExportResult) error {
	if r.DryRun {
		for _, c := range r.Commands {
			if _, err := fmt.Fprintln(w, c); err != nil {
				return err
			}
		}
		return nil
	}
	how := []string{r.Format}
	if r.Compressed {
		how = append(how, "compressed")
	}
	if r.Sealed {
		how = append(how, "sealed")
	}
	_, err := fmt.Fprintf(w, "%s: exported %s to %s (%s): %s virtual, %s on disk, %.1fs\n", r.VM, r.Source, r.Destination,
		strings.Join(how, ", "), mib(r.VirtualSize), mib(r.Allocated), r.Duration)
	return err
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
