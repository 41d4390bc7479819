package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"sync"
	"text/tabwriter"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/ledger"
	"github.com/vgpu-host/vgpu-host/mdev"
	"github.com/vgpu-host/vgpu-host/vgpu"
	"github.com/vgpu-host/vgpu-host/virt"
	"github.com/vgpu-host/vgpu-host/virt/remote"
)

// openLibvirt connects to libvirt for the 'mdev remove' in-use check; tests replace it.
var openLibvirt = func() (mdev.DomainXMLLister, func(), error) {
	c, err := opened(openConn(virt.DefaultURI, remote.OpenOptions{}))
	if err != nil {
		return nil, nil, err
	}
	return c, func() { c.Close() }, nil
}

// lazyLibvirt is the CLI's DomainUsers: it connects on first use, so commands that never
// remove anything never need libvirtd. An unreachable libvirtd makes the check fail, and
// Remove then decides by the kernel (who holds /dev/vfio/N) and the allocation ledger alone.
type lazyLibvirt struct {
	// open connects; nil uses openLibvirt (the system libvirtd).
	open  func() (mdev.DomainXMLLister, func(), error)
	once  sync.Once
	users mdev.LibvirtUsers
	close func()
	err   error
}

func (l *lazyLibvirt) DomainsUsing(ctx context.Context, in mdev.Instance) ([]string, error) {
	l.once.Do(func() {
		open := l.open
		if open == nil {
			open = openLibvirt
		}
		c, closeFn, err := open()
		if err != nil {
			l.err = fmt.Errorf("libvirtd is unreachable, so vgpu-host cannot tell which domains use %s: %w", in.ID(), err)
			return
		}
		l.users, l.close = mdev.LibvirtUsers{Conn: c}, closeFn
	})
	if l.err != nil {
		return nil, l.err
	}
	return l.users.DomainsUsing(ctx, in)
}

// vgpuManager builds the mdev.Manager for the invocation. With --dry-run the writes go to a
// Recorder (printed by emitDry); on the real root the libvirt in-use check is wired in.
func vgpuManager(cmd *cli.Command) (*mdev.Manager, *host.Recorder, func(), error) {
	root, err := rootOf(cmd)
	if err != nil {
		return nil, nil, nil, err
	}
	if _, err := outputOf(cmd); err != nil {
		return nil, nil, nil, err
	}
	w, _ := hostIOFor(cmd, root)
	m := mdev.New(root, w)
	if t := cmd.Duration("timeout"); t > 0 {
		m.Timeout = t
	}
	var rec *host.Recorder
	if cmd.Bool("dry-run") {
		rec = &host.Recorder{}
		m.W, m.DryRun = rec, true
	}
	m.Allocated = ledgerHolder(root)
	done := func() {}
	if root.IsReal() {
		l := &lazyLibvirt{}
		if rv := runEnvOf(cmd); rv != nil {
			// The agent's connection, lent (its close does nothing).
			l.open = func() (mdev.DomainXMLLister, func(), error) {
				c, err := openConnFor(cmd, rv.uri)
				if err != nil {
					return nil, nil, err
				}
				return c, func() { c.Close() }, nil
			}
		}
		m.Domains = l
		done = func() {
			if l.close != nil {
				l.close()
			}
		}
	}
	return m, rec, done, nil
}

// ledgerHolder returns the check mdev remove makes against the allocation ledger: the VM it
// gives an instance to ("" for none). The ledger is read once, on first use; an unreadable one
// gives nobody (the kernel's holders still decide).
func ledgerHolder(root host.Root) func(mdev.Instance) string {
	var once sync.Once
	var book *ledger.Book
	return func(in mdev.Instance) string {
		once.Do(func() { book, _ = ledger.Open(root).Read() })
		if book == nil {
			return ""
		}
		if in.VF != nil {
			return book.Holder(ledger.Claim{Kind: ledger.KindVendorVGPU, ID: in.VF.String()})
		}
		return book.Holder(ledger.Claim{Kind: ledger.KindMdev, ID: in.UUID})
	}
}

// dryRunReport is the --dry-run output: the sysfs writes in order, and the files vgpu-host
// itself would write.
type dryRunReport struct {
	DryRun bool                 `json:"dry_run"`
	Writes []host.RecordedWrite `json:"writes"`
	Files  []string             `json:"files,omitempty"`
	Result any                  `json:"result,omitempty"`
}

func emitDry(cmd *cli.Command, rec *host.Recorder, files []string, result any) error {
	r := dryRunReport{DryRun: true, Writes: rec.Writes(), Files: files, Result: result}
	if r.Writes == nil {
		r.Writes = []host.RecordedWrite{}
	}
	return emit(cmd, r, func(w io.Writer) error {
		fmt.Fprintf(w, "# dry run: %s would make these sysfs writes, in order (nothing was changed)\n", cmd.FullName())
		for _, wr := range r.Writes {
			fmt.Fprintln(w, wr.String())
		}
		for _, f := range files {
			fmt.Fprintf(w, "# and write %s\n", f)
		}
		if len(r.Writes) == 0 && len(files) == 0 {
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
		Action: runMdevCreate,
	}
}

func runMdevCreate(ctx context.Context, cmd *cli.Command) error {
	uuids := cmd.StringSlice("uuid")
	count := cmd.Int("count")
	if len(uuids) > 0 && cmd.IsSet("count") && count != len(uuids) {
		return usageErr("--count %d and %d --uuid disagree", count, len(uuids))
	}
	if len(uuids) > 0 && cmd.String("name") != "" {
		return usageErr("--uuid and --name are exclusive: --name derives the UUIDs")
	}
	if cmd.IsSet("count") && count < 1 {
		return usageErr("--count must be at least 1")
	}
	// --first-index numbers the VM's instances as apply does (vgpu.InstanceUUID): from 0, at
	// most vgpu.MaxInstanceIndex. A negative or huge one derives UUIDs no apply would, and
	// FirstIndex+i overflowed.
	if first := cmd.Int("first-index"); first < 0 || first > vgpu.MaxInstanceIndex || first+max(count, len(uuids), 1)-1 > vgpu.MaxInstanceIndex {
		return usageErr("--first-index %d: a VM's instances are numbered as apply numbers them, 0..%d (a spec has at most 16 gpus[] entries of 16 instances); the first index plus the count must stay in that range",
			first, vgpu.MaxInstanceIndex)
	}
	if n := cmd.String("name"); n != "" {
		if err := host.CheckComponent("--name", n); err != nil {
			return err
		}
	}
	m, rec, done, err := vgpuManager(cmd)
	if err != nil {
		return err
	}
	defer done()
	ins, err := m.Create(ctx, mdev.CreateRequest{Parent: cmd.String("parent"), Profile: cmd.String("type"), Count: count, UUIDs: uuids,
		Owner: cmd.String("name"), FirstIndex: cmd.Int("first-index")})
	if err != nil {
		return err
	}
	var files []string
	if cmd.Bool("define") {
		for _, in := range ins {
			if in.Backend != mdev.BackendMdev {
				continue // vendor-VFIO instances persist through the state file
			}
			d, err := m.Define(mdev.Definition{UUID: in.UUID, Parent: in.Parent, Type: in.Type})
			if err != nil {
				return err
			}
			files = append(files, d.Path)
		}
	}
	if rec != nil {
		return emitDry(cmd, rec, files, ins)
	}
	return emit(cmd, ins, func(w io.Writer) error { return instancesTable(w, ins) })
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
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.Args().Len() == 0 && cmd.String("name") == "" {
				return usageErr("remove needs instance UUIDs/VF addresses or --name VM")
			}
			m, rec, done, err := vgpuManager(cmd)
			if err != nil {
				return err
			}
			defer done()
			opts := mdev.RemoveOptions{Force: cmd.Bool("force"), Undefine: cmd.Bool("undefine"), Owner: cmd.String("name")}
			var rm []mdev.Instance
			if cmd.Args().Len() == 0 {
				rm, err = m.RemoveOwner(ctx, opts.Owner, opts)
			} else {
				rm, err = m.Remove(ctx, cmd.Args().Slice(), opts)
			}
			if err != nil {
				return err
			}
			if rm == nil {
				rm = []mdev.Instance{}
			}
			if rec != nil {
				return emitDry(cmd, rec, nil, rm)
			}
			handBack(ctx, cmd, m.Root, m.W, releasedInstances(rm), "mdev remove")
			return emit(cmd, rm, func(w io.Writer) error {
				if len(rm) == 0 {
					fmt.Fprintln(w, "nothing to remove (already gone)")
					return nil
				}
				for _, in := range rm {
					fmt.Fprintf(w, "removed %s (%s on %s)\n", in.ID(), in.Type, in.Parent)
				}
				return nil
			})
		},
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

// releasedInstances are the PCI functions removed instances leave: each vendor-VFIO instance's
// VF, and each PCI parent of an mdev instance (once, checked but never reset; a virtual parent
// such as mbochs has no function to check).
func releasedInstances(rm []mdev.Instance) []host.Released {
	var rel []host.Released
	seen := map[host.Address]bool{}
	for _, in := range rm {
		r := host.Released{}
		switch {
		case in.VF != nil:
			r.Address = *in.VF
		default:
			p, err := host.ParseAddress(in.Parent)
			if err != nil {
				continue
			}
			r.Address, r.CheckOnly = p, true // its other instances live on
		}
		if !seen[r.Address] {
			seen[r.Address] = true
			rel = append(rel, r)
		}
	}
	return rel
}
