package clitree

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/mdev"
	"github.com/vgpu-host/vgpu-host/ops"
)

func vfCommand() *cli.Command {
	return &cli.Command{
		Name:  "vf",
		Usage: "enable, disable and list SR-IOV virtual functions (docs/vgpu.md)",
		Description: "Follows the kernel's sriov_numvfs rules for you: checks sriov_totalvfs first, writes 0 before\n" +
			"changing to another count, and writes nothing when the count is already right. Exit codes:\n" +
			"0 ok (or already so), 1 failed, 2 usage or count above sriov_totalvfs, 4 refused (enable on a\n" +
			"quarantined PF; docs/health.md), 5 busy (VFs in use), 6 no such device, 7 no SR-IOV (no\n" +
			"capability, or the PF driver cannot create VFs).",
		Commands: []*cli.Command{vfListCommand(), vfEnableCommand(), vfDisableCommand()},
	}
}

// pfArgOf is the one PF address operand of the command named name (its last word) with
// flags f, or a usage error.
func pfArgOf(name string, f flagValues) (host.Address, error) {
	if len(f.Operands()) != 1 {
		return host.Address{}, usageErr("%s needs exactly one PF address (e.g. 0000:00:0a.0)", name)
	}
	a, err := host.ParseAddress(f.Operands()[0])
	if err != nil {
		return host.Address{}, usageErr("%v", err)
	}
	return a, nil
}

func vfListCommand() *cli.Command {
	return &cli.Command{
		Name:      "list",
		Usage:     "list SR-IOV physical functions and their VFs",
		ArgsUsage: "[PF]",
		Action:    opAction("vf list"),
	}
}

// vfListRequest is vf list's request: at most one operand, the PF.
func vfListRequest(f flagValues) (ops.VFListRequest, error) {
	switch o := f.Operands(); {
	case len(o) > 1:
		return ops.VFListRequest{}, usageErr("list needs exactly one PF address (e.g. 0000:00:0a.0)")
	case len(o) == 1 && o[0] == "":
		// An empty PF is no address (the request's empty PF means every PF).
		_, err := host.ParseAddress("")
		return ops.VFListRequest{}, usageErr("%v", err)
	}
	return ops.VFListRequest{PF: firstOperand(f)}, nil
}

// renderVFList prints vf list's result in output format output.
func renderVFList(w io.Writer, output string, res *ops.VFListResult) error {
	return emitTo(w, output, res, func(w io.Writer) error { return pfTable(w, *res) })
}

func pfTable(out io.Writer, pfs []mdev.PF) error {
	if len(pfs) == 0 {
		fmt.Fprintln(out, "no SR-IOV capable devices (no sriov_totalvfs under /sys/bus/pci/devices)")
		return nil
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "PF\tDRIVER\tVFS\tAUTOPROBE\tPERSISTED\tVF DRIVERS")
	for _, p := range pfs {
		auto := "-"
		if p.Autoprobe != nil {
			auto = yesNo(*p.Autoprobe)
		}
		pers := "-"
		if p.Persisted != nil {
			pers = fmt.Sprintf("%d (%s)", p.Persisted.NumVFs, p.Persisted.Driver)
		}
		var vfs []string
		for _, v := range p.VFs {
			d := driverCell(v.Driver)
			if v.VendorVGPU {
				d += "+vgpu"
			}
			vfs = append(vfs, v.Address.String()+"="+d)
		}
		fmt.Fprintf(w, "%s\t%s\t%d/%d\t%s\t%s\t%s\n", p.Address, driverCell(p.Driver), p.NumVFs, p.TotalVFs, auto, pers, dash(strings.Join(vfs, " ")))
	}
	return w.Flush()
}

func vfEnableCommand() *cli.Command {
	return &cli.Command{
		Name:      "enable",
		Usage:     "make a PF have exactly COUNT VFs",
		ArgsUsage: "PF",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "count", Aliases: []string{"n"}, Required: true, Usage: "number of VFs (1..sriov_totalvfs)"},
			&cli.StringFlag{Name: "driver", Value: mdev.DriverKeep, Usage: "`vfio-pci` (sriov_drivers_autoprobe=0, then bind each VF to vfio-pci by address) or keep (leave VFs to the kernel)"},
			&cli.BoolFlag{Name: "persist", Usage: "record the count for 'vgpu-host host restore' at boot"},
			&cli.BoolFlag{Name: "force", Usage: "change the count even when a process (a guest) holds a VF open; the kernel then waits for it"},
			dryRunFlag(), timeoutFlag(),
		},
		Action: opAction("vf enable"),
	}
}

// vfEnableRequest is vf enable's request: the PF, checked (ops.VFEnableRequest.Check).
func vfEnableRequest(f flagValues) (ops.VFEnableRequest, error) {
	a, err := pfArgOf("enable", f)
	if err != nil {
		return ops.VFEnableRequest{}, err
	}
	req := ops.VFEnableRequest{PF: a.String(), Count: f.Int("count"), Driver: f.String("driver"),
		Persist: f.Bool("persist"), Force: f.Bool("force"), DryRun: f.Bool("dry-run"), Timeout: f.Duration("timeout")}
	return req, req.Check()
}

// renderVFEnable prints the PF and its VFs, or the dry run's writes.
func renderVFEnable(o opOutput, res *ops.VFResult) error {
	if res.DryRun != nil {
		return renderReport(o.w, o.format, o.name, res.DryRun)
	}
	pf := res.PF
	return o.emit(pf, func(w io.Writer) error { return pfTable(w, []mdev.PF{pf}) })
}

func vfDisableCommand() *cli.Command {
	return &cli.Command{
		Name:      "disable",
		Usage:     "remove every VF of a PF (sriov_numvfs=0) and restore the sriov_drivers_autoprobe value 'vf enable --driver vfio-pci' changed",
		ArgsUsage: "PF",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "persist", Usage: "also forget the count 'host restore' would apply at boot"},
			&cli.BoolFlag{Name: "force", Usage: "disable even when a process (a guest) holds a VF open; the kernel then waits for it"},
			dryRunFlag(), timeoutFlag(),
			resetFlag(),
		},
		Action: opAction("vf disable"),
	}
}

// vfDisableRequest is vf disable's request.
func vfDisableRequest(f flagValues) (ops.VFDisableRequest, error) {
	a, err := pfArgOf("disable", f)
	if err != nil {
		return ops.VFDisableRequest{}, err
	}
	return ops.VFDisableRequest{PF: a.String(), Persist: f.Bool("persist"), Force: f.Bool("force"),
		DryRun: f.Bool("dry-run"), Reset: f.Bool("reset"), Timeout: f.Duration("timeout")}, nil
}

// renderVFDisable prints the PF without VFs (and the autoprobe value restored), or the dry
// run's writes.
func renderVFDisable(o opOutput, res *ops.VFResult) error {
	if res.DryRun != nil {
		return renderReport(o.w, o.format, o.name, res.DryRun)
	}
	pf := res.PF
	return o.emit(pf, func(w io.Writer) error {
		if err := pfTable(w, []mdev.PF{pf}); err != nil {
			return err
		}
		if pf.AutoprobeRestored && pf.Autoprobe != nil {
			fmt.Fprintf(w, "restored sriov_drivers_autoprobe=%s on %s (its value before vgpu-host set 0)\n", map[bool]string{true: "1", false: "0"}[*pf.Autoprobe], pf.Address)
		}
		return nil
	})
}
