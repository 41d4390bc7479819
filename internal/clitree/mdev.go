package clitree

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/mdev"
	"github.com/vgpu-host/vgpu-host/ops"
	"github.com/vgpu-host/vgpu-host/virt"
)

// vgpuManager builds the mdev.Manager for the invocation (ops.MdevManager): with --dry-run the
// writes go to a Recorder (printed by emitDry); on the real root the libvirt in-use check is
// wired in, to this machine's libvirt or, in the agent, its own connection.
func vgpuManager(cmd *cli.Command) (*mdev.Manager, *host.Recorder, func(), error) {
	root, err := rootOf(cmd)
	if err != nil {
		return nil, nil, nil, err
	}
	if _, err := outputOf(cmd); err != nil {
		return nil, nil, nil, err
	}
	m, rec, done := ops.MdevManager(opsEnv(cmd, root, virt.DefaultURI), cmd.Duration("timeout"), cmd.Bool("dry-run"))
	return m, rec, done, nil
}

// emitDry prints the --dry-run report of the writes rec recorded (ops.DryRun).
func emitDry(cmd *cli.Command, rec *host.Recorder, files []string, result any) error {
	return emitReport(cmd, ops.DryRun(rec, files, result))
}

// emitReport prints a dry run's report: as JSON, or the writes one a line.
func emitReport(cmd *cli.Command, r *ops.DryRunReport) error {
	o, err := outputOf(cmd)
	if err != nil {
		return err
	}
	return renderReport(cmd.Root().Writer, o, cmd.FullName(), r)
}

// renderReport prints the dry run report of the command named name (its full name, "vgpu-host
// mdev create") in output format output.
func renderReport(w io.Writer, output, name string, r *ops.DryRunReport) error {
	return emitTo(w, output, r, func(w io.Writer) error {
		fmt.Fprintf(w, "# dry run: %s would make these sysfs writes, in order (nothing was changed)\n", name)
		for _, wr := range r.Writes {
			fmt.Fprintln(w, wr.String())
		}
		for _, f := range r.Files {
			fmt.Fprintf(w, "# and write %s\n", f)
		}
		if len(r.Writes) == 0 && len(r.Files) == 0 {
			fmt.Fprintln(w, "# nothing to do")
		}
		return nil
	})
}

func dryRunFlag() cli.Flag {
	return &cli.BoolFlag{Name: "dry-run", Usage: "print the exact sysfs writes in order and change nothing"}
}

func timeoutFlag() cli.Flag {
	return &cli.DurationFlag{Name: "timeout", Value: mdev.DefaultTimeout, Usage: "bound each sysfs write and wait by `DURATION`"}
}

func mdevCommand() *cli.Command {
	return &cli.Command{
		Name:  "mdev",
		Usage: "list, create, remove and persist vGPU instances: mdev and NVIDIA vendor-VFIO (docs/vgpu.md)",
		Description: "A vGPU instance is a parent (GPU, or a virtual parent such as mbochs) plus a type. Parents on\n" +
			"the mdev bus get UUID instances; NVIDIA vGPU 17+ GPUs (no mdev bus) get a type assigned to a VF.\n" +
			"Profiles are named by type ID (nvidia-471, mbochs-small, 1160) or name (A100-4C, L40S-8Q).\n" +
			"Exit codes: 0 ok (or already so), 1 failed, 2 usage, 4 refused (in use: --force; a quarantined\n" +
			"parent or VF: no --force, docs/health.md), 5 busy/full, 6 no such parent/type/instance,\n" +
			"7 unsupported.",
		Commands: []*cli.Command{
			mdevTypesCommand(), mdevListCommand(), mdevCreateCommand(), mdevRemoveCommand(),
			mdevDefineCommand(), mdevUndefineCommand(), mdevPlaceCommand(),
		},
	}
}

func mdevTypesCommand() *cli.Command {
	return &cli.Command{
		Name:      "types",
		Usage:     "list vGPU parents and the types they can create now",
		ArgsUsage: "[PARENT]",
		Action: func(ctx context.Context, cmd *cli.Command) error {
			m, _, done, err := vgpuManager(cmd)
			if err != nil {
				return err
			}
			defer done()
			var ps []mdev.Parent
			if cmd.Args().Len() > 0 {
				p, err := m.Parent(cmd.Args().First())
				if err != nil {
					return err
				}
				ps = []mdev.Parent{p}
			} else if ps, err = m.Parents(); err != nil {
				return err
			}
			if ps == nil {
				ps = []mdev.Parent{}
			}
			return emit(cmd, ps, func(w io.Writer) error { return typesTable(w, ps) })
		},
	}
}

func typesTable(out io.Writer, ps []mdev.Parent) error {
	if len(ps) == 0 {
		fmt.Fprintln(out, "no vGPU parents: no mdev_supported_types under /sys/class/mdev_bus and no VF with nvidia/creatable_vgpu_types")
		return nil
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "PARENT\tBACKEND\tNUMA\tTYPE\tNAME\tAVAILABLE\tINSTANCES")
	for _, p := range ps {
		if len(p.Types) == 0 {
			fmt.Fprintf(w, "%s\t%s\t%s\t-\t-\t0\t0\n", p.Name, p.Backend, numaCell(p.NUMA))
		}
		for _, t := range p.Types {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%d\n", p.Name, p.Backend, numaCell(p.NUMA), t.ID, t.Name, t.Available, len(t.Instances))
		}
	}
	return w.Flush()
}

func mdevListCommand() *cli.Command {
	return &cli.Command{
		Name:  "list",
		Usage: "list vGPU instances: active ones and defined (persistent) ones, with their owners",
		Description: "Like 'mdevctl list' and 'mdevctl list --defined' in one table: ACTIVE says the instance\n" +
			"exists in the kernel now, DEFINED that a persistent definition brings it back, START its\n" +
			"mdevctl start policy (auto: created at boot; manual: kept only).",
		ArgsUsage: "[PARENT]",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "defined", Aliases: []string{"d"}, Usage: "only instances with a persistent definition (mdevctl list --defined)"},
			&cli.BoolFlag{Name: "active", Usage: "only instances that exist in the kernel now (mdevctl list)"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			m, _, done, err := vgpuManager(cmd)
			if err != nil {
				return err
			}
			defer done()
			all, err := m.Instances()
			if err != nil {
				return err
			}
			parent := ""
			if cmd.Args().Len() > 0 {
				p, err := m.Parent(cmd.Args().First())
				if err != nil {
					// A defined instance's parent may be absent now; match it by name.
					parent = cmd.Args().First()
					if a, perr := host.ParseAddress(parent); perr == nil {
						parent = a.String()
					}
				} else {
					parent = p.Name
				}
			}
			var ins []mdev.Instance
			for _, in := range all {
				if (cmd.Bool("defined") && !in.Defined) || (cmd.Bool("active") && !in.Active) || (parent != "" && in.Parent != parent) {
					continue
				}
				ins = append(ins, in)
			}
			if ins == nil {
				ins = []mdev.Instance{}
			}
			return emit(cmd, ins, func(w io.Writer) error { return instancesTable(w, ins) })
		},
	}
}

func instancesTable(out io.Writer, ins []mdev.Instance) error {
	if len(ins) == 0 {
		fmt.Fprintln(out, "no vGPU instances")
		return nil
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "INSTANCE\tPARENT\tBACKEND\tTYPE\tNAME\tOWNER\tACTIVE\tDEFINED\tSTART")
	for _, in := range ins {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", in.ID(), in.Parent, in.Backend, in.Type, dash(in.TypeName), dash(in.Owner), yesNo(in.Active), yesNo(in.Defined), dash(in.Start))
	}
	return w.Flush()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func mdevCreateCommand() *cli.Command {
	return &cli.Command{
		Name:  "create",
		Usage: "create vGPU instances of a type on a parent, all or none",
		Description: "With --name VM the UUIDs derive from the VM name and an index, so running the same command\n" +
			"again converges (existing instances of the same type count as created). --count checks\n" +
			"available_instances first and creates all or none.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "parent", Aliases: []string{"p"}, Required: true, Usage: "parent `DEVICE`: PCI address, VF address (vendor-VFIO) or virtual parent name (mbochs)"},
			&cli.StringFlag{Name: "type", Aliases: []string{"t"}, Required: true, Usage: "type `ID or NAME` (nvidia-471, A100-4C, mbochs-small, 1160)"},
			&cli.StringSliceFlag{Name: "uuid", Usage: "explicit mdev `UUID` (repeat for several)"},
			&cli.IntFlag{Name: "count", Aliases: []string{"n"}, Usage: "number of instances (default 1, or the number of --uuid)"},
			&cli.StringFlag{Name: "name", Usage: "the `VM` the instances are for: derive UUIDs from it and record it as owner"},
			&cli.IntFlag{Name: "first-index", Usage: "the VM's index of the first instance, 0..255 (default 0)"},
			&cli.BoolFlag{Name: "define", Usage: "also persist the mdev instances (mdevctl format, start=auto)"},
			dryRunFlag(), timeoutFlag(),
		},
		Action: opAction("mdev create", nil),
	}
}

// mdevCreateRequest is mdev create's request, checked (ops.MdevCreateRequest.Check).
func mdevCreateRequest(f flagValues) (ops.MdevCreateRequest, error) {
	req := ops.MdevCreateRequest{Parent: f.String("parent"), Type: f.String("type"), UUIDs: f.StringSlice("uuid"),
		Count: f.Int("count"), CountSet: f.IsSet("count"), Name: f.String("name"), FirstIndex: f.Int("first-index"),
		Define: f.Bool("define"), DryRun: f.Bool("dry-run"), Timeout: f.Duration("timeout")}
	return req, req.Check()
}

// renderMdevCreate prints the instances created, or the dry run's writes.
func renderMdevCreate(o opOutput, res *ops.MdevResult) error {
	if res.DryRun != nil {
		return renderReport(o.w, o.format, o.name, res.DryRun)
	}
	ins := res.Instances
	return o.emit(ins, func(w io.Writer) error { return instancesTable(w, ins) })
}

// mdevRemoveRequest is mdev remove's request, checked (ops.MdevRemoveRequest.Check).
func mdevRemoveRequest(f flagValues) (ops.MdevRemoveRequest, error) {
	req := ops.MdevRemoveRequest{IDs: f.Operands(), Name: f.String("name"),
		Force: f.Bool("force"), Undefine: f.Bool("undefine"), DryRun: f.Bool("dry-run"), Reset: f.Bool("reset"),
		Timeout: f.Duration("timeout")}
	return req, req.Check()
}

// renderMdevRemove prints the instances removed, or the dry run's writes.
func renderMdevRemove(o opOutput, res *ops.MdevResult) error {
	if res.DryRun != nil {
		return renderReport(o.w, o.format, o.name, res.DryRun)
	}
	rm := res.Instances
	return o.emit(rm, func(w io.Writer) error {
		if len(rm) == 0 {
			fmt.Fprintln(w, "nothing to remove (already gone)")
			return nil
		}
		for _, in := range rm {
			fmt.Fprintf(w, "removed %s (%s on %s)\n", in.ID(), in.Type, in.Parent)
		}
		return nil
	})
}

func mdevRemoveCommand() *cli.Command {
	return &cli.Command{
		Name:      "remove",
		Usage:     "remove vGPU instances (mdev UUIDs, or VFs of vendor-VFIO instances)",
		ArgsUsage: "UUID|VF...",
		Description: "Refuses an instance that a defined or running libvirt domain uses, and a vendor vGPU type\n" +
			"vgpu-host did not set, unless --force. Under a --host-root other than / there is no libvirt to\n" +
			"ask, so the domain check is skipped. --name VM removes every instance recorded for VM.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "force", Usage: "remove even when a libvirt domain uses it or libvirtd is unreachable"},
			&cli.BoolFlag{Name: "undefine", Usage: "also delete the persistent definitions"},
			&cli.StringFlag{Name: "name", Usage: "remove the instances recorded for `VM` (and refuse other owners' instances)"},
			dryRunFlag(), timeoutFlag(),
			resetFlag(),
		},
		Action: opAction("mdev remove", nil),
	}
}

func mdevDefineCommand() *cli.Command {
	return &cli.Command{
		Name:      "define",
		Usage:     "persist mdev instances in mdevctl's format (/etc/mdevctl.d/PARENT/UUID) for 'host restore' and mdevctl",
		ArgsUsage: "UUID...",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "parent", Usage: "parent `DEVICE` (needed when the instance is not active)"},
			&cli.StringFlag{Name: "type", Usage: "type `ID or NAME` (needed when the instance is not active)"},
			&cli.BoolFlag{Name: "manual", Usage: "start=manual: keep the definition but do not create it at boot"},
			dryRunFlag(),
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.Args().Len() == 0 {
				return usageErr("define needs at least one UUID")
			}
			m, _, done, err := vgpuManager(cmd)
			if err != nil {
				return err
			}
			defer done()
			start := "auto"
			if cmd.Bool("manual") {
				start = "manual"
			}
			var defs []mdev.Definition
			for _, id := range cmd.Args().Slice() {
				d, err := m.Define(mdev.Definition{UUID: id, Parent: cmd.String("parent"), Type: cmd.String("type"), Start: start})
				if err != nil {
					return err
				}
				defs = append(defs, d)
			}
			return emit(cmd, defs, func(w io.Writer) error {
				verb := "defined"
				if m.DryRun {
					verb = "would define"
				}
				for _, d := range defs {
					fmt.Fprintf(w, "%s %s (%s on %s, start=%s) in %s\n", verb, d.UUID, d.Type, d.Parent, d.Start, d.Path)
				}
				return nil
			})
		},
	}
}

func mdevUndefineCommand() *cli.Command {
	return &cli.Command{
		Name:      "undefine",
		Usage:     "delete persistent mdev definitions (the active instances stay)",
		ArgsUsage: "UUID...",
		Flags:     []cli.Flag{dryRunFlag()},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.Args().Len() == 0 {
				return usageErr("undefine needs at least one UUID")
			}
			m, _, done, err := vgpuManager(cmd)
			if err != nil {
				return err
			}
			defer done()
			removed := []string{}
			for _, id := range cmd.Args().Slice() {
				r, err := m.Undefine(id)
				if err != nil {
					return err
				}
				removed = append(removed, r...)
			}
			return emit(cmd, map[string]any{"removed": removed, "dry_run": m.DryRun}, func(w io.Writer) error {
				if len(removed) == 0 {
					fmt.Fprintln(w, "nothing to undefine")
				}
				for _, p := range removed {
					fmt.Fprintf(w, "removed %s\n", p)
				}
				return nil
			})
		},
	}
}

func mdevPlaceCommand() *cli.Command {
	return &cli.Command{
		Name:  "place",
		Usage: "show where COUNT instances of a profile would go (best fit, NUMA preference); changes nothing",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "type", Aliases: []string{"t"}, Required: true, Usage: "profile `ID or NAME`"},
			&cli.IntFlag{Name: "count", Aliases: []string{"n"}, Value: 1, Usage: "number of instances"},
			&cli.StringFlag{Name: "numa", Usage: "preferred NUMA `NODE`"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			m, _, done, err := vgpuManager(cmd)
			if err != nil {
				return err
			}
			defer done()
			numa := -1
			if s := cmd.String("numa"); s != "" {
				if numa, err = strconv.Atoi(s); err != nil || numa < 0 {
					return usageErr("--numa %q: want a node number", s)
				}
			}
			ps, err := m.Parents()
			if err != nil {
				return err
			}
			pl, err := mdev.PlaceWithMIG(mdev.Request{Profile: cmd.String("type"), Count: cmd.Int("count"), NUMA: numa}, ps, placeMIGState(ctx, m.Root, ps))
			if err != nil {
				return err
			}
			return emit(cmd, pl, func(w io.Writer) error {
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "PARENT\tBACKEND\tNUMA\tTYPE\tNAME\tCOUNT\tFREE")
				for _, a := range pl.Assignments {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\n", a.Parent, a.Backend, numaCell(a.NUMA), a.Type, a.TypeName, a.Count, a.Free)
				}
				if err := tw.Flush(); err != nil {
					return err
				}
				for _, n := range pl.Notes {
					fmt.Fprintf(w, "note: %s\n", n)
				}
				return nil
			})
		},
	}
}
