package clitree

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/host"
)

func checkCommand() *cli.Command {
	return &cli.Command{
		Name:  "check",
		Usage: "judge the host's readiness for GPU passthrough and vGPU (exit 3 when nothing can be assigned)",
		Description: "One line per check with ok/warn/fail and the fix, then one line per GPU. Exits 0 when a GPU\n" +
			"or vGPU can be assigned to a VM, 3 when none can (virtio-gpu alone does not count).",
		Action: opAction("check"),
	}
}

// renderCheck prints check's report.
func renderCheck(o opOutput, r *host.Readiness) error {
	return o.emit(r, func(w io.Writer) error { return checkTable(w, r) })
}

func checkTable(out io.Writer, r *host.Readiness) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	for _, c := range r.Checks {
		fmt.Fprintf(w, "%s\t%s\t%s\n", c.Verdict, c.Name, c.Detail)
		if c.Fix != "" && c.Verdict != host.VerdictOK {
			fmt.Fprintf(w, "\t\tfix: %s\n", c.Fix)
		}
	}
	for _, g := range r.GPUs {
		fmt.Fprintf(w, "%s\tgpu %s\t%s [%s]: %s\n", g.Verdict, g.Address, g.Name, strings.Join(g.Capabilities, ", "), g.Detail)
		if g.Fix != "" {
			fmt.Fprintf(w, "\t\tfix: %s\n", g.Fix)
		}
	}
	if len(r.VirtualMdev) > 0 {
		fmt.Fprintf(w, "ok\tvirtual mdev\t%s offer display mdev types\n", strings.Join(r.VirtualMdev, ", "))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if r.Assignable {
		fmt.Fprintln(out, "\nready: at least one GPU or vGPU can be assigned")
	} else {
		fmt.Fprintln(out, "\nnot ready: nothing can be assigned; VMs get virtio-gpu")
	}
	for _, wmsg := range r.Warnings {
		fmt.Fprintf(out, "warning: %s\n", wmsg)
	}
	return nil
}
