package clitree

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/layout"
	"github.com/vgpu-host/vgpu-host/mig"
	migremote "github.com/vgpu-host/vgpu-host/mig/remote"
	"github.com/vgpu-host/vgpu-host/ops"
)

// nvmlMIG returns the MIG backend and planner for root and how to let the NVML helper go: the
// helper when NVML describes root (this machine, or a mock helper under tests) and answers;
// else nil (a layout with a mig entry is then refused, exit 7, and show lists no MIG).
// Env.MIGFor replaces it; nv starts the helper.
func nvmlMIG(nv migremote.Env, root host.Root) (mig.Backend, layout.MIGPlanner, func()) {
	if !nvmlDescribes(nv, root) {
		return nil, nil, func() {}
	}
	oc, err := nv.Open()
	if err != nil {
		return nil, nil, func() {}
	}
	c := cachingMIG(nv, root, oc)
	return c, layout.NVMLPlanner{}, func() { c.Flush(context.Background()); oc.Close() }
}

// nvmlNotHere says why NVML is not asked about root, a --host-root it does not describe, and how
// to have it answer for that host: replay a capture of its NVML.
func nvmlNotHere(root host.Root) string {
	return "NVML describes this machine, not --host-root " + root.Dir() +
		" (set VGPU_HOST_NVML_FACTS to a capture of that host's NVML: its snapshot's nvml-facts.json, or vgpu-host-nvml --facts run there)"
}

// migOpener is the boot reconcile's way to NVML for root (reconcile.Reconciler.OpenMIG): the
// helper as nv starts it, when NVML describes root.
func migOpener(nv migremote.Env, root host.Root) func() (mig.Backend, func(), error) {
	return func() (mig.Backend, func(), error) {
		if !nvmlDescribes(nv, root) {
			return nil, nil, fmt.Errorf("%s: %w", nvmlNotHere(root), host.ErrUnsupported)
		}
		oc, err := nv.Open()
		if err != nil {
			return nil, nil, err
		}
		c := cachingMIG(nv, root, oc)
		return c, func() { c.Flush(context.Background()); oc.Close() }, nil
	}
}

func layoutCommand() *cli.Command {
	configFlag := &cli.StringFlag{Name: "config", Usage: "the configuration `NAME` to use (needed when the file has several and none is default: true)"}
	connect := &cli.StringFlag{Name: "connect", Aliases: []string{"c"}, Usage: "libvirt `URI` asked which domains use an instance (default on this machine: qemu:///system; under a fake --host-root: none)",
		Sources: cli.EnvVars("VGPU_HOST_CONNECT")}
	layoutForce := &cli.StringSliceFlag{Name: "force", Usage: "go past the named safety `CHECK`s only: " + strings.Join(layout.ForceableChecks(), ", ") + " (repeat, or comma-separate)"}
	return &cli.Command{
		Name:  "layout",
		Usage: "make the host match a declarative layout of its GPUs: plan, apply, show (docs/layout.md)",
		Description: "A host layout (apiVersion: vgpu-host/v1, kind: HostLayout) names configurations; each gives\n" +
			"every selected GPU a mode: passthrough, sriov, mdev, vendor-vfio, mig or host. plan lists the\n" +
			"exact changes in order and writes nothing; apply makes only those, undoing them all if one\n" +
			"fails, and persists them for 'host restore'; show prints the layout the host is in now.\n" +
			"Exit codes: 0 ok (or nothing to do), 1 failed, 2 bad layout or more VFs than the device has,\n" +
			"4 refused (a device a VM uses: --force CHECK; a quarantined device, docs/health.md), 5 more\n" +
			"instances than available or busy,\n" +
			"6 no such device, configuration or type, 7 unsupported (no SR-IOV, no mdev, no NVML for mig).",
		Commands: []*cli.Command{
			{
				Name:      "plan",
				Usage:     "print the changes that bring the host to a configuration, in order; change nothing",
				ArgsUsage: "FILE",
				Flags:     []cli.Flag{configFlag, layoutForce, connect, timeoutFlag()},
				Action:    opAction("host layout plan"),
			},
			{
				Name:      "apply",
				Usage:     "change only what differs from a configuration, in dependency order, with the undo stack; persist it",
				ArgsUsage: "FILE",
				Flags:     []cli.Flag{configFlag, layoutForce, connect, dryRunFlag(), timeoutFlag()},
				Action:    opAction("host layout apply"),
			},
			{
				Name:  "show",
				Usage: "print the layout the host is in now as a layout file (or, with --selected, the one apply stored)",
				Flags: []cli.Flag{
					&cli.BoolFlag{Name: "selected", Usage: "print the configuration the last apply recorded (" + layout.SelectionFile + " in the state directory)"},
					timeoutFlag(),
				},
				Action: opAction("host layout show"),
			},
		},
	}
}

// layoutPlanRequest is host layout plan's request: its FILE operand read (the CLI reads the
// file; in the agent, the copy the CLI sent), --config, --force, --connect and --timeout.
func layoutPlanRequest(f flagValues) (ops.LayoutPlanRequest, error) {
	return layoutRequest(f, "plan")
}

// layoutApplyRequest is host layout apply's request: plan's, and --dry-run.
func layoutApplyRequest(f flagValues) (ops.LayoutApplyRequest, error) {
	p, err := layoutRequest(f, "apply")
	return ops.LayoutApplyRequest{LayoutPlanRequest: p, DryRun: f.Bool("dry-run")}, err
}

// layoutRequest is the request plan and apply (named verb) share.
func layoutRequest(f flagValues, verb string) (ops.LayoutPlanRequest, error) {
	if len(f.Operands()) != 1 {
		return ops.LayoutPlanRequest{}, usageErr("%s needs exactly one layout FILE", verb)
	}
	p := f.Operands()[0]
	// The CLI reads FILE; the agent has the content the caller's CLI sent.
	data, sent, err := sentContent(f, "host layout "+verb, p)
	if err != nil {
		return ops.LayoutPlanRequest{}, err
	}
	if sent {
		_, err = layout.ParseFile(p, data)
	} else {
		_, data, err = layout.ReadFile(p)
	}
	if err != nil {
		return ops.LayoutPlanRequest{}, err
	}
	force, err := ops.CheckForce(f.StringSlice("force"), layout.ForceableChecks())
	if err != nil {
		return ops.LayoutPlanRequest{}, err
	}
	return ops.LayoutPlanRequest{File: p, Data: data, Config: f.String("config"), Force: force,
		AskLibvirt: f.String("connect") != "", Timeout: f.Duration("timeout")}, nil
}

// renderLayoutPlan prints host layout plan's plan in output format output.
func renderLayoutPlan(w io.Writer, output string, plan *ops.LayoutPlanResult) error {
	return emitTo(w, output, plan, func(w io.Writer) error { return planTable(w, plan) })
}

func planTable(out io.Writer, p *layout.HostPlan) error {
	if p.Empty() {
		fmt.Fprintf(out, "layout %s: nothing to do, the host is in it\n", p.Config)
	} else {
		fmt.Fprintf(out, "# layout %s: %d change(s), in this order (nothing was changed)\n", p.Config, len(p.Changes))
		w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "ACTION\tTARGET\tCHANGE")
		for _, c := range p.Changes {
			d := c.Detail
			if len(c.Instances) > 0 {
				d += ": " + strings.Join(c.Instances, " ")
			}
			fmt.Fprintf(w, "%s\t%s\t%s\n", c.Action, c.Target, d)
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	for _, r := range p.Refusals {
		check := ""
		if r.Check != "" {
			check = " [" + r.Check + "]"
		}
		fmt.Fprintf(out, "REFUSED%s %s: %s\n", check, r.Target, r.Reason)
	}
	for _, wmsg := range p.Warnings {
		fmt.Fprintf(out, "warning: %s\n", wmsg)
	}
	return nil
}

// renderLayoutApply prints host layout apply's result in output format output: what it did,
// or a dry run's writes.
func renderLayoutApply(w io.Writer, output string, res *ops.LayoutApplyResult) error {
	if res.DryRun != nil {
		return renderReport(w, output, "vgpu-host host layout apply", res.DryRun)
	}
	return emitTo(w, output, res.Apply, func(w io.Writer) error { return applyLayoutTable(w, res.Apply) })
}

func applyLayoutTable(out io.Writer, r *layout.HostApplyResult) error {
	if len(r.Plan.Refusals) > 0 {
		return planTable(out, r.Plan)
	}
	if len(r.Done) == 0 && len(r.Plan.Changes) == 0 {
		fmt.Fprintf(out, "layout %s: nothing to do, the host is in it\n", r.Plan.Config)
		return nil
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ACTION\tTARGET\tCHANGE\tRESULT")
	for _, d := range r.Done {
		detail := d.Detail
		if len(d.Instances) > 0 {
			detail += ": " + strings.Join(d.Instances, " ")
		}
		if len(d.Created) > 0 && len(d.Instances) == 0 {
			detail += ": " + strings.Join(d.Created, " ")
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", d.Action, d.Target, detail, d.Result)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if len(r.Done) == len(r.Plan.Changes) {
		fmt.Fprintf(out, "layout %s applied and recorded for host restore\n", r.Plan.Config)
	}
	for _, wmsg := range r.Plan.Warnings {
		fmt.Fprintf(out, "warning: %s\n", wmsg)
	}
	return nil
}

// layoutShowRequest is host layout show's request: --selected and --timeout.
func layoutShowRequest(f flagValues) ops.LayoutShowRequest {
	return ops.LayoutShowRequest{Selected: f.Bool("selected"), Timeout: f.Duration("timeout")}
}

// renderLayoutShow prints host layout show's layout in output format output: as a layout file
// (after a line naming the selection, with --selected), or its JSON.
func renderLayoutShow(w io.Writer, output string, res *ops.LayoutShowResult) error {
	return emitTo(w, output, res.Value(), func(w io.Writer) error {
		if s := res.Selection; s != nil {
			fmt.Fprintf(w, "# selected: configuration %q of %s, applied %s\n", s.Config, s.Source, s.AppliedAt.Format("2006-01-02 15:04:05 MST"))
		}
		b, err := res.File.Marshal()
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	})
}
