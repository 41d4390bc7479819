package clitree

import (
	"context"
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

// handBack is ops.HandBack for the invocation: its --reset, and its quarantine lines on stderr.
func handBack(ctx context.Context, cmd *cli.Command, root host.Root, w host.Writer, rel []host.Released, op string) []host.HandbackResult {
	return ops.HandBack(ctx, opsEnv(cmd, root, ""), w, rel, op, cmd.Bool("reset"))
}

// healthEntry is one line of `host health`: the last check and the quarantine of a function.
type healthEntry struct {
	Address    host.Address       `json:"address"`
	Last       *host.DeviceHealth `json:"last,omitempty"`
	Quarantine *host.Quarantine   `json:"quarantine,omitempty"`
	// Resets counts the resets vgpu-host made, by method.
	Resets map[string]int `json:"resets,omitempty"`
	// Xid counts the NVIDIA Xid errors NVML reported for the GPU, by Xid number; XidPending
	// are the fatal ones not yet cleared by a reset or a reboot.
	Xid        map[string]uint64 `json:"xid,omitempty"`
	XidPending []host.XidEvent   `json:"xid_pending,omitempty"`
}

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
		Action: runHealth,
	}
}

func runHealth(_ context.Context, cmd *cli.Command) error {
	root, err := rootOf(cmd)
	if err != nil {
		return err
	}
	if _, err := outputOf(cmd); err != nil {
		return err
	}
	if cmd.Args().Len() > 1 {
		return usageErr("health takes at most one PCI address")
	}
	entries := []healthEntry{}
	if cmd.Args().Len() == 1 {
		a, err := host.ParseAddress(cmd.Args().First())
		if err != nil {
			return usageErr("%v", err)
		}
		h := host.CheckDevice(root, a, host.CheckOptions{})
		q, err := host.LoadQuarantine(root, a)
		if err != nil {
			return err
		}
		e := healthEntry{Address: a, Last: &h, Quarantine: q}
		if st, err := host.LoadHealthState(root, a); err == nil && st != nil {
			e.Resets, e.Xid, e.XidPending = st.Resets, st.Xid, st.XidPending
		}
		entries = append(entries, e)
	} else {
		if entries, err = healthEntries(root); err != nil {
			return err
		}
	}
	return emit(cmd, entries, func(w io.Writer) error { return healthTable(w, entries) })
}

// healthEntries joins the health files and the quarantine records, by address.
func healthEntries(root host.Root) ([]healthEntry, error) {
	states, err := host.HealthStates(root)
	if err != nil {
		return nil, err
	}
	qs, err := host.Quarantines(root)
	if err != nil {
		return nil, err
	}
	byAddr := map[host.Address]*healthEntry{}
	var order []host.Address
	get := func(a host.Address) *healthEntry {
		if e, ok := byAddr[a]; ok {
			return e
		}
		byAddr[a] = &healthEntry{Address: a}
		order = append(order, a)
		return byAddr[a]
	}
	for _, st := range states {
		e := get(st.Address)
		e.Last, e.Resets, e.Xid, e.XidPending = st.Last, st.Resets, st.Xid, st.XidPending
	}
	for _, q := range qs {
		get(q.Address).Quarantine = &q
	}
	out := []healthEntry{}
	for _, a := range sortedAddrs(order) {
		out = append(out, *byAddr[a])
	}
	return out, nil
}

func sortedAddrs(as []host.Address) []host.Address {
	out := slices.Clone(as)
	slices.SortFunc(out, func(x, y host.Address) int { return strings.Compare(x.String(), y.String()) })
	return out
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
		Action: runReleaseQuarantine,
	}
}

func runReleaseQuarantine(_ context.Context, cmd *cli.Command) error {
	root, err := rootOf(cmd)
	if err != nil {
		return err
	}
	if _, err := outputOf(cmd); err != nil {
		return err
	}
	if cmd.Args().Len() != 1 {
		return usageErr("release-quarantine takes one PCI address")
	}
	a, err := host.ParseAddress(cmd.Args().First())
	if err != nil {
		return usageErr("%v", err)
	}
	q, err := host.LoadQuarantine(root, a)
	if err != nil {
		return err
	}
	h, err := host.ReleaseQuarantine(root, a, time.Now().UTC())
	if err != nil {
		return err
	}
	res := map[string]any{"address": a, "released": q != nil, "health": h}
	return emit(cmd, res, func(w io.Writer) error {
		if q == nil {
			fmt.Fprintf(w, "%s was not quarantined; it checks healthy\n", a)
			return nil
		}
		fmt.Fprintf(w, "%s checks healthy: quarantine released (it was: %s)\n", a, q.Reason())
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
