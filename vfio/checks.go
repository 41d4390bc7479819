package vfio

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/vgpu-host/vgpu-host/host"
)

// Check names, as they appear in Refusal.Check and in the JSON output.
const (
	CheckBootVGA      = "boot-vga"
	CheckHostCritical = "host-critical"
	CheckHeld         = "held-open"
	CheckIntRemap     = "interrupt-remapping"
	CheckNotInLedger  = "not-in-ledger"
	CheckOwner        = "owner"
)

// Refusal is one safety check that refused an operation; --force (Force in the options)
// turns it into a warning.
type Refusal struct {
	Address *host.Address `json:"address,omitempty"`
	Check   string        `json:"check"`
	Reason  string        `json:"reason"`
	// Holders are the processes that hold the device open (CheckHeld).
	Holders []Holder `json:"holders,omitempty"`
}

func (r Refusal) String() string {
	if r.Address != nil {
		return fmt.Sprintf("%s: %s", r.Address, r.Reason)
	}
	return r.Reason
}

// Holder is a process with an open file descriptor on a device node.
type Holder struct {
	PID  int    `json:"pid"`
	Comm string `json:"comm"`
	Path string `json:"path"`
}

func (h Holder) String() string { return fmt.Sprintf("pid %d (%s) has %s open", h.PID, h.Comm, h.Path) }

// refusalError turns refusals into one error: host.ErrBusy when processes hold the devices and
// nothing else refused (exit 5), host.ErrRefused otherwise (exit 4).
func refusalError(op string, rs []Refusal) error {
	var b strings.Builder
	busyOnly := true
	for _, r := range rs {
		fmt.Fprintf(&b, "\n  - [%s] %s", r.Check, r)
		if r.Check != CheckHeld {
			busyOnly = false
		}
	}
	if busyOnly {
		return fmt.Errorf("%s: %w:%s\n  (stop those processes, or re-run with --force to try anyway; the unbind then waits up to --timeout)", op, host.ErrBusy, b.String())
	}
	return fmt.Errorf("%s: %w:%s\n  (re-run with --force if you mean it; docs/vfio.md explains each check)", op, host.ErrRefused, b.String())
}

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

// bindRefusals runs the safety checks for moving members of g to vfio-pci.
func bindRefusals(root host.Root, g *Group, moves []Member) []Refusal {
	var rs []Refusal
	mounts := mountedBlockDevices(root)
	routes := routedInterfaces(root)
	for _, m := range moves {
		a := m.Address
		if m.BootVGA {
			rs = append(rs, Refusal{Address: &a, Check: CheckBootVGA, Reason: fmt.Sprintf(
				"is the boot VGA (%s = 1): the firmware and the host console draw on it, and taking it away blanks the console (and can hang the host on some cards)",
				hostPath(root, root.PCIDevice(a, "boot_vga")))})
		}
		if what := hostCriticalClass(m.Class); what != "" {
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
		if hs := Holders(root, deviceNodes(root, m, -1)); len(hs) > 0 {
			rs = append(rs, heldRefusal(a, hs))
		}
	}
	return rs
}

func heldRefusal(a host.Address, hs []Holder) Refusal {
	var parts []string
	for _, h := range hs {
		parts = append(parts, h.String())
	}
	return Refusal{Address: &a, Check: CheckHeld, Holders: hs, Reason: "is held open, so unbinding it would block until they let go: " + strings.Join(parts, "; ")}
}

// interruptRemapping checks that the IOMMU remaps interrupts, without which a guest can forge
// MSIs that reach the host. It returns nil when remapping is on (or cannot be judged), a
// refusal when it is off, and a warning string when the admin has opted into unsafe
// interrupts.
func interruptRemapping(root host.Root) (*Refusal, string) {
	b, err := os.ReadFile(root.Proc("interrupts"))
	if err != nil {
		return nil, ""
	}
	// With remapping on the kernel names the irq chips IR-IO-APIC, IR-PCI-MSI, ...
	if strings.Contains(string(b), "IR-") {
		return nil, ""
	}
	param := root.Sys("module", "vfio_iommu_type1", "parameters", "allow_unsafe_interrupts")
	if v, err := host.ReadString(param); err == nil && (v == "Y" || v == "1") {
		return nil, fmt.Sprintf("interrupt remapping is off and %s = Y: the guest can inject interrupts into the host (insecure, set by the admin)", hostPath(root, param))
	}
	return &Refusal{Check: CheckIntRemap, Reason: fmt.Sprintf(
		"interrupt remapping is not enabled (no IR- irq chips in %s): a guest with this device could forge interrupts that reach the host; enable VT-d/AMD-Vi interrupt remapping in the firmware (and do not boot with intremap=off); the insecure way out is the vfio_iommu_type1 module option allow_unsafe_interrupts=1, which vgpu-host never sets for you",
		hostPath(root, root.Proc("interrupts")))}, ""
}

// deviceNodes returns the host paths (as /proc/PID/fd links show them) of the device nodes
// through which processes use m: its DRM card/render nodes, /dev/nvidia* for the nvidia
// driver, and /dev/vfio/GROUP when group >= 0. A trailing "*" matches a prefix.
func deviceNodes(root host.Root, m Member, group int) []string {
	var out []string
	if ents, err := os.ReadDir(root.PCIDevice(m.Address, "drm")); err == nil {
		for _, e := range ents {
			n := e.Name()
			if strings.HasPrefix(n, "card") || strings.HasPrefix(n, "renderD") {
				out = append(out, hostPath(root, root.Dev("dri", n)))
			}
		}
	}
	if m.Driver == "nvidia" {
		out = append(out, hostPath(root, root.Dev("nvidia"))+"*")
	}
	if group >= 0 {
		out = append(out, hostPath(root, VFIODev(root, group)))
	}
	return out
}

// Holders scans ROOT/proc/*/fd for descriptors open on any of paths (host paths; a trailing
// "*" matches a prefix) and returns the processes, sorted by pid. Unreadable processes (other
// users' without root) are skipped.
func Holders(root host.Root, paths []string) []Holder {
	if len(paths) == 0 {
		return nil
	}
	ents, err := os.ReadDir(root.Proc())
	if err != nil {
		return nil
	}
	var out []Holder
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		fds, err := os.ReadDir(root.Proc(e.Name(), "fd"))
		if err != nil {
			continue
		}
		seen := map[string]bool{}
		for _, fd := range fds {
			t, err := os.Readlink(root.Proc(e.Name(), "fd", fd.Name()))
			if err != nil || seen[t] || !matchAny(t, paths) {
				continue
			}
			seen[t] = true
			comm, _ := host.ReadString(root.Proc(e.Name(), "comm"))
			out = append(out, Holder{PID: pid, Comm: comm, Path: t})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out
}

func matchAny(t string, paths []string) bool {
	for _, p := range paths {
		if pre, ok := strings.CutSuffix(p, "*"); ok {
			if strings.HasPrefix(t, pre) {
				return true
			}
		} else if t == p {
			return true
		}
	}
	return false
}

// linkedUnder returns the PCI function a sysfs link lies under (e.g. /sys/class/block/vda1 ->
// ../../devices/pci0000:00/0000:00:1e.0/virtio2/block/vda/vda1 lies under 0000:00:1e.0).
func linkedUnder(p string) (host.Address, bool) {
	t, err := os.Readlink(p)
	if err != nil {
		return host.Address{}, false
	}
	// The deepest PCI address in the path is the function that owns it.
	var found host.Address
	ok := false
	for _, el := range strings.Split(filepath.ToSlash(t), "/") {
		if a, err := host.ParseAddress(el); err == nil && strings.Count(el, ":") == 2 {
			found, ok = a, true
		}
	}
	return found, ok
}

// mountedBlockDevices maps PCI functions to the mounted block devices they carry, from
// ROOT/proc/mounts and ROOT/sys/class/block/NAME links (device-mapper volumes are followed
// through their slaves).
func mountedBlockDevices(root host.Root) map[host.Address][]string {
	out := map[host.Address][]string{}
	f, err := os.Open(root.Proc("mounts"))
	if err != nil {
		return out
	}
	defer f.Close()
	devPrefix := hostPath(root, root.Dev()) + "/"
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 2 || !strings.HasPrefix(fields[0], devPrefix) {
			continue
		}
		name := filepath.Base(fields[0])
		if t, err := os.Readlink(root.Path(fields[0])); err == nil { // /dev/mapper/x -> ../dm-0
			name = filepath.Base(t)
		}
		names := []string{name}
		if slaves, err := os.ReadDir(root.Sys("class", "block", name, "slaves")); err == nil {
			for _, sl := range slaves {
				names = append(names, sl.Name())
			}
		}
		for _, n := range names {
			if a, ok := linkedUnder(root.Sys("class", "block", n)); ok {
				out[a] = append(out[a], fmt.Sprintf("%s (mounted on %s)", fields[0], fields[1]))
			}
		}
	}
	return out
}

// routedInterfaces maps PCI functions to their network interfaces that have a route in
// ROOT/proc/net/route or ROOT/proc/net/ipv6_route.
func routedInterfaces(root host.Root) map[host.Address][]string {
	ifs := map[string]bool{}
	if b, err := os.ReadFile(root.Proc("net", "route")); err == nil {
		for i, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); i > 0 && len(f) > 0 {
				ifs[f[0]] = true
			}
		}
	}
	if b, err := os.ReadFile(root.Proc("net", "ipv6_route")); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 10 && f[len(f)-1] != "lo" {
				ifs[f[len(f)-1]] = true
			}
		}
	}
	out := map[host.Address][]string{}
	names := make([]string, 0, len(ifs))
	for n := range ifs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if a, ok := linkedUnder(root.Sys("class", "net", n)); ok {
			out[a] = append(out[a], n)
		}
	}
	return out
}
