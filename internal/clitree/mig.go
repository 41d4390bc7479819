package clitree

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/mig"
	"github.com/vgpu-host/vgpu-host/ops"
)

func migCommand() *cli.Command {
	return &cli.Command{
		Name:  "mig",
		Usage: "show and set NVIDIA MIG GPU instances through NVML (docs/mig.md)",
		Description: "MIG splits a GPU (A100, H100, H200, ...) into GPU instances of fixed profiles (1g.10gb, 3g.40gb,\n" +
			"...; named and numbered as nvidia-smi mig -lgip prints them) at fixed memory slices.\n" +
			"vgpu-host talks to NVML through its helper vgpu-host-nvml. plan and apply\n" +
			"bring one GPU to exactly a list of profiles: instances already right are kept, the rest\n" +
			"destroyed or created; a list that cannot fit is refused before any change. Exit codes:\n" +
			"0 ok (or nothing to do), 1 failed, 2 usage, 5 the profiles do not fit (or an instance is in\n" +
			"use), 6 no such GPU or profile, 7 no NVML (no NVIDIA driver) or the GPU has no MIG.",
		Commands: []*cli.Command{migShowCommand(), migPlanCommand(), migApplyCommand()},
	}
}

func migShowCommand() *cli.Command {
	return &cli.Command{
		Name:      "show",
		Usage:     "list NVIDIA GPUs: MIG mode, profiles with their free placements, GPU instances",
		ArgsUsage: "[GPU]",
		Action:    opAction("mig show"),
	}
}

// migShowRequest is mig show's request: its operand, the GPU, if any.
func migShowRequest(f flagValues) ops.MIGShowRequest {
	return ops.MIGShowRequest{GPU: firstOperand(f)}
}

// renderMIGShow prints mig show's GPUs in output format output.
func renderMIGShow(w io.Writer, output string, res *ops.MIGShowResult) error {
	return emitTo(w, output, res, func(w io.Writer) error { return migTable(w, *res) })
}

// MIGGPUView is a GPU as `mig show` prints it (ops.MIGGPUView).
type MIGGPUView = ops.MIGGPUView

// MIGFree is one profile's free capacity (ops.MIGFree).
type MIGFree = ops.MIGFree

// migView is st as `mig show` prints it.
func migView(st mig.State) []MIGGPUView { return ops.MIGView(st) }

func migMode(g mig.GPU) string {
	switch {
	case !g.Capable:
		return "unsupported"
	case g.Enabled != g.Pending:
		return fmt.Sprintf("%s (%s after reset)", onOff(g.Enabled), onOff(g.Pending))
	}
	return onOff(g.Enabled)
}

// virtualizationNote is the line mig show adds under a GPU for its virtualization mode: none for
// "None" (or when NVML does not say); for "Pass-Through" what it means for MIG.
func virtualizationNote(mode string) string {
	switch mode {
	case "", "None":
		return ""
	case "Pass-Through":
		return "virtualization Pass-Through: this system is a VM the GPU is passed through to; where the GPU cannot be reset from inside it, a MIG mode change takes a reboot of the VM"
	}
	return "virtualization " + mode
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func migTable(out io.Writer, gs []MIGGPUView) error {
	if len(gs) == 0 {
		fmt.Fprintln(out, "NVML sees no NVIDIA GPU")
		return nil
	}
	for i, g := range gs {
		if i > 0 {
			fmt.Fprintln(out)
		}
		fmt.Fprintf(out, "GPU %s  #%d %s  MIG %s\n", g.Address, g.Index, g.Name, migMode(g.GPU))
		if note := virtualizationNote(g.Virtualization); note != "" {
			fmt.Fprintf(out, "  %s\n", note)
		}
		if !g.Capable {
			continue
		}
		if err := migGPUTable(out, g); err != nil {
			return err
		}
	}
	return nil
}

// migGPUTable prints one MIG-capable GPU's profiles and instances, as nvidia-smi mig -lgip and
// -lgipp name them: the profile's name and ID, its compute slices ("g") and the memory slices
// one instance occupies, and placements in memory slices ({0,4}:4).
func migGPUTable(out io.Writer, g MIGGPUView) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "  %d compute slices on %d memory slices\n", g.ComputeSlices, g.MemorySlices)
	fmt.Fprintln(w, "  PROFILE\tID\tCOMPUTE SLICES\tMEMORY SLICES\tMEMORY\tMAX\tFITS NOW\tFREE PLACEMENTS")
	for j, p := range g.Profiles {
		f := g.Free[j]
		fmt.Fprintf(w, "  %s\t%d\t%d\t%d\t%d MiB\t%d\t%d\t%s\n", p.Name, p.ID, p.ComputeSlices, p.MemorySlices, p.MemoryMiB, p.Max, f.Fits, dash(placementsText(f.Placements)))
	}
	if len(g.Instances) == 0 {
		fmt.Fprintln(w, "  no GPU instances")
		return w.Flush()
	}
	fmt.Fprintln(w, "  INSTANCE\tPROFILE\tPLACEMENT\tMEMORY SLICES\tCOMPUTE INSTANCES")
	for _, in := range g.Instances {
		fmt.Fprintf(w, "  %d\t%s\t%s\t%s\t%d\n", in.ID, in.Profile, placementsText([]mig.Placement{in.Placement}), in.Placement, in.ComputeInstances)
	}
	return w.Flush()
}

// placementsText writes placements as nvidia-smi mig -lgipp does: the starts, then the size in
// memory slices, "{0,2,4}:2"; placements of different sizes each on their own.
func placementsText(pls []mig.Placement) string {
	var parts []string
	for i := 0; i < len(pls); {
		j, starts := i, []string{}
		for ; j < len(pls) && pls[j].Size == pls[i].Size; j++ {
			starts = append(starts, strconv.Itoa(pls[j].Start))
		}
		parts = append(parts, fmt.Sprintf("{%s}:%d", strings.Join(starts, ","), pls[i].Size))
		i = j
	}
	return strings.Join(parts, " ")
}

func migPlanFlags(apply bool) []cli.Flag {
	fs := []cli.Flag{
		&cli.StringFlag{Name: "gpu", Required: true, Usage: "the GPU: PCI `ADDRESS` (0000:41:00.0), NVML index or UUID"},
		&cli.StringFlag{Name: "profiles", Required: true, Usage: "the GPU instances wanted, comma-separated, each a profile as nvidia-smi mig -lgip names it (3g.40gb, MIG 1g.18gb, 1g.10gb+me) or its profile ID (9); NAME*N for N of one (1g.10gb*7); empty for none"},
		&cli.BoolFlag{Name: "disable-mig", Usage: "with --profiles '': also turn MIG mode off"},
	}
	if apply {
		fs = append(fs, &cli.BoolFlag{Name: "dry-run", Usage: "print the changes in order and change nothing"})
	}
	return fs
}

// migPlanRequest is mig plan's request: --gpu, --profiles (its comma-separated entries, each
// NAME or NAME*COUNT, checked by the operation once NVML answers, as they always were) and
// --disable-mig.
func migPlanRequest(f flagValues) (ops.MIGPlanRequest, error) {
	return ops.MIGPlanRequest{GPU: f.String("gpu"), Profiles: strings.Split(f.String("profiles"), ","), DisableMIG: f.Bool("disable-mig")}, nil
}

// migApplyRequest is mig apply's request: plan's, and --dry-run.
func migApplyRequest(f flagValues) (ops.MIGApplyRequest, error) {
	p, err := migPlanRequest(f)
	return ops.MIGApplyRequest{MIGPlanRequest: p, DryRun: f.Bool("dry-run")}, err
}

func changesTable(w io.Writer, c mig.Changes, verb string) error {
	if c.Empty() {
		fmt.Fprintf(w, "nothing to do: %d GPU instance(s) already as wanted\n", len(c.Kept))
		return nil
	}
	for i, s := range c.Steps {
		fmt.Fprintf(w, "%d. %s%s\n", i+1, verb, s)
	}
	for _, k := range c.Kept {
		fmt.Fprintf(w, "   keep GPU instance %d (%s, slices %s) on %s\n", k.ID, k.Profile, k.Placement, k.GPU)
	}
	return nil
}

func migPlanCommand() *cli.Command {
	return &cli.Command{
		Name:   "plan",
		Usage:  "print the changes that bring a GPU to exactly a list of MIG profiles; change nothing",
		Flags:  migPlanFlags(false),
		Action: opAction("mig plan"),
	}
}

func migApplyCommand() *cli.Command {
	return &cli.Command{
		Name:   "apply",
		Usage:  "bring a GPU to exactly a list of MIG profiles: keep what is right, destroy and create the rest",
		Flags:  migPlanFlags(true),
		Action: opAction("mig apply"),
	}
}

// renderMIGPlan prints mig plan's changes in output format output.
func renderMIGPlan(w io.Writer, output string, res *ops.MIGPlanResult) error {
	return emitTo(w, output, res, func(w io.Writer) error { return changesTable(w, *res, "") })
}

// renderMIGApply prints what mig apply did, or with a dry run would do, in output format output.
func renderMIGApply(w io.Writer, output string, res *ops.MIGApplyResult) error {
	verb := ""
	if res.DryRun {
		verb = "would "
	}
	return emitTo(w, output, &res.Changes, func(w io.Writer) error { return changesTable(w, res.Changes, verb) })
}
