package clitree

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/agent/reconcile"
	"github.com/vgpu-host/vgpu-host/mdev"
	"github.com/vgpu-host/vgpu-host/ops"
)

func hostCommand() *cli.Command {
	return &cli.Command{
		Name:  "host",
		Usage: "host-level state: the declarative host layout, restore VFs and vGPU instances at boot, install the systemd unit (docs/layout.md, docs/vgpu.md)",
		Commands: []*cli.Command{
			layoutCommand(),
			snapshotCommand(),
			healthCommand(),
			releaseQuarantineCommand(),
			{
				Name:  "restore",
				Usage: "re-apply persisted state in order: SR-IOV VFs, vendor vGPU types, mdev instances (start=auto), vfio-pci bindings (bind --persist)",
				Description: "Run at boot by vgpu-host-restore.service (or by the agent, vgpu-host-agent.service: the same code),\n" +
					"before libvirt starts guests. Everything already in place is left alone; a failed step does not stop\n" +
					"the others, and the exit code is non-zero. docs/reconcile.md.",
				Flags:  []cli.Flag{dryRunFlag(), timeoutFlag()},
				Action: opAction("host restore"),
			},
			{
				Name:  "install-unit",
				Usage: "install and enable " + mdev.UnitName + " under /etc/systemd/system",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "exec", Usage: "absolute `PATH` of the vgpu-host binary the unit runs (default: this binary)"},
					dryRunFlag(),
				},
				Action: opAction("host install-unit"),
			},
		},
	}
}

// installUnitRequest is host install-unit's request: --exec (default: this binary, its
// links resolved) and --dry-run. The path is checked as text (ops.InstallUnitRequest.Check),
// never opened. A relative one is refused, in the CLI and in the agent alike: the caller's CLI
// sends it as typed (no absFlags), and it is never resolved against a working directory.
func installUnitRequest(f flagValues) (ops.InstallUnitRequest, error) {
	exe := f.String("exec")
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return ops.InstallUnitRequest{}, fmt.Errorf("find this binary's path: %w (pass --exec)", err)
		}
		if r, err := filepath.EvalSymlinks(exe); err == nil {
			exe = r
		}
	}
	req := ops.InstallUnitRequest{Exec: exe, DryRun: f.Bool("dry-run")}
	return req, req.Check()
}

// renderInstallUnit prints what host install-unit wrote, or would write with --dry-run.
func renderInstallUnit(w io.Writer, output string, res *ops.InstallUnitResult) error {
	return emitTo(w, output, res, func(w io.Writer) error {
		if len(res.Written) == 0 {
			fmt.Fprintf(w, "%s is installed and enabled already\n", res.Unit)
			return nil
		}
		verb := "wrote"
		if res.DryRun {
			verb = "would write"
		}
		for _, p := range res.Written {
			fmt.Fprintf(w, "%s %s\n", verb, p)
		}
		fmt.Fprintln(w, "run: systemctl daemon-reload")
		return nil
	})
}

// restoreRequest is host restore's request: --dry-run, --timeout.
func restoreRequest(f flagValues) (ops.RestoreRequest, error) {
	return ops.RestoreRequest{DryRun: f.Bool("dry-run"), Timeout: f.Duration("timeout")}, nil
}

// renderRestore prints each step of host restore and its summary, or the dry run's writes.
func renderRestore(o opOutput, res *ops.RestoreResult) error {
	if res.DryRun != nil {
		return renderReport(o.w, o.format, o.name, res.DryRun)
	}
	return o.emit(res.Steps, func(w io.Writer) error { return restoreTable(w, res.Result) })
}

func restoreTable(out io.Writer, res reconcile.Result) error {
	if len(res.Steps) == 0 {
		fmt.Fprintln(out, "nothing persisted: no VF counts, vendor vGPU types, mdev definitions or persisted bindings")
		return nil
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "KIND\tTARGET\tWANT\tRESULT\tTIME")
	for _, s := range res.Steps {
		r := s.Result
		if s.Error != "" {
			r += ": " + s.Error
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", s.Kind, s.Target, s.Want, r, s.Duration.Round(time.Microsecond))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(out, res.Summary())
	return err
}
