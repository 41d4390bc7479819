package host

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Who uses a device, as the host shows it: processes holding its device nodes open (from
// /proc/PID/fd), file systems mounted from it, network routes through it, and whether the
// IOMMU remaps interrupts. The binder turns these facts into refusals; this file only reads.

// Holder is a process with an open file descriptor on a device node.
type Holder struct {
	PID  int    `json:"pid"`
	Comm string `json:"comm"`
	Path string `json:"path"`
}

func (h Holder) String() string { return fmt.Sprintf("pid %d (%s) has %s open", h.PID, h.Comm, h.Path) }

// DeviceNodes returns the host paths (as /proc/PID/fd links show them) of the device nodes
// through which processes use function a bound to driver:
//
//   - its DRM card and render nodes (ROOT/sys/bus/pci/devices/ADDR/drm/{cardN,renderDN});
//   - its framebuffers (.../graphics/fbN → /dev/fbN);
//   - its ALSA card's nodes (.../sound/cardN → /dev/snd/controlCN, pcmCND*, hwCND*): the HDMI
//     audio function of a GPU, whose unbind blocks in the kernel while any of them is open;
//   - /dev/nvidia* for the nvidia driver;
//   - /dev/vfio/GROUP when group >= 0.
//
// A trailing "*" matches a prefix (see Holders).
func DeviceNodes(root Root, a Address, driver string, group int) []string {
	var out []string
	dev := func(name string) string { return HostPath(root, root.Dev(name)) }
	if ents, err := os.ReadDir(root.PCIDevice(a, "drm")); err == nil {
		for _, e := range ents {
			n := e.Name()
			if strings.HasPrefix(n, "card") || strings.HasPrefix(n, "renderD") {
				out = append(out, HostPath(root, root.Dev("dri", n)))
			}
		}
	}
	if ents, err := os.ReadDir(root.PCIDevice(a, "graphics")); err == nil {
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), "fb") {
				out = append(out, dev(e.Name()))
			}
		}
	}
	if ents, err := os.ReadDir(root.PCIDevice(a, "sound")); err == nil {
		for _, e := range ents {
			n, ok := strings.CutPrefix(e.Name(), "card")
			if _, err := strconv.Atoi(n); !ok || err != nil {
				continue
			}
			snd := HostPath(root, root.Dev("snd"))
			out = append(out, snd+"/controlC"+n, snd+"/pcmC"+n+"D*", snd+"/hwC"+n+"D*")
		}
	}
	if driver == "nvidia" {
		out = append(out, dev("nvidia")+"*")
	}
	if group >= 0 {
		out = append(out, HostPath(root, VFIODev(root, group)))
	}
	return out
}

// Holders scans ROOT/proc/*/fd for descriptors open on any of paths (host paths; a trailing
// "*" matches a prefix) and returns the processes, sorted by pid. Unreadable processes (other
// users' without root) are skipped.
func Holders(root Root, paths []string) []Holder {
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
			comm, _ := readAttr(root.Proc(e.Name(), "comm"))
			out = append(out, Holder{PID: pid, Comm: comm, Path: t})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out
}

// ProcessName returns the command name of process pid (ROOT/proc/PID/comm), "" when it
// cannot be read.
func ProcessName(root Root, pid int) string {
	c, _ := readAttr(root.Proc(strconv.Itoa(pid), "comm"))
	return c
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
func linkedUnder(p string) (Address, bool) {
	t, err := os.Readlink(p)
	if err != nil {
		return Address{}, false
	}
	// The deepest PCI address in the path is the function that owns it.
	var found Address
	ok := false
	for _, el := range strings.Split(filepath.ToSlash(t), "/") {
		if a, err := ParseAddress(el); err == nil && strings.Count(el, ":") == 2 {
			found, ok = a, true
		}
	}
	return found, ok
}

// MountedBlockDevices maps PCI functions to the mounted block devices they carry, from
// ROOT/proc/mounts and ROOT/sys/class/block/NAME links (device-mapper volumes are followed
// through their slaves): "/dev/vda1 (mounted on /)".
func MountedBlockDevices(root Root) map[Address][]string {
	out := map[Address][]string{}
	f, err := os.Open(root.Proc("mounts"))
	if err != nil {
		return out
	}
	defer f.Close()
	devPrefix := HostPath(root, root.Dev()) + "/"
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

// RoutedInterfaces maps PCI functions to their network interfaces that have a route in
// ROOT/proc/net/route or ROOT/proc/net/ipv6_route.
func RoutedInterfaces(root Root) map[Address][]string {
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
	out := map[Address][]string{}
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

// IntRemap is the host's answer to "does the IOMMU remap interrupts?", without which a guest
// with an assigned device can forge MSIs that reach the host.
type IntRemap struct {
	// On is true when remapping was found; Detail says where ("dmar0 ecap f00f4a has IR",
	// "IR- interrupt chips in /proc/interrupts", "AMD-Vi ivhd0").
	On     bool
	Detail string
	// Unsafe is true when it is off but the admin set vfio_iommu_type1's
	// allow_unsafe_interrupts (at UnsafeParam, a host path).
	Unsafe      bool
	UnsafeParam string
	// Interrupts is /proc/interrupts as the host names it, for messages.
	Interrupts string
	// Unknown is true when /proc/interrupts could not be read and no IOMMU unit said yes.
	Unknown bool
}

// InterruptRemapping tells whether the kernel remaps interrupts. What the kernel uses decides:
// "IR-" interrupt chips in /proc/interrupts. Only when that file cannot be read does the
// hardware's word count: the Intel IOMMU's extended capability register (bit 3, IR), or an AMD
// IOMMU (AMD-Vi remaps when enabled).
//
//	$ grep -m1 IR- /proc/interrupts                     $ cat /sys/class/iommu/dmar0/intel-iommu/ecap
//	0:  100  0  IR-IO-APIC  2-edge  timer               f00f4a   (0xa = 1010b: bit 3 set)
func InterruptRemapping(root Root) IntRemap {
	r := IntRemap{Interrupts: HostPath(root, root.Proc("interrupts"))}
	param := root.Sys("module", "vfio_iommu_type1", "parameters", "allow_unsafe_interrupts")
	r.UnsafeParam = HostPath(root, param)
	if v, err := readAttr(param); err == nil && (v == "Y" || v == "1") {
		r.Unsafe = true
	}
	// The hardware's word: an IOMMU unit that remaps (named in the detail either way).
	hw := ""
	units, _ := os.ReadDir(root.Sys("class", "iommu"))
	for _, u := range units {
		ecap, err := readAttr(filepath.Join(root.Sys("class", "iommu"), u.Name(), "intel-iommu", "ecap"))
		if err != nil {
			if strings.HasPrefix(u.Name(), "ivhd") {
				hw = "AMD-Vi " + u.Name()
				break
			}
			continue
		}
		if v, err := strconv.ParseUint(ecap, 16, 64); err == nil && v&(1<<3) != 0 {
			hw = fmt.Sprintf("%s ecap %s has IR", u.Name(), ecap)
			break
		}
	}
	b, err := os.ReadFile(root.Proc("interrupts"))
	switch {
	case err == nil && strings.Contains(string(b), "IR-"):
		r.On, r.Detail = true, "IR- interrupt chips in "+r.Interrupts
		if hw != "" {
			r.Detail = hw + "; " + r.Detail
		}
	case err == nil:
		r.Detail = "no IR- interrupt chips in " + r.Interrupts
		if hw != "" {
			r.Detail += " although " + hw + " (booted with intremap=off?)"
		}
	case hw != "":
		r.On, r.Detail = true, hw
	default:
		r.Unknown = true
	}
	return r
}
