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
	"github.com/vgpu-host/vgpu-host/mdev"
	"github.com/vgpu-host/vgpu-host/mig"
	"github.com/vgpu-host/vgpu-host/ops"
	"github.com/vgpu-host/vgpu-host/vfio"
	"github.com/vgpu-host/vgpu-host/virt/remote"
)

// nvmlMIG returns the MIG backend and planner for root and how to let the NVML helper go: the
// helper when NVML describes root (this machine, or a mock helper under tests) and answers;
// else nil (a layout with a mig entry is then refused, exit 7, and show lists no MIG).
// Env.MIGFor replaces it.
func nvmlMIG(root host.Root) (mig.Backend, layout.MIGPlanner, func()) {
	if !nvmlDescribes(root) {
		return nil, nil, func() {}
	}
	oc, err := openMIG()
	if err != nil {
		return nil, nil, func() {}
	}
	c := cachingMIG(root, oc)
	return c, layout.NVMLPlanner{}, func() { c.Flush(context.Background()); oc.Close() }
}

// migOpener is the boot reconcile's way to NVML for root (reconcile.Reconciler.OpenMIG): the
// helper, when NVML describes root.
func migOpener(root host.Root) func() (mig.Backend, func(), error) {
	return func() (mig.Backend, func(), error) {
		if !nvmlDescribes(root) {
			return nil, nil, fmt.Errorf("NVML describes this machine, not --host-root %s: %w", root.Dir(), host.ErrUnsupported)
		}
		oc, err := openMIG()
		if err != nil {
			return nil, nil, err
		}
		c := cachingMIG(root, oc)
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
				Action:    runLayoutPlan,
			},
			{
				Name:      "apply",
				Usage:     "change only what differs from a configuration, in dependency order, with the undo stack; persist it",
				ArgsUsage: "FILE",
				Flags:     []cli.Flag{configFlag, layoutForce, connect, dryRunFlag(), timeoutFlag()},
				Action:    runLayoutApply,
			},
			{
				Name:  "show",
				Usage: "print the layout the host is in now as a layout file (or, with --selected, the one apply stored)",
				Flags: []cli.Flag{
					&cli.BoolFlag{Name: "selected", Usage: "print the configuration the last apply recorded (" + layout.SelectionFile + " in the state directory)"},
					timeoutFlag(),
				},
				Action: runLayoutShow,
			},
		},
	}
}

// layoutHost builds the layout's view of the host: the invocation's mdev.Manager (dry run,
// allocation ledger, libvirt on this machine or at --connect), a vfio.Binder on the same
// writer, and the MIG backend when there is one.
func layoutHost(cmd *cli.Command) (*layout.Host, *host.Recorder, func(), error) {
	m, rec, done, err := vgpuManager(cmd)
	if err != nil {
		return nil, nil, nil, err
	}
	if uri := cmd.String("connect"); uri != "" {
		l := &ops.LazyLibvirt{Open: func() (mdev.DomainXMLLister, func(), error) {
			c, err := envOf(cmd).openConn(uri, remote.OpenOptions{})
			if err != nil {
				return nil, nil, err
			}
			return c, func() { c.Close() }, nil
		}}
		m.Domains = l
		prev := done
		done = func() {
			prev()
			l.Close()
		}
	}
	_, mods := envOf(cmd).hostIO(m.Root)
	b := &vfio.Binder{Root: m.Root, W: m.W, Modules: mods, Timeout: m.Timeout}
	backend, planner, closeMIG := envOf(cmd).migFor(m.Root)
	prevDone := done
	done = func() { closeMIG(); prevDone() }
	return &layout.Host{Root: m.Root, Mdev: m, Binder: b, MIG: backend, MIGPlanner: planner}, rec, done, nil
}

// layoutArg loads the FILE argument.
func layoutArg(cmd *cli.Command) (*layout.File, string, []byte, error) {
	if cmd.Args().Len() != 1 {
		return nil, "", nil, usageErr("%s needs exactly one layout FILE", cmd.Name)
	}
	p := cmd.Args().First()
	f, b, err := layout.ReadFile(p)
	if err != nil {
		return nil, "", nil, err
	}
	return f, p, b, nil
}

// layoutRun is what plan and apply start from: the file, the --force names, the host.
type layoutRun struct {
	f     *layout.File
	path  string
	data  []byte
	force []string
	h     *layout.Host
	rec   *host.Recorder // --dry-run's recorder, nil otherwise
	done  func()
}

func startLayout(cmd *cli.Command) (*layoutRun, error) {
	f, path, data, err := layoutArg(cmd)
	if err != nil {
		return nil, err
	}
	force, err := forcedFrom(cmd, layout.ForceableChecks())
	if err != nil {
		return nil, err
	}
	h, rec, done, err := layoutHost(cmd)
	if err != nil {
		return nil, err
	}
	return &layoutRun{f: f, path: path, data: data, force: force, h: h, rec: rec, done: done}, nil
}

func runLayoutPlan(ctx context.Context, cmd *cli.Command) error {
	r, err := startLayout(cmd)
	if err != nil {
		return err
	}
	defer r.done()
	plan, perr := layout.PlanConfig(ctx, r.h, r.f, cmd.String("config"), r.force)
	if plan == nil {
		return perr
	}
	if err := emit(cmd, plan, func(w io.Writer) error { return planTable(w, plan) }); err != nil {
		return err
	}
	return perr
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

func runLayoutApply(ctx context.Context, cmd *cli.Command) error {
	r, err := startLayout(cmd)
	if err != nil {
		return err
	}
	defer r.done()
	res, aerr := layout.ApplyConfig(ctx, r.h, r.f, cmd.String("config"), r.path, r.data, layout.ApplyOptions{Force: r.force, DryRun: r.rec != nil})
	if res == nil {
		return aerr
	}
	if r.rec != nil && aerr == nil {
		return emitDry(cmd, r.rec, res.Files, res)
	}
	if err := emit(cmd, res, func(w io.Writer) error { return applyLayoutTable(w, res) }); err != nil {
		return err
	}
	return aerr
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

func runLayoutShow(ctx context.Context, cmd *cli.Command) error {
	h, _, done, err := layoutHost(cmd)
	if err != nil {
		return err
	}
	defer done()
	if cmd.Bool("selected") {
		s, f, err := layout.LoadSelection(h.Root)
		if err != nil {
			return err
		}
		if s == nil {
			return fmt.Errorf("no layout was applied on this host (no %s): %w", host.HostPath(h.Root, layout.SelectionPath(h.Root)), host.ErrNotFound)
		}
		return emit(cmd, s, func(w io.Writer) error {
			fmt.Fprintf(w, "# selected: configuration %q of %s, applied %s\n", s.Config, s.Source, s.AppliedAt.Format("2006-01-02 15:04:05 MST"))
			b, err := f.Marshal()
			if err != nil {
				return err
			}
			_, err = w.Write(b)
			return err
		})
	}
	f, err := layout.Show(ctx, h)
	if err != nil {
		return err
	}
	return emit(cmd, f, func(w io.Writer) error {
		b, err := f.Marshal()
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	})
}
