package host

import (
	"bufio"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
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

// DescribeHolders lists hs ("pid 812 (nv-hostengine) has /dev/nvidia0 open; ...") and then,
// in parentheses, how to stop the programs among them that usually hold a GPU, each fix once.
func DescribeHolders(hs []Holder) string {
	var parts, fixes []string
	for _, h := range hs {
		parts = append(parts, h.String())
		if f := HolderFix(h.Comm); f != "" && !slices.Contains(fixes, f) {
			fixes = append(fixes, f)
		}
	}
	s := strings.Join(parts, "; ")
	if len(fixes) > 0 {
		s += " (" + strings.Join(fixes, "; ") + ")"
	}
	return s
}

// pipewireFix stops PipeWire and its sockets, which would start it again.
const pipewireFix = "the sound server: systemctl --user stop pipewire.socket pipewire-pulse.socket pipewire pipewire-pulse wireplumber, as the user it runs as"

// holderFixes say how to stop the programs that usually hold a GPU's device nodes on a host,
// by the name the kernel gives them (/proc/PID/comm, cut to 15 bytes: nvidia-persistenced is
// "nvidia-persiste").
var holderFixes = []struct{ comm, fix string }{
	{"nvidia-persiste", "nvidia-persistenced keeps the GPU initialised: systemctl stop nvidia-persistenced"},
	{"nv-hostengine", "DCGM's host engine: systemctl stop nvidia-dcgm"},
	{"dcgm-exporter", "the DCGM exporter: stop its service or pod"},
	{"vgpu-host-nvml", "an NVML helper of vgpu-host (in the agent, its Xid watch's or the one its requests share): binds, unbinds and MIG changes made through the agent (--agent auto) stop or use it; for a GPU reset, systemctl stop vgpu-host-agent"},
	{"Xorg", "the display server: systemctl stop display-manager"},
	{"Xwayland", "the display server: systemctl stop display-manager"},
	{"gnome-shell", "the desktop session: systemctl stop display-manager"},
	{"kwin_wayland", "the desktop session: systemctl stop display-manager"},
	{"pulseaudio", "the sound server: systemctl --user stop pulseaudio.socket pulseaudio, as the user it runs as"},
	{"pipewire", pipewireFix},
	{"pipewire-pulse", pipewireFix},
	{"wireplumber", pipewireFix},
	{"qemu-system-x86", "a virtual machine uses it: shut the guest down (virsh shutdown DOMAIN)"},
}

// HolderFix is how to stop a holder named comm, "" for a program without a known fix.
func HolderFix(comm string) string {
	for _, f := range holderFixes {
		if f.comm == comm {
			return f.fix
		}
	}
	return ""
}

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
	if ents, err := root.ReadDir(root.PCIDevice(a, "drm")); err == nil {
		for _, e := range ents {
			n := e.Name()
			if strings.HasPrefix(n, "card") || strings.HasPrefix(n, "renderD") {
				out = append(out, HostPath(root, root.Dev("dri", n)))
			}
		}
	}
	if ents, err := root.ReadDir(root.PCIDevice(a, "graphics")); err == nil {
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), "fb") {
				out = append(out, dev(e.Name()))
			}
		}
	}
	if ents, err := root.ReadDir(root.PCIDevice(a, "sound")); err == nil {
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
		out = append(out, NVIDIADevFamily(root))
	}
	if group >= 0 {
		out = append(out, HostPath(root, VFIODev(root, group)))
	}
	return out
}

// DeviceNodeFamilies are the prefixes (each with a trailing "*", as Holders reads it) under
// which every path DeviceNodes returns for a function falls, /dev/vfio/GROUP aside: the DRM,
// framebuffer, ALSA and NVIDIA nodes of every device. A search of every process's open files
// for them can start before the functions' own nodes are read; MatchesAny with each
// function's DeviceNodes then tells its holders from those of other devices (bind, #32).
func DeviceNodeFamilies(root Root) []string {
	dev := func(name string) string { return HostPath(root, root.Dev(name)) }
	return []string{dev("dri") + "/*", dev("fb") + "*", dev("snd") + "/*", NVIDIADevFamily(root)}
}

// NVIDIADevFamily is the NVIDIA driver's device nodes as Holders reads a prefix, the host's
// /dev/nvidia* (nvidiactl, nvidia0…, nvidia-uvm, nvidia-caps/…): a process with any of them
// open is an NVML or CUDA client, which keeps a MIG mode change pending and a GPU reset refused.
func NVIDIADevFamily(root Root) string { return HostPath(root, root.Dev("nvidia")) + "*" }

// Holders scans ROOT/proc/*/fd for descriptors open on any of paths (host paths; a trailing
// "*" matches a prefix) and returns the processes, sorted by pid (a process holding several of
// the paths is listed once per path). Unreadable processes (other users' without root) are
// skipped.
//
// It is the one search of every process's open files, and callers ask it once for all the
// paths of a call (bind: every function it moves; unbind: every group). Each process costs an
// open of its fd directory, a directory read and one readlinkat per descriptor, relative to
// that directory (the kernel does not walk /proc/PID/fd again for each one). On procfs a
// directory read that leaves room for another entry has listed them all, so the read that
// would return nothing is not made; only a match reads the process's comm.
func Holders(root Root, paths []string) []Holder {
	if len(paths) == 0 {
		return nil
	}
	proc, err := root.open(root.Proc(), unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil
	}
	defer unix.Close(proc)
	procDir := root.dirAt(proc, root.Proc())
	var fs unix.Statfs_t
	procfs := unix.Fstatfs(proc, &fs) == nil && fs.Type == unix.PROC_SUPER_MAGIC
	var pids []string
	buf := make([]byte, 16<<10)
	for {
		n, err := getdents(proc, buf)
		if err != nil || n <= 0 {
			break
		}
		_, _, names := unix.ParseDirent(buf[:n], -1, nil)
		for _, name := range names {
			if name[0] >= '0' && name[0] <= '9' {
				pids = append(pids, name)
			}
		}
	}
	link := make([]byte, 4096)
	var out []Holder
	var names []string
	for _, p := range pids {
		pid, err := strconv.Atoi(p)
		if err != nil {
			continue
		}
		fd, err := procDir.openAt(p, "fd", unix.O_RDONLY|unix.O_DIRECTORY)
		if err != nil {
			continue
		}
		var seen []string
		for {
			n, err := getdents(fd, buf)
			if err != nil || n <= 0 {
				break
			}
			_, _, names = unix.ParseDirent(buf[:n], -1, names[:0])
			for _, name := range names {
				l, err := readlinkat(fd, name, link)
				if err != nil || !matchAnyBytes(link[:l], paths) {
					continue
				}
				t := string(link[:l])
				if slices.Contains(seen, t) {
					continue
				}
				seen = append(seen, t)
				comm, _ := root.readAttr(root.Proc(p, "comm"))
				out = append(out, Holder{PID: pid, Comm: comm, Path: t})
			}
			// procfs lists a process's descriptors until the buffer is full: room left for
			// another entry (a name of at most 10 digits takes 32 bytes) means the end.
			if procfs && len(buf)-n >= 64 {
				break
			}
		}
		unix.Close(fd)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].PID != out[j].PID {
			return out[i].PID < out[j].PID
		}
		return out[i].Path < out[j].Path
	})
	return out
}

func getdents(fd int, buf []byte) (int, error) {
	for {
		n, err := unix.Getdents(fd, buf)
		if err != unix.EINTR {
			return n, err
		}
	}
}

// ProcessName returns the command name of process pid (ROOT/proc/PID/comm), "" when it
// cannot be read.
func ProcessName(root Root, pid int) string {
	c, _ := root.readAttr(root.Proc(strconv.Itoa(pid), "comm"))
	return c
}

// MatchesAny reports whether the link target t (a Holder's Path) is one of paths, with Holders'
// rule: a trailing "*" matches a prefix. A caller that searched for several devices' nodes at
// once tells by it which device a holder holds.
func MatchesAny(t string, paths []string) bool { return matchAnyBytes([]byte(t), paths) }

// matchAnyBytes is MatchesAny on a link target still in readlinkat's buffer: most descriptors
// match nothing, and no string is made for them.
func matchAnyBytes(t []byte, paths []string) bool {
	for _, p := range paths {
		if pre, ok := strings.CutSuffix(p, "*"); ok {
			if len(t) >= len(pre) && string(t[:len(pre)]) == pre {
				return true
			}
		} else if string(t) == p {
			return true
		}
	}
	return false
}

// linkedUnder returns the PCI function a sysfs link lies under (e.g. /sys/class/block/vda1 ->
// ../../devices/pci0000:00/0000:00:1e.0/virtio2/block/vda/vda1 lies under 0000:00:1e.0).
func linkedUnder(root Root, p string) (Address, bool) {
	t, err := root.Readlink(p)
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
	f, err := root.openHostFile(root.Proc("mounts"))
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
		if t, err := root.Readlink(root.Path(fields[0])); err == nil { // /dev/mapper/x -> ../dm-0
			name = filepath.Base(t)
		}
		names := []string{name}
		if slaves, err := root.ReadDir(root.Sys("class", "block", name, "slaves")); err == nil {
			for _, sl := range slaves {
				names = append(names, sl.Name())
			}
		}
		for _, n := range names {
			if a, ok := linkedUnder(root, root.Sys("class", "block", n)); ok {
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
	if b, err := root.ReadHostFile(root.Proc("net", "route"), 0); err == nil {
		for i, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); i > 0 && len(f) > 0 {
				ifs[f[0]] = true
			}
		}
	}
	if b, err := root.ReadHostFile(root.Proc("net", "ipv6_route"), 0); err == nil {
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
		if a, ok := linkedUnder(root, root.Sys("class", "net", n)); ok {
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
	if v, err := root.readAttr(param); err == nil && (v == "Y" || v == "1") {
		r.Unsafe = true
	}
	// The hardware's word: an IOMMU unit that remaps (named in the detail either way).
	hw := ""
	units, _ := root.ReadDir(root.Sys("class", "iommu"))
	for _, u := range units {
		ecap, err := root.readAttr(filepath.Join(root.Sys("class", "iommu"), u.Name(), "intel-iommu", "ecap"))
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
	b, err := root.ReadHostFile(root.Proc("interrupts"), 0)
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
