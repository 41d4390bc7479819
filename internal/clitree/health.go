package clitree

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/ops"
)

// resetFlag is --reset of the commands that hand devices back (destroy, unbind, mdev remove,
// vf disable).
func resetFlag() cli.Flag {
	return &cli.BoolFlag{Name: "reset", Usage: "reset every released device (each method reset_method lists, in the kernel's order) and check it again, even when it checks healthy (docs/health.md)"}
}

// healthEntry is one line of `host health` (ops.HealthEntry).
type healthEntry = ops.HealthEntry

func healthCommand() *cli.Command {
	return &cli.Command{
		Name:      "health",
		Usage:     "show every device's last health check and quarantine; with ADDR, check that device now (docs/health.md)",
		ArgsUsage: "[ADDR]",
		Description: "Without ADDR: the last check of every device vgpu-host has checked (when it took it, when\n" +
			"destroy, unbind, mdev remove or vf disable handed it back, and the agent's watch within\n" +
			"seconds of a change), the NVIDIA Xid errors NVML reported for each GPU (XID: NUMBERxCOUNT),\n" +
			"and every quarantine record.\n" +
			"With ADDR: check the device now (config space, BARs, capability list, driver, AER counters,\n" +
			"link width) against its baseline; nothing is written.",
		Action: opAction("host health"),
	}
}

// healthRequest is host health's request: at most one operand, the device to check now.
func healthRequest(f flagValues) (ops.HealthRequest, error) {
	switch o := f.Operands(); {
	case len(o) > 1:
		return ops.HealthRequest{}, usageErr("health takes at most one PCI address")
	case len(o) == 1 && o[0] == "":
		// An empty address is none (the request's empty address lists every device).
		_, err := host.ParseAddress("")
		return ops.HealthRequest{}, usageErr("%v", err)
	}
	return ops.HealthRequest{Address: firstOperand(f)}, nil
}

// renderHealth prints host health's result in output format output.
func renderHealth(w io.Writer, output string, res *ops.HealthResult) error {
	return emitTo(w, output, res, func(w io.Writer) error { return healthTable(w, *res) })
}

func healthTable(out io.Writer, entries []healthEntry) error {
	if len(entries) == 0 {
		fmt.Fprintln(out, "no device checked yet: vgpu-host checks a device when it binds it and when it hands it back")
		return nil
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ADDRESS\tHEALTH\tCHECKED\tDRIVER\tAER C/NF/F\tLINK\tXID\tQUARANTINED\tREASON")
	for _, e := range entries {
		health, checked, driver, aer, link, reason := "-", "-", "-", "-", "-", ""
		if h := e.Last; h != nil {
			health = map[bool]string{true: "ok", false: "FAILED"}[h.Healthy]
			checked = h.CheckedAt.UTC().Format(time.RFC3339)
			driver = dash(h.Driver)
			if h.AER != nil {
				aer = fmt.Sprintf("%d/%d/%d", h.AER.Correctable, h.AER.NonFatal, h.AER.Fatal)
			}
			if h.Link.Width > 0 {
				link = fmt.Sprintf("x%d/x%d %s", h.Link.Width, h.Link.MaxWidth, strings.TrimSuffix(h.Link.Speed, " PCIe"))
			}
			reason = h.Reason()
			if h.Healthy && len(h.Warnings) > 0 {
				reason = "warning: " + h.Warnings[0].String()
			}
		}
		xid := "-"
		if len(e.Xid) > 0 {
			var xs []string
			for x, n := range e.Xid {
				xs = append(xs, fmt.Sprintf("%sx%d", x, n))
			}
			slices.SortFunc(xs, func(a, b string) int { return cmpXid(a) - cmpXid(b) })
			xid = strings.Join(xs, ",")
		}
		quar := "no"
		if q := e.Quarantine; q != nil {
			quar = "since " + q.Since.UTC().Format(time.RFC3339)
			if e.Last == nil || e.Last.Healthy {
				reason = q.Reason()
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Address, health, checked, driver, aer, link, xid, quar, reason)
	}
	return w.Flush()
}

// cmpXid is the Xid number of a "79x2" cell, for sorting.
func cmpXid(s string) int {
	n, _ := strconv.Atoi(strings.SplitN(s, "x", 2)[0])
	return n
}

func releaseQuarantineCommand() *cli.Command {
	return &cli.Command{
		Name:      "release-quarantine",
		Usage:     "check a quarantined device again and, when it is healthy, let plan, apply, bind and layout use it (docs/health.md)",
		ArgsUsage: "ADDR",
		Description: "The device is checked as a handback checks it. Healthy: its quarantine record is removed and\n" +
			"the check recorded (exit 0). Still failing: the record stays and the reasons are printed (exit 4).",
		Action: opAction("host release-quarantine"),
	}
}

// releaseQuarantineRequest is host release-quarantine's request: its one operand, the device.
func releaseQuarantineRequest(f flagValues) (ops.ReleaseQuarantineRequest, error) {
	if len(f.Operands()) != 1 {
		return ops.ReleaseQuarantineRequest{}, usageErr("release-quarantine takes one PCI address")
	}
	a, err := host.ParseAddress(f.Operands()[0])
	if err != nil {
		return ops.ReleaseQuarantineRequest{}, usageErr("%v", err)
	}
	return ops.ReleaseQuarantineRequest{Address: a}, nil
}

// renderReleaseQuarantine prints what host release-quarantine did in output format output.
func renderReleaseQuarantine(w io.Writer, output string, res *ops.ReleaseQuarantineResult) error {
	return emitTo(w, output, res, func(w io.Writer) error {
		if res.Was == nil {
			fmt.Fprintf(w, "%s was not quarantined; it checks healthy\n", res.Address)
			return nil
		}
		fmt.Fprintf(w, "%s checks healthy: quarantine released (it was: %s)\n", res.Address, res.Was.Reason())
		return nil
	})
}

// quarantineLines are the quarantine records in words, for check, status and inspect.
func quarantineLines(root host.Root) []string {
	qs, err := host.Quarantines(root)
	var out []string
	if err != nil {
		out = append(out, fmt.Sprintf("quarantine records cannot be read: %v", err))
	}
	for _, q := range qs {
		out = append(out, fmt.Sprintf("%s is quarantined since %s: %s (vgpu-host host release-quarantine %s after fixing it; docs/health.md)",
			q.Address, q.Since.UTC().Format(time.RFC3339), q.Reason(), q.Address))
	}
	return out
}
