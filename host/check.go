package host

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// Verdict is the outcome of one readiness check.
type Verdict string

// Verdicts, from best to worst.
const (
	VerdictOK   Verdict = "ok"
	VerdictWarn Verdict = "warn"
	VerdictFail Verdict = "fail"
)

// GPU capabilities reported by Check (GPUReadiness.Capabilities).
const (
	CapPassthrough = "passthrough-ready" // group holds only the GPU, its companions and bridges
	CapGroupShared = "group-shared"      // group holds host devices (NIC, storage...) too
	CapBootVGA     = "boot-vga"          // the host console runs on it
	CapMdev        = "mdev-capable"      // mdev parent with types (NVIDIA vGPU <= 16, GVT-g)
	CapSRIOV       = "sriov-capable"     // PF with sriov_totalvfs > 0
	CapVendorVGPU  = "vendor-vgpu"       // VFs with nvidia/creatable_vgpu_types (vGPU 17+)
	CapParavirtual = "paravirtual-only"  // nothing to assign: use virtio-gpu
)

// CheckResult is one line of `vgpu-host check`.
type CheckResult struct {
	Name    string  `json:"name"`
	Verdict Verdict `json:"verdict"`
	Detail  string  `json:"detail"`
	Fix     string  `json:"fix"` // "" when there is nothing to fix
}

// GPUReadiness is the per-GPU line of `vgpu-host check`.
type GPUReadiness struct {
	Address      Address  `json:"address"`
	Name         string   `json:"name"`
	Verdict      Verdict  `json:"verdict"`
	Capabilities []string `json:"capabilities"`
	Detail       string   `json:"detail"`
	Fix          string   `json:"fix"` // "" when there is nothing to fix
	// Assignable is true when this GPU (or a vGPU of it) can be given to a VM now or after
	// `vgpu-host bind`/`vf`/`mdev` alone, without reboots or hardware changes.
	Assignable bool `json:"assignable"`
}

// Readiness is the report of `vgpu-host check`.
type Readiness struct {
	Root   string         `json:"host_root"`
	Checks []CheckResult  `json:"checks"`
	GPUs   []GPUReadiness `json:"gpus"`
	// VirtualMdev lists virtual display mdev parents (mbochs, mdpy) with free instances.
	VirtualMdev []string `json:"virtual_mdev"`
	// Assignable is true when at least one GPU or vGPU can be given to a VM; `check` exits 3
	// (ErrNotReady) when it is false. virtio-gpu alone does not count.
	Assignable bool `json:"assignable"`
	// Warnings are the inventory's (Inventory.Warnings); [] when none.
	Warnings []string `json:"warnings"`
}

// virtualDisplayMdev reports whether parent driver is one of the kernel's sample mdev drivers
// that present a display device.
func virtualDisplayMdev(driver string) bool { return driver == "mbochs" || driver == "mdpy" }

// Check scans the host under root and judges it: CPU virtualization, /dev/kvm, IOMMU, kernel
// command line, interrupt remapping, vfio, render nodes, and a verdict per GPU.
func Check(root Root) (*Readiness, error) {
	inv, err := Scan(root)
	if err != nil {
		return nil, err
	}
	return CheckInventory(root, inv), nil
}

// CheckInventory judges a host from an inventory already scanned from root.
func CheckInventory(root Root, inv *Inventory) *Readiness {
	r := &Readiness{Root: root.Dir(), Checks: []CheckResult{}, GPUs: []GPUReadiness{}, VirtualMdev: []string{}, Warnings: inv.Warnings}
	if r.Warnings == nil {
		r.Warnings = []string{}
	}
	cpu := readCPUFacts(root)
	cmdline, vendor, flags, vm := cpu.cmdline, cpu.vendor, cpu.flags, cpu.vm
	if vm {
		r.Checks = append(r.Checks, CheckResult{Name: "virtual-machine", Verdict: VerdictOK,
			Detail: "this host is a virtual machine (the hypervisor flag in " + root.Proc("cpuinfo") + "): its own guests get GPUs through nested virtualization and a virtual IOMMU, which the hypervisor running it must give it"})
	}
	r.Checks = append(r.Checks,
		checkCPU(root, cpu.readable, flags, vendor, vm),
		checkKVM(root, vendor, vm, len(flags) == 0 || flags["vmx"] || flags["svm"]),
		checkIOMMU(root, cmdline, vendor, vm),
		checkCmdline(root, cmdline, vendor, inv.IOMMU),
		checkInterruptRemapping(root, vm),
		checkVFIO(root),
		checkRenderNode(root),
	)
	groups := map[int]Group{}
	for _, g := range inv.Groups {
		groups[g.ID] = g
	}
	byAddr := map[Address]*Device{}
	for i := range inv.Devices {
		byAddr[inv.Devices[i].Address] = &inv.Devices[i]
	}
	quarantined := map[Address]Quarantine{}
	qs, err := Quarantines(root)
	if err != nil {
		r.Warnings = append(r.Warnings, err.Error())
	}
	for _, q := range qs {
		quarantined[q.Address] = q
	}
	for _, d := range inv.Devices {
		if !d.IsGPU || d.PhysFn != nil {
			continue // VFs are judged through their PF
		}
		g := judgeGPU(d, inv.IOMMU, groups, byAddr)
		judgeQuarantine(&g, d, groups, quarantined)
		r.Assignable = r.Assignable || g.Assignable
		r.GPUs = append(r.GPUs, g)
	}
	for _, p := range inv.MdevParents {
		if p.Address != nil || !virtualDisplayMdev(p.Parent) {
			continue
		}
		for _, t := range p.Types {
			if t.AvailableInstances > 0 {
				r.VirtualMdev = append(r.VirtualMdev, p.Parent)
				r.Assignable = true
				break
			}
		}
	}
	return r
}

// judgeQuarantine fails a GPU that has, or whose IOMMU group has, a quarantined function:
// plan, apply and bind refuse it until release-quarantine finds it healthy.
func judgeQuarantine(g *GPUReadiness, d Device, groups map[int]Group, quarantined map[Address]Quarantine) {
	if len(quarantined) == 0 {
		return
	}
	addrs := []Address{d.Address}
	for _, m := range groups[d.IOMMUGroup].Members {
		if m.Address != d.Address {
			addrs = append(addrs, m.Address)
		}
	}
	for _, a := range addrs {
		q, ok := quarantined[a]
		if !ok {
			continue
		}
		g.Verdict, g.Assignable = VerdictFail, false
		g.Detail = fmt.Sprintf("%s is quarantined since %s: %s; %s", a, q.Since.UTC().Format(time.RFC3339), q.Reason(), g.Detail)
		g.Fix = fmt.Sprintf("fix the device (docs/health.md), then run vgpu-host host release-quarantine %s", a)
		return
	}
}

// judgeGPU decides what GPU d can be given as (passthrough, vGPU, SR-IOV) and, for each way
// it cannot, the reason and the fix. It is long (94 lines) because each capability is a short
// run of rules in the order check prints them; split, the rules would lose their order.
func judgeGPU(d Device, iommu bool, groups map[int]Group, byAddr map[Address]*Device) GPUReadiness {
	g := GPUReadiness{Address: d.Address, Name: d.Title(), Verdict: VerdictOK, Capabilities: []string{}}
	var details, fixes []string
	grp, hasGroup := groups[d.IOMMUGroup]
	var hostDevs []string
	for _, m := range grp.Members {
		if m.Address == d.Address || m.IsBridge {
			continue
		}
		if o, ok := byAddr[m.Address]; ok && (o.IsGPU || isCompanionClass(o.Class)) {
			continue
		}
		desc := m.Address.String() + " (class " + m.Class
		if m.Driver != "" {
			desc += ", " + m.Driver
		}
		hostDevs = append(hostDevs, desc+")")
	}
	switch {
	case !iommu || !hasGroup:
		details = append(details, "no IOMMU group: cannot be passed through")
		fixes = append(fixes, "enable the IOMMU (see the iommu check)")
	case len(hostDevs) > 0:
		g.Capabilities = append(g.Capabilities, CapGroupShared)
		details = append(details, fmt.Sprintf("IOMMU group %d also holds host devices %s", grp.ID, strings.Join(hostDevs, ", ")))
		fixes = append(fixes, "give the whole group to the VM, or move the card to a slot with its own group (pcie_acs_override only hides the problem)")
	case d.BootVGA:
		details = append(details, fmt.Sprintf("IOMMU group %d is clean", grp.ID))
	default:
		g.Capabilities = append(g.Capabilities, CapPassthrough)
		g.Assignable = true
		if grp.Viable {
			details = append(details, fmt.Sprintf("IOMMU group %d is viable now (every endpoint on vfio-pci or driverless)", grp.ID))
		} else {
			details = append(details, fmt.Sprintf("IOMMU group %d: `vgpu-host bind %s` moves %d function(s) to vfio-pci", grp.ID, d.Address, len(grp.Members)))
		}
	}
	if d.BootVGA {
		g.Capabilities = append(g.Capabilities, CapBootVGA)
		details = append(details, "boot VGA: the host console uses it")
		fixes = append(fixes, "keep it for the host, or pass it through with --force after moving the console (video=efifb:off) to another GPU")
	}
	if d.Mdev != nil {
		free := d.Mdev.Capacity()
		g.Capabilities = append(g.Capabilities, CapMdev)
		details = append(details, fmt.Sprintf("%d mdev types, up to %d instances of one type available", len(d.Mdev.Types), free))
		if free > 0 {
			g.Assignable = true
		}
	}
	if d.SRIOV != nil && d.SRIOV.TotalVFs > 0 {
		g.Capabilities = append(g.Capabilities, CapSRIOV)
		details = append(details, fmt.Sprintf("SR-IOV %d/%d VFs", d.SRIOV.NumVFs, d.SRIOV.TotalVFs))
		creatable, used := 0, 0
		for _, vf := range d.SRIOV.VFs {
			if v, ok := byAddr[vf]; ok && v.VendorVGPU != nil {
				if v.VendorVGPU.CurrentType != 0 {
					used++
				} else if len(v.VendorVGPU.Creatable) > 0 {
					creatable++
				}
			}
		}
		if creatable+used > 0 {
			g.Capabilities = append(g.Capabilities, CapVendorVGPU)
			details = append(details, fmt.Sprintf("vendor vGPU: %d VFs free, %d in use", creatable, used))
			if creatable > 0 && iommu {
				g.Assignable = true
			}
		}
		if d.SRIOV.NumVFs == 0 {
			fixes = append(fixes, fmt.Sprintf("enable VFs with `vgpu-host vf enable %s --count %d` (sriov_totalvfs; fewer is fine)", d.Address, d.SRIOV.TotalVFs))
		}
	}
	if len(g.Capabilities) == 0 {
		g.Capabilities = append(g.Capabilities, CapParavirtual)
	}
	switch {
	case g.Assignable && d.BootVGA:
		g.Verdict = VerdictWarn
	case g.Assignable:
	case len(g.Capabilities) == 1 && g.Capabilities[0] == CapParavirtual:
		g.Verdict = VerdictFail
		fixes = append(fixes, "use virtio-gpu (virgl) for this VM")
	default:
		g.Verdict = VerdictWarn
	}
	g.Detail = strings.Join(details, "; ")
	g.Fix = strings.Join(fixes, "; ")
	return g
}

// CPU vendors, from /proc/cpuinfo's vendor_id: the fixes differ (kvm_intel/kvm_amd, VT-d/AMD-Vi,
// intel_iommu=on vs AMD's IOMMU being on by default).
const (
	vendorIntel = "intel"
	vendorAMD   = "amd" // also Hygon, whose CPUs use kvm_amd and the AMD IOMMU driver
)

// cpuVendorOf returns vendorIntel, vendorAMD or "" (unknown) from /proc/cpuinfo.
//
//	vendor_id	: AuthenticAMD
func cpuVendorOf(cpuinfo string) string {
	switch cpuinfoField(cpuinfo, "vendor_id") {
	case "GenuineIntel":
		return vendorIntel
	case "AuthenticAMD", "HygonGenuine":
		return vendorAMD
	}
	return ""
}

// cpuinfoField returns the value of the first "key : value" line of /proc/cpuinfo named key
// (the first CPU's), trimmed; "" when there is none.
func cpuinfoField(cpuinfo, key string) string {
	for _, line := range strings.Split(cpuinfo, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// byVendor picks the Intel or AMD wording, or both for an unknown CPU.
func byVendor(vendor, intel, amd string) string {
	switch vendor {
	case vendorIntel:
		return intel
	case vendorAMD:
		return amd
	}
	return intel + " (Intel) or " + amd + " (AMD)"
}

// cpuFlags are the first CPU's flags in /proc/cpuinfo ("vmx", "svm", "hypervisor", ...).
func cpuFlags(cpuinfo string) map[string]bool {
	flags := map[string]bool{}
	for _, f := range strings.Fields(cpuinfoField(cpuinfo, "flags")) {
		flags[f] = true
	}
	return flags
}

// In a virtual machine (vm: the hypervisor flag) the firmware fixes do not apply: what the
// checks below lack there, the hypervisor running the VM gives it (nested virtualization, a
// virtual IOMMU with interrupt remapping), or, on a cloud, an instance type that has them. The
// real H200 and H100 hosts in ../shared/fixtures and testdata are such VMs.

// nestedFix is how a VM gets VT-x or AMD-V for its own guests.
func nestedFix(vendor string) string {
	return "this host is a virtual machine: turn on nested virtualization for it in the hypervisor that runs it (KVM there: the " +
		byVendor(vendor, "kvm_intel", "kvm_amd") + " module option nested=1 and a host-passthrough CPU model; a cloud: an instance type with nested virtualization, or bare metal)"
}

// checkCPU judges the CPU flags (cpuFlags) of a /proc/cpuinfo that was read (readable).
func checkCPU(root Root, readable bool, flags map[string]bool, vendor string, vm bool) CheckResult {
	c := CheckResult{Name: "cpu-virtualization"}
	if !readable {
		c.Verdict, c.Detail = VerdictFail, "cannot read "+root.Proc("cpuinfo")
		c.Fix = "check that " + root.Proc("cpuinfo") + " is readable (procfs mounted)"
		return c
	}
	for _, f := range []string{"vmx", "svm"} {
		if flags[f] {
			c.Verdict, c.Detail = VerdictOK, "CPU has "+f
			return c
		}
	}
	c.Verdict, c.Detail = VerdictFail, "no vmx or svm flag in "+root.Proc("cpuinfo")
	c.Fix = "enable " + byVendor(vendor, "Intel VT-x", "AMD-V (SVM)") + " in the firmware setup"
	if vm {
		c.Fix = nestedFix(vendor)
	}
	return c
}

// checkKVM judges /dev/kvm. cpuVirt says /proc/cpuinfo shows VT-x or AMD-V (or could not be
// read); vm that the host is a virtual machine. The real H200 host (a VM) had a /dev/kvm but no
// vmx flag: the node alone does not say KVM can run guests.
func checkKVM(root Root, vendor string, vm, cpuVirt bool) CheckResult {
	c := CheckResult{Name: "kvm"}
	if KVMPresent(root) {
		c.Verdict, c.Detail = VerdictOK, root.Dev("kvm")+" present"
		if !cpuVirt {
			c.Verdict = VerdictWarn
			c.Detail += ", but the CPU shows no " + byVendor(vendor, "VT-x (vmx)", "AMD-V (svm)") + ": KVM may not be able to run guests"
			c.Fix = "see cpu-virtualization"
		}
		return c
	}
	c.Verdict, c.Detail = VerdictFail, root.Dev("kvm")+" missing"
	c.Fix = "modprobe " + byVendor(vendor, "kvm_intel", "kvm_amd") + " and enable " +
		byVendor(vendor, "VT-x", "AMD-V (SVM)") + " in the firmware; libvirt would fall back to slow TCG"
	if vm && !cpuVirt {
		c.Fix = "modprobe " + byVendor(vendor, "kvm_intel", "kvm_amd") + " once this virtual machine has " +
			byVendor(vendor, "VT-x", "AMD-V (SVM)") + " (see cpu-virtualization); libvirt would fall back to slow TCG"
	}
	return c
}

// KVMPresent reports whether the host has /dev/kvm (ROOT/dev/kvm, resolved inside the root).
func KVMPresent(root Root) bool { return root.Exists(root.Dev("kvm")) }

// HasKVM is KVMPresent of the root the inventory was read from (false when it cannot be
// opened).
func (inv *Inventory) HasKVM() bool {
	root, err := NewRoot(inv.Root)
	return err == nil && KVMPresent(root)
}

func checkIOMMU(root Root, cmdline, vendor string, vm bool) CheckResult {
	c := CheckResult{Name: "iommu"}
	units, _ := root.ReadDir(root.Sys("class", "iommu"))
	groups, _ := root.ReadDir(root.Sys("kernel", "iommu_groups"))
	if len(units) > 0 && len(groups) > 0 {
		c.Verdict, c.Detail = VerdictOK, fmt.Sprintf("%d IOMMU unit(s), %d groups", len(units), len(groups))
		return c
	}
	c.Verdict = VerdictFail
	c.Detail = fmt.Sprintf("%d IOMMU units in %s, %d groups in %s", len(units), root.Sys("class", "iommu"), len(groups), root.Sys("kernel", "iommu_groups"))
	c.Fix = iommuFix(cmdline, vendor, vm)
	return c
}

// iommuFix is how to get an IOMMU on a host whose kernel found none: the firmware and the
// kernel command line on bare metal, by CPU vendor (vendorIntel, vendorAMD, "" for unknown)
// and what cmdline already asks; the hypervisor's virtual IOMMU in a VM (vm). check's iommu
// fix and bind's refusal (IOMMUFix) both say it.
func iommuFix(cmdline, vendor string, vm bool) string {
	if vm {
		return "this host is a virtual machine: the hypervisor that runs it must give it a virtual IOMMU (libvirt: <iommu model='intel'><driver intremap='on' caching_mode='on'/></iommu> on a q35 machine, with <ioapic driver='qemu'/>; QEMU: -machine q35,kernel-irqchip=split -device intel-iommu,intremap=on,caching-mode=on), and it must boot with intel_iommu=on iommu=pt; a cloud VM without one cannot pass devices to its own guests: use a bare-metal instance"
	}
	args := cmdlineArgs(cmdline)
	switch {
	case vendor == vendorAMD:
		fix := "enable the IOMMU (\"IOMMU\" or \"AMD-Vi\") in the firmware setup; Linux turns it on by default on AMD"
		if args["amd_iommu"]["off"] || args["iommu"]["off"] {
			fix += "; remove amd_iommu=off / iommu=off from the kernel command line"
		}
		return fix
	case args["intel_iommu"]["on"]:
		return "the kernel was booted with intel_iommu=on but found no DMAR unit: enable VT-d in the firmware setup"
	}
	return "enable " + byVendor(vendor, "VT-d", "AMD-Vi") + " in the firmware and boot with " +
		byVendor(vendor, "intel_iommu=on", "the IOMMU on (the default)") + " iommu=pt (GRUB_CMDLINE_LINUX in /etc/default/grub, then update-grub)"
}

// cpuFacts is what check judges and the fixes for a host depend on, from its /proc/cpuinfo
// (the first CPU's) and /proc/cmdline.
type cpuFacts struct {
	// readable: /proc/cpuinfo could be read (and was not empty).
	readable bool
	// vendor is vendorIntel, vendorAMD or "" (unknown, or unreadable: both vendors' wording).
	vendor string
	// flags are the CPU flags; vm is the hypervisor flag: this host is a virtual machine.
	flags map[string]bool
	vm    bool
	// cmdline is the kernel command line, "" when unreadable.
	cmdline string
}

// readCPUFacts reads root's /proc/cpuinfo and /proc/cmdline; what cannot be read is empty.
func readCPUFacts(root Root) cpuFacts {
	cpuinfo, _ := root.ReadHostFile(root.Proc("cpuinfo"), 0)
	cmdline, _ := root.readString(root.Proc("cmdline"))
	flags := cpuFlags(string(cpuinfo))
	return cpuFacts{readable: len(cpuinfo) > 0, vendor: cpuVendorOf(string(cpuinfo)), flags: flags, vm: flags["hypervisor"], cmdline: cmdline}
}

// IOMMUFix is how to get an IOMMU on the host at root, as check's iommu check words it: what
// bind and every other refusal for want of an IOMMU tell the user to do. It reads /proc/cpuinfo
// and /proc/cmdline; call it only to word an error.
func IOMMUFix(root Root) string {
	c := readCPUFacts(root)
	return iommuFix(c.cmdline, c.vendor, c.vm)
}

// cmdlineArgs splits a kernel command line into name -> set of comma-separated values:
// "intel_iommu=on,sm_on iommu=pt" gives {intel_iommu: {on, sm_on}, iommu: {pt}}.
func cmdlineArgs(cmdline string) map[string]map[string]bool {
	args := map[string]map[string]bool{}
	for _, f := range strings.Fields(cmdline) {
		k, v, _ := strings.Cut(f, "=")
		if args[k] == nil {
			args[k] = map[string]bool{}
		}
		for _, x := range strings.Split(v, ",") {
			args[k][x] = true
		}
	}
	return args
}

// checkCmdline judges the IOMMU arguments of the kernel command line. Intel IOMMUs need
// intel_iommu=on unless the kernel turns them on by default (CONFIG_INTEL_IOMMU_DEFAULT_ON,
// seen as groups without the argument); AMD's is on by default and has no "on" value
// (amd_iommu= takes off, fullflush, force_isolation...), so only amd_iommu=off is wrong there.
func checkCmdline(root Root, cmdline, vendor string, iommuActive bool) CheckResult {
	c := CheckResult{Name: "kernel-cmdline", Verdict: VerdictOK}
	if cmdline == "" {
		c.Verdict, c.Detail = VerdictWarn, "cannot read "+root.Proc("cmdline")
		c.Fix = "check that " + root.Proc("cmdline") + " is readable (procfs mounted)"
		return c
	}
	args := cmdlineArgs(cmdline)
	var notes, fixes []string
	switch {
	case args["iommu"]["off"]:
		c.Verdict = VerdictFail
		notes = append(notes, "iommu=off disables the IOMMU")
		fixes = append(fixes, "remove iommu=off from the kernel command line")
	case vendor != vendorAMD && args["intel_iommu"]["off"]:
		c.Verdict = VerdictFail
		notes = append(notes, "intel_iommu=off disables the IOMMU")
		fixes = append(fixes, "replace intel_iommu=off with intel_iommu=on")
	case vendor == vendorAMD && args["amd_iommu"]["off"]:
		c.Verdict = VerdictFail
		notes = append(notes, "amd_iommu=off disables the IOMMU")
		fixes = append(fixes, "remove amd_iommu=off (the AMD IOMMU is on by default)")
	case args["intel_iommu"]["on"]:
		notes = append(notes, "intel_iommu=on")
	case vendor == vendorAMD:
		notes = append(notes, "AMD IOMMU is on by default")
	case iommuActive:
		notes = append(notes, "no intel_iommu=on, but the IOMMU is active (kernel default)")
	default:
		c.Verdict = VerdictWarn
		notes = append(notes, "no intel_iommu=on")
		fix := "add intel_iommu=on to the kernel command line"
		if vendor == "" {
			fix += " (Intel; an AMD IOMMU is on by default)"
		}
		fixes = append(fixes, fix)
	}
	if args["iommu"]["pt"] {
		notes = append(notes, "iommu=pt")
	} else {
		c.Verdict = worse(c.Verdict, VerdictWarn)
		notes = append(notes, "no iommu=pt")
		fixes = append(fixes, "add iommu=pt so host devices skip IOMMU translation")
	}
	if _, ok := args["pcie_acs_override"]; ok {
		c.Verdict = worse(c.Verdict, VerdictWarn)
		notes = append(notes, "pcie_acs_override is set: groups no longer reflect real isolation")
		fixes = append(fixes, "remove pcie_acs_override; it lets a guest reach host devices by peer-to-peer DMA")
	}
	c.Detail, c.Fix = strings.Join(notes, "; "), strings.Join(fixes, "; ")
	return c
}

// checkInterruptRemapping judges InterruptRemapping's answer.
func checkInterruptRemapping(root Root, vm bool) CheckResult {
	c := CheckResult{Name: "interrupt-remapping"}
	if r := InterruptRemapping(root); r.On {
		c.Verdict, c.Detail = VerdictOK, r.Detail
		return c
	}
	c.Verdict, c.Detail = VerdictWarn, "no interrupt remapping found"
	c.Fix = interruptRemappingFix(vm) + "; without it vfio needs allow_unsafe_interrupts=1"
	return c
}

// interruptRemappingFix is how to turn interrupt remapping on: in the firmware on bare metal, in
// the virtual IOMMU in a VM (vm). check's interrupt-remapping fix and bind's refusal
// (InterruptRemappingFix) both say it.
func interruptRemappingFix(vm bool) string {
	if vm {
		return "this host is a virtual machine: its virtual IOMMU must remap interrupts (QEMU's intel-iommu intremap=on, which needs a split irqchip: libvirt <ioapic driver='qemu'/>)"
	}
	return "enable interrupt remapping (x2APIC/VT-d IR) in the firmware, and do not boot with intremap=off"
}

// InterruptRemappingFix is interruptRemappingFix for the host at root (it reads /proc/cpuinfo;
// call it only to word a refusal).
func InterruptRemappingFix(root Root) string {
	return interruptRemappingFix(readCPUFacts(root).vm)
}

func checkVFIO(root Root) CheckResult {
	c := CheckResult{Name: "vfio"}
	mod, drv := root.Exists(root.Sys("module", "vfio_pci")), root.Exists(root.PCIDriver(VFIODriver))
	if mod || drv {
		c.Verdict, c.Detail = VerdictOK, "vfio-pci loaded"
		return c
	}
	c.Verdict, c.Detail = VerdictWarn, "vfio-pci is not loaded ("+root.PCIDriver(VFIODriver)+" missing)"
	c.Fix = "modprobe vfio-pci and list it in /etc/modules-load.d/vfio.conf (vgpu-host bind loads it on demand)"
	return c
}

func checkRenderNode(root Root) CheckResult {
	c := CheckResult{Name: "render-node"}
	nodes := root.glob(root.Dev("dri"), "renderD*")
	if len(nodes) > 0 {
		c.Verdict, c.Detail = VerdictOK, fmt.Sprintf("%d render node(s) for virgl: %s", len(nodes), filepath.Base(nodes[0]))
		return c
	}
	c.Verdict, c.Detail = VerdictWarn, "no "+root.Dev("dri", "renderD*")+": virtio-gpu works without 3D only"
	c.Fix = "load a DRM driver for a host GPU (i915, amdgpu, nouveau/nvidia with nvidia-drm) to get virgl 3D"
	return c
}

func worse(a, b Verdict) Verdict {
	rank := map[Verdict]int{VerdictOK: 0, VerdictWarn: 1, VerdictFail: 2}
	if rank[b] > rank[a] {
		return b
	}
	return a
}
