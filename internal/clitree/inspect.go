package clitree

import (
	"fmt"
	"io"
	"runtime/debug"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/ops"
)

func inspectCommand() *cli.Command {
	return &cli.Command{
		Name:      "inspect",
		Usage:     "show the host's GPUs, IOMMU groups, SR-IOV, mdev and vendor vGPU types (JSON: docs/inspect.md)",
		ArgsUsage: "[ADDR|UUID]",
		Description: "Without ADDR, the whole inventory. With ADDR (e.g. 0000:01:00.0), one PCI function and its\n" +
			"IOMMU group, read even when it is not a GPU. With the UUID of an mdev instance, that instance\n" +
			"(parent, type, driver) and its own IOMMU group.",
		Flags: []cli.Flag{&cli.BoolFlag{Name: "mig", Usage: "ask NVML for the MIG section now (starts the NVML helper: ~30 ms on a real host); " +
			"without it the section comes from the MIG state cache the agent and MIG commands keep, with its age, when there is one"}},
		Action: opAction("inspect"),
	}
}

// The reports inspect prints (package ops reads them).
type (
	deviceReport = ops.DeviceReport
	mdevReport   = ops.MdevReport
)

// inspectRequest is inspect's request: at most one address or mdev UUID, --mig.
func inspectRequest(f flagValues) (ops.InventoryRequest, error) {
	req := ops.InventoryRequest{MIG: f.Bool("mig")}
	switch args := f.Operands(); len(args) {
	case 0:
	case 1:
		req.Target = args[0]
	default:
		return req, usageErr("inspect takes at most one address, got %d arguments", len(args))
	}
	return req, nil
}

// inspectGC tunes the collector for a whole inventory in a one-shot process: its heap is a
// few MB that all stay live until the output is written, and collecting at 4 MB cost about a
// tenth of the 64-GPU host's CPU time, for nothing. Never in the agent, which lives on.
func inspectGC() { debug.SetGCPercent(400) }

// renderInventory prints inspect's result as the invocation's --output asks.
func renderInventory(o opOutput, res *ops.InventoryResult) error {
	switch {
	case res.Device != nil:
		return o.emit(res.Device, func(w io.Writer) error { return deviceTable(w, *res.Device) })
	case res.Mdev != nil:
		return o.emit(res.Mdev, func(w io.Writer) error { return mdevTable(w, *res.Mdev) })
	}
	rep := res.Inventory
	inv := rep.Inventory
	return o.emit(rep, func(w io.Writer) error {
		if err := inventoryTable(w, inv, nvmlNames(rep.MIG)); err != nil {
			return err
		}
		if len(rep.Quarantined) > 0 {
			fmt.Fprintf(w, "\nquarantined:\n")
			for _, l := range quarantineLines(o.root) {
				fmt.Fprintf(w, "  %s\n", l)
			}
		}
		return migInventoryTable(w, rep.MIG)
	})
}

func mdevTable(out io.Writer, r mdevReport) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	m := r.Mdev
	fmt.Fprintf(w, "uuid\t%s\n", m.UUID)
	parent := m.Parent
	if m.ParentAddress == nil {
		parent += " (virtual)"
	}
	fmt.Fprintf(w, "parent\t%s\n", parent)
	typ := m.Type
	if m.TypeName != "" && m.TypeName != m.Type {
		typ += " (" + m.TypeName + ")"
	}
	fmt.Fprintf(w, "type\t%s\n", typ)
	fmt.Fprintf(w, "device api\t%s\n", dash(m.DeviceAPI))
	fmt.Fprintf(w, "driver\t%s\n", dash(m.Driver))
	if g := r.Group; g != nil {
		var members []string
		for _, x := range g.Mdevs {
			members = append(members, fmt.Sprintf("%s (mdev %s/%s, %s)", x.UUID, x.Parent, x.Type, dash(x.Driver)))
		}
		for _, x := range g.Members {
			members = append(members, fmt.Sprintf("%s (%s, %s)", x.Address, x.Class, dash(x.Driver)))
		}
		fmt.Fprintf(w, "iommu group\t%d: %s\n", g.ID, strings.Join(members, ", "))
		viable := "yes"
		if !g.Viable {
			var b []string
			for _, x := range g.Blockers {
				b = append(b, x.Address.String()+" "+x.Driver)
			}
			viable = "no: " + strings.Join(b, ", ")
		}
		fmt.Fprintf(w, "vfio viable\t%s\n", viable)
	} else {
		fmt.Fprintf(w, "iommu group\tnone (no vfio registration: is its mdev driver bound?)\n")
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if len(r.Warnings) > 0 {
		fmt.Fprintf(out, "\nwarnings:\n  %s\n", strings.Join(r.Warnings, "\n  "))
	}
	return nil
}

// inventoryTable prints inspect's table: GPUs, groups, mdev parents and warnings, one section
// after the other (99 lines of Fprintf; each section reads top to bottom like the output).
// nvml names GPUs by address for the DEVICE cells pci.ids leaves without a device name.
func inventoryTable(out io.Writer, inv *host.Inventory, nvml map[string]string) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	iommu := "off"
	if inv.IOMMU {
		iommu = "on"
	}
	fmt.Fprintf(w, "host root %s, IOMMU %s, %d GPU(s)\n\n", inv.Root, iommu, countGPUs(inv))
	groups := map[int]host.Group{}
	for _, g := range inv.Groups {
		groups[g.ID] = g
	}
	if len(inv.Devices) == 0 {
		fmt.Fprintf(w, "no display-class PCI function (class 03xxxx) under %s: VMs here get paravirtual virtio-gpu\n", inv.Root)
	} else {
		fmt.Fprintln(w, "ADDRESS\tID\tCLASS\tDEVICE\tDRIVER\tGROUP\tNUMA\tVFIO-VIABLE\tBARS")
	}
	for _, d := range inv.Devices {
		fmt.Fprintf(w, "%s\t%s:%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", d.Address, d.VendorID, d.DeviceID, d.Class[:4], deviceName(d, nvml),
			dash(d.Driver), groupCell(d.IOMMUGroup), numaCell(d.NUMANode), viableCell(d, groups), barSummary(d.BARs))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	var notes []string
	for _, d := range inv.Devices {
		var bits []string
		if d.BootVGA {
			bits = append(bits, "boot VGA")
		}
		if len(d.Companions) > 0 {
			bits = append(bits, "companions "+joinAddrs(d.Companions))
		}
		if d.SRIOV != nil {
			bits = append(bits, fmt.Sprintf("SR-IOV %d/%d VFs %s", d.SRIOV.NumVFs, d.SRIOV.TotalVFs, joinAddrs(d.SRIOV.VFs)))
		}
		if d.PhysFn != nil {
			bits = append(bits, "VF of "+d.PhysFn.String())
		}
		if v := d.VendorVGPU; v != nil {
			var types []string
			for _, t := range v.Creatable {
				types = append(types, fmt.Sprintf("%d %s", t.ID, t.Name))
			}
			bits = append(bits, fmt.Sprintf("vendor vGPU current %d, creatable [%s]", v.CurrentType, strings.Join(types, ", ")))
		}
		if len(d.ResetMethods) > 0 && d.IsGPU {
			bits = append(bits, "reset "+strings.Join(d.ResetMethods, ","))
		}
		if d.DriverOverride != "" {
			bits = append(bits, "driver_override "+d.DriverOverride)
		}
		if len(bits) > 0 {
			notes = append(notes, fmt.Sprintf("  %s: %s", d.Address, strings.Join(bits, "; ")))
		}
	}
	if len(notes) > 0 {
		fmt.Fprintf(out, "\n%s\n", strings.Join(notes, "\n"))
	}
	var blocked []string
	for _, g := range inv.Groups {
		for _, b := range g.Blockers {
			blocked = append(blocked, fmt.Sprintf("  group %d: %s (%s): %s", g.ID, b.Address, dash(b.Driver), b.Reason))
		}
	}
	if len(blocked) > 0 {
		fmt.Fprintf(out, "\nvfio blockers:\n%s\n", strings.Join(blocked, "\n"))
	}
	if len(inv.MdevParents) > 0 {
		// An instance's own IOMMU group (the /dev/vfio/N its VM opens), from the groups listing it.
		mdevGroup := map[string]int{}
		for _, g := range inv.Groups {
			for _, m := range g.Mdevs {
				mdevGroup[m.UUID] = g.ID
			}
		}
		fmt.Fprintln(out, "\nmdev parents:")
		w = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "  PARENT\tTYPE\tNAME\tAPI\tAVAILABLE\tINSTANCES (GROUP)")
		for _, p := range inv.MdevParents {
			for _, t := range p.Types {
				inst := make([]string, len(t.Instances))
				for i, u := range t.Instances {
					inst[i] = u
					if g, ok := mdevGroup[u]; ok {
						inst[i] = fmt.Sprintf("%s (%d)", u, g)
					}
				}
				fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%d\t%s\n", p.Parent, t.ID, dash(t.Name), t.DeviceAPI, t.AvailableInstances, dash(strings.Join(inst, ", ")))
			}
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	if len(inv.Warnings) > 0 {
		fmt.Fprintf(out, "\nwarnings:\n  %s\n", strings.Join(inv.Warnings, "\n  "))
	}
	return nil
}

func deviceTable(out io.Writer, r deviceReport) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	d := r.Device
	fmt.Fprintf(w, "address\t%s\n", d.Address)
	fmt.Fprintf(w, "device\t%s:%s %s\n", d.VendorID, d.DeviceID, deviceName(d, nvmlNames(r.MIG)))
	if d.SubsysVendorID != "" {
		fmt.Fprintf(w, "subsystem\t%s\n", strings.TrimSpace(d.SubsysVendorID+":"+d.SubsysDeviceID+" "+d.SubsystemName))
	}
	fmt.Fprintf(w, "class\t%s\n", strings.TrimSpace(d.Class+" "+d.ClassName)) // no trailing blank without pci.ids
	fmt.Fprintf(w, "driver\t%s\n", dash(d.Driver))
	fmt.Fprintf(w, "numa node\t%s (cpus %s)\n", numaCell(d.NUMANode), dash(d.LocalCPUs))
	fmt.Fprintf(w, "bars\t%s\n", barSummary(d.BARs))
	if d.SRIOV != nil {
		fmt.Fprintf(w, "sr-iov\t%d/%d VFs %s\n", d.SRIOV.NumVFs, d.SRIOV.TotalVFs, joinAddrs(d.SRIOV.VFs))
	}
	if d.PhysFn != nil {
		fmt.Fprintf(w, "physfn\t%s\n", d.PhysFn)
	}
	if v := d.VendorVGPU; v != nil {
		fmt.Fprintf(w, "vendor vgpu\tcurrent %d, %d creatable type(s)\n", v.CurrentType, len(v.Creatable))
	}
	if r.Group != nil {
		var members []string
		for _, m := range r.Group.Members {
			members = append(members, fmt.Sprintf("%s (%s, %s)", m.Address, m.Class, dash(m.Driver)))
		}
		fmt.Fprintf(w, "iommu group\t%d: %s\n", r.Group.ID, strings.Join(members, ", "))
		fmt.Fprintf(w, "vfio viable\t%s\n", viableCell(d, map[int]host.Group{r.Group.ID: *r.Group}))
	} else {
		fmt.Fprintf(w, "iommu group\tnone\n")
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if len(r.Warnings) > 0 {
		fmt.Fprintf(out, "\nwarnings:\n  %s\n", strings.Join(r.Warnings, "\n  "))
	}
	return migInventoryTable(out, r.MIG)
}

func countGPUs(inv *host.Inventory) int {
	n := 0
	for _, d := range inv.Devices {
		if d.IsGPU && d.PhysFn == nil {
			n++
		}
	}
	return n
}

// deviceName is a DEVICE cell: pci.ids' names (host.Device.Title); for a GPU pci.ids does not
// list, the product name NVML gave it (nvml, by address: "NVIDIA H200" where Debian 12's pci.ids
// has no 10de:2335) or else lspci's "Device 2335"; without pci.ids at all, the class name (the
// ID column has the IDs), "-" when that is unknown too.
func deviceName(d host.Device, nvml map[string]string) string {
	s := d.TitleWith(nvml[d.Address.String()])
	if d.DeviceName == "" && nvml[d.Address.String()] == "" && d.VendorName == "" {
		s = dash(d.ClassName)
	}
	if len(s) > 48 {
		s = s[:47] + "…"
	}
	return s
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func groupCell(g int) string {
	if g < 0 {
		return "-"
	}
	return fmt.Sprint(g)
}

func numaCell(n int) string {
	if n < 0 {
		return "-"
	}
	return fmt.Sprint(n)
}

func viableCell(d host.Device, groups map[int]host.Group) string {
	g, ok := groups[d.IOMMUGroup]
	if !ok {
		return "no (no IOMMU group)"
	}
	if g.Viable {
		return "yes"
	}
	var b []string
	for _, x := range g.Blockers {
		b = append(b, x.Address.String()+" "+x.Driver)
	}
	return "no: " + strings.Join(b, ", ")
}

func joinAddrs(as []host.Address) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}

// barSummary prints memory BARs as "1:64G/64p": index, size, 64-bit, prefetchable; I/O BARs as "5:io".
func barSummary(bars []host.BAR) string {
	if len(bars) == 0 {
		return "-"
	}
	var s []string
	for _, b := range bars {
		if b.IO {
			s = append(s, fmt.Sprintf("%d:io", b.Index))
			continue
		}
		f := ""
		if b.Is64 {
			f += "64"
		}
		if b.Prefetch {
			f += "p"
		}
		if f != "" {
			f = "/" + f
		}
		s = append(s, fmt.Sprintf("%d:%s%s", b.Index, humanSize(b.Size), f))
	}
	return strings.Join(s, " ")
}

func humanSize(n uint64) string {
	for _, u := range []struct {
		shift uint
		unit  string
	}{{40, "T"}, {30, "G"}, {20, "M"}, {10, "K"}} {
		if n >= 1<<u.shift && n%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d%s", n>>u.shift, u.unit)
		}
	}
	return fmt.Sprint(n)
}
