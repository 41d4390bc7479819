package clitree

import (
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
		Action:    opAction("mdev types"),
	}
}

// mdevTypesRequest is mdev types' request: its operand, the parent, if any (an empty one
// names no parent there is).
func mdevTypesRequest(f flagValues) ops.MdevTypesRequest {
	if o := f.Operands(); len(o) > 0 {
		return ops.MdevTypesRequest{Parent: &o[0]}
	}
	return ops.MdevTypesRequest{}
}

// firstOperand is f's first operand, or "".
func firstOperand(f flagValues) string {
	if o := f.Operands(); len(o) > 0 {
		return o[0]
	}
	return ""
}

// renderMdevTypes prints mdev types' result in output format output.
func renderMdevTypes(w io.Writer, output string, res *ops.MdevTypesResult) error {
	return emitTo(w, output, res, func(w io.Writer) error { return typesTable(w, *res) })
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
		Action: opAction("mdev list"),
	}
}

// mdevListRequest is mdev list's request: the parent operand, --defined and --active.
func mdevListRequest(f flagValues) ops.MdevListRequest {
	return ops.MdevListRequest{Parent: firstOperand(f), Defined: f.Bool("defined"), Active: f.Bool("active")}
}

// renderMdevList prints mdev list's result in output format output.
func renderMdevList(w io.Writer, output string, res *ops.MdevListResult) error {
	return emitTo(w, output, res, func(w io.Writer) error { return instancesTable(w, *res) })
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
		Action: opAction("mdev create"),
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
		Action: opAction("mdev remove"),
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
		Action: opAction("mdev define"),
	}
}

// mdevDefineRequest is mdev define's request: the UUID operands, --parent, --type, --manual
// and --dry-run.
func mdevDefineRequest(f flagValues) ops.MdevDefineRequest {
	return ops.MdevDefineRequest{UUIDs: f.Operands(), Parent: f.String("parent"), Type: f.String("type"),
		Manual: f.Bool("manual"), DryRun: f.Bool("dry-run")}
}

// renderMdevDefine prints what mdev define wrote (or would write) in output format output.
func renderMdevDefine(w io.Writer, output string, res *ops.MdevDefineResult) error {
	return emitTo(w, output, res.Definitions, func(w io.Writer) error {
		verb := "defined"
		if res.DryRun {
			verb = "would define"
		}
		for _, d := range res.Definitions {
			fmt.Fprintf(w, "%s %s (%s on %s, start=%s) in %s\n", verb, d.UUID, d.Type, d.Parent, d.Start, d.Path)
		}
		return nil
	})
}

func mdevUndefineCommand() *cli.Command {
	return &cli.Command{
		Name:      "undefine",
		Usage:     "delete persistent mdev definitions (the active instances stay)",
		ArgsUsage: "UUID...",
		Flags:     []cli.Flag{dryRunFlag()},
		Action:    opAction("mdev undefine"),
	}
}

// mdevUndefineRequest is mdev undefine's request: the UUID operands and --dry-run.
func mdevUndefineRequest(f flagValues) ops.MdevUndefineRequest {
	return ops.MdevUndefineRequest{UUIDs: f.Operands(), DryRun: f.Bool("dry-run")}
}

// renderMdevUndefine prints what mdev undefine deleted (or would delete) in output format output.
func renderMdevUndefine(w io.Writer, output string, res *ops.MdevUndefineResult) error {
	return emitTo(w, output, res, func(w io.Writer) error {
		if len(res.Removed) == 0 {
			fmt.Fprintln(w, "nothing to undefine")
		}
		for _, p := range res.Removed {
			fmt.Fprintf(w, "removed %s\n", p)
		}
		return nil
	})
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
		Action: opAction("mdev place"),
	}
}

// mdevPlaceRequest is mdev place's request: --type, --count and --numa, a node number.
func mdevPlaceRequest(f flagValues) (ops.MdevPlaceRequest, error) {
	req := ops.MdevPlaceRequest{Type: f.String("type"), Count: f.Int("count")}
	if s := f.String("numa"); s != "" {
		numa, err := strconv.Atoi(s)
		if err != nil || numa < 0 {
			return req, usageErr("--numa %q: want a node number", s)
		}
		req.NUMA = &numa
	}
	return req, nil
}

// renderMdevPlace prints mdev place's placement in output format output.
func renderMdevPlace(w io.Writer, output string, pl *mdev.Placement) error {
	return emitTo(w, output, pl, func(w io.Writer) error {
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
}
