package vfio

import (
	"fmt"
	"slices"
	"strings"

	"github.com/vgpu-host/vgpu-host/host"
)

// Check names, as they appear in Refusal.Check and in the JSON output.
const (
	CheckBootVGA      = "boot-vga"
	CheckHostCritical = "host-critical"
	CheckHeld         = "held"
	CheckIntRemap     = "interrupt-remapping"
	CheckNotInLedger  = "not-in-ledger"
	CheckOwner        = "owner"
	// CheckMMIO64 is plan's: the guest firmware's 64-bit MMIO window will not hold the
	// domain's 64-bit BARs (domains.PredictMMIO), so the guest would not map a device.
	CheckMMIO64 = "mmio64"
	// CheckQuarantined refuses a function with a quarantine record (host.Quarantine): it failed
	// its health check when it was handed back. No --force passes it; `vgpu-host host
	// release-quarantine ADDR` lifts it after a clean check.
	CheckQuarantined = "quarantined"
)

// ForceableChecks are the checks apply's --force=CHECK may name, each overriding its own
// refusals only.
var ForceableChecks = []string{CheckBootVGA, CheckHostCritical, CheckHeld, CheckIntRemap, CheckMMIO64}

// Refusal is one safety check that refused an operation; --force (Force in the options)
// turns it into a warning.
type Refusal struct {
	Address *host.Address `json:"address,omitempty"`
	Check   string        `json:"check"`
	Reason  string        `json:"reason"`
	// Holders are the processes that hold the device open (CheckHeld).
	Holders []host.Holder `json:"holders,omitempty"`
}

func (r Refusal) String() string {
	if r.Address != nil {
		return fmt.Sprintf("%s: %s", r.Address, r.Reason)
	}
	return r.Reason
}

// RefusalError turns refusals into one error (what bind, unbind and apply return): host.ErrBusy when processes hold the devices and
// nothing else refused (exit 5), host.ErrRefused otherwise (exit 4).
func RefusalError(op string, rs []Refusal) error {
	var b strings.Builder
	busyOnly := true
	var names []string
	for _, r := range rs {
		if !slices.Contains(names, r.Check) {
			names = append(names, r.Check)
		}
		fmt.Fprintf(&b, "\n  - [%s] %s", r.Check, r)
		if r.Check != CheckHeld {
			busyOnly = false
		}
	}
	if busyOnly {
		return fmt.Errorf("%s: %w:%s\n  (stop those processes, or re-run with --force (bind) or --force=held (apply) to try anyway; the unbind then waits up to --timeout)", op, host.ErrBusy, b.String())
	}
	if i := slices.Index(names, CheckQuarantined); i >= 0 {
		names = slices.Delete(names, i, i+1)
		if len(names) == 0 {
			return fmt.Errorf("%s: %w:%s\n  (no --force passes a quarantine: fix the device, then run vgpu-host host release-quarantine ADDR; docs/health.md)", op, host.ErrQuarantined, b.String())
		}
		return fmt.Errorf("%s: %w:%s\n  (no --force passes a quarantine: fix the device, then run vgpu-host host release-quarantine ADDR (docs/health.md); the others pass with --force (bind) or --force=%s (apply))", op, host.ErrQuarantined, b.String(), strings.Join(names, ","))
	}
	return fmt.Errorf("%s: %w:%s\n  (re-run with --force (bind) or --force=%s (apply) if you mean it; docs/vfio.md explains each check)", op, host.ErrRefused, b.String(), strings.Join(names, ","))
}

// quarantineRefusals refuses every endpoint of g that has a quarantine record, whether it
// would move or is on vfio-pci already: the one place bind, plan, apply and layout learn of it.
func quarantineRefusals(root host.Root, g *host.Group) []Refusal {
	var rs []Refusal
	for _, m := range g.Members {
		if m.IsBridge {
			continue
		}
		if r := quarantineRefusal(root, m.Address); r != nil {
			rs = append(rs, *r)
		}
	}
	return rs
}

// quarantineRefusal is a's refusal when it has a quarantine record (or one that cannot be
// read: the safe answer), nil otherwise.
func quarantineRefusal(root host.Root, a host.Address) *Refusal {
	q, err := host.LoadQuarantine(root, a)
	switch {
	case err != nil:
		return &Refusal{Address: &a, Check: CheckQuarantined, Reason: fmt.Sprintf("has a quarantine record that cannot be read (%v): repair or remove it after checking the device (vgpu-host host health %s)", err, a)}
	case q != nil:
		return &Refusal{Address: &a, Check: CheckQuarantined, Reason: q.Refusal()}
	}
	return nil
}

// RefuseQuarantined refuses op when one of addrs has a quarantine record (docs/health.md):
// the same error bind gives (host.ErrRefused and host.ErrQuarantined, exit 4), naming the
// record and the fix; nil when none has. mdev create (the parent, a vendor-VFIO VF) and vf
// enable (the PF) call it before they change anything; bind, plan, apply and layout meet the
// same refusal in their preflight. No --force passes it.
func RefuseQuarantined(root host.Root, op string, addrs ...host.Address) error {
	var rs []Refusal
	for _, a := range addrs {
		if r := quarantineRefusal(root, a); r != nil {
			rs = append(rs, *r)
		}
	}
	if len(rs) == 0 {
		return nil
	}
	return RefusalError(op, rs)
}

// Quarantined reports whether a has a quarantine record (or one that cannot be read): a
// chooser (a free vendor-VFIO VF) passes over it.
func Quarantined(root host.Root, a host.Address) bool { return quarantineRefusal(root, a) != nil }

// hostCriticalClass names the device classes the host usually cannot live without.
func hostCriticalClass(class uint32) string {
	switch {
	case class>>16 == 0x01:
		return "a storage controller (class 01xx)"
	case class>>16 == 0x02:
		return "a network controller (class 02xx)"
	case class>>8 == 0x0c03:
		return "a USB host controller (class 0c03)"
	}
	return ""
}

// hostChecks are the facts about the whole host that a bind's checks need, read once for all
// the functions it moves: mounted block devices and routed interfaces by function, the
// processes holding each function's device nodes open, and interrupt remapping's refusal or
// warning (interruptRemapping).
type hostChecks struct {
	mounts          map[host.Address][]string
	routes          map[host.Address][]string
	holders         map[host.Address][]host.Holder
	intRemap        *Refusal
	intRemapWarning string
}

// readHostChecks reads the host facts for moves (by group): mounts, routes, interrupt
// remapping, and, from held (the processes holding any device's nodes: one search of every
// process's open files, the longest of these reads, which runs in its own goroutine meanwhile),
// each moving function's holders.
func readHostChecks(root host.Root, moves map[int][]host.GroupMember, held func() []host.Holder) hostChecks {
	nodes := map[host.Address][]string{}
	for _, ms := range moves {
		for _, m := range ms {
			nodes[m.Address] = host.DeviceNodes(root, m.Address, m.Driver, -1)
		}
	}
	hc := hostChecks{mounts: host.MountedBlockDevices(root), routes: host.RoutedInterfaces(root), holders: map[host.Address][]host.Holder{}}
	hc.intRemap, hc.intRemapWarning = interruptRemapping(root)
	for _, h := range held() {
		for a, n := range nodes {
			if host.MatchesAny(h.Path, n) {
				hc.holders[a] = append(hc.holders[a], h)
			}
		}
	}
	return hc
}

// bindRefusals runs the safety checks for moving members of g to vfio-pci, on the host facts
// hc read for the whole call.
func bindRefusals(root host.Root, g *host.Group, moves []host.GroupMember, hc hostChecks) []Refusal {
	var rs []Refusal
	mounts, routes := hc.mounts, hc.routes
	for _, m := range moves {
		a := m.Address
		if m.BootVGA {
			rs = append(rs, Refusal{Address: &a, Check: CheckBootVGA, Reason: fmt.Sprintf(
				"is the boot VGA (%s = 1): the firmware and the host console draw on it, and taking it away blanks the console (and can hang the host on some cards)",
				host.HostPath(root, root.PCIDevice(a, "boot_vga")))})
		}
		if what := hostCriticalClass(m.ClassCode()); what != "" {
			rs = append(rs, Refusal{Address: &a, Check: CheckHostCritical, Reason: fmt.Sprintf(
				"is %s in IOMMU group %d: moving it to vfio-pci takes it away from the host (disks, network or keyboard may go); the group cannot be split, so move the GPU to a slot with its own group or accept losing this device",
				what, g.ID)})
		}
		for _, d := range mounts[a] {
			rs = append(rs, Refusal{Address: &a, Check: CheckHostCritical, Reason: fmt.Sprintf("carries %s (see /proc/mounts): unmount it first, or the host loses that file system", d)})
		}
		for _, ifc := range routes[a] {
			rs = append(rs, Refusal{Address: &a, Check: CheckHostCritical, Reason: fmt.Sprintf("is network interface %s, which has an active route (see ip route): the host loses that network; take the interface down first (ip link set %s down)", ifc, ifc)})
		}
		if hs := hc.holders[a]; len(hs) > 0 {
			rs = append(rs, heldRefusal(a, hs))
		}
	}
	return rs
}

func heldRefusal(a host.Address, hs []host.Holder) Refusal {
	reason := "is held open, so unbinding it would block until they let go: " + host.DescribeHolders(hs)
	return Refusal{Address: &a, Check: CheckHeld, Holders: hs, Reason: reason}
}

// interruptRemapping judges host.InterruptRemapping for a bind: nil when remapping is on (or
// cannot be judged), a refusal when it is off, and a warning string when the admin has opted
// into unsafe interrupts.
func interruptRemapping(root host.Root) (*Refusal, string) {
	ir := host.InterruptRemapping(root)
	if ir.On || ir.Unknown {
		return nil, ""
	}
	if ir.Unsafe {
		return nil, fmt.Sprintf("interrupt remapping is off and %s = Y: the guest can inject interrupts into the host (insecure, set by the admin)", ir.UnsafeParam)
	}
	return &Refusal{Check: CheckIntRemap, Reason: fmt.Sprintf(
		"interrupt remapping is not enabled (no IR- irq chips in %s): a guest with this device could forge interrupts that reach the host; %s; the insecure way out is the vfio_iommu_type1 module option allow_unsafe_interrupts=1, which vgpu-host never sets for you",
		ir.Interrupts, host.InterruptRemappingFix(root))}, ""
}
