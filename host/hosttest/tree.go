// Package hosttest builds fake host trees (sysfs, procfs, devfs) under t.TempDir() for unit
// tests, with the symlinks that matter (iommu_group, driver, physfn/virtfn*, mdev_type), and
// emulates the kernel's reaction to writes (Kernel) so that code writing sysfs can be tested
// without a kernel. Layouts follow a real 6.1 kernel's sysfs (see ../../shared/fixtures).
package hosttest

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
)

// Tree is a fake host root under construction.
type Tree struct {
	tb   testing.TB
	Root host.Root
	dir  string
	// devPath maps a PCI address to its canonical directory under sys/devices.
	devPath   map[host.Address]string
	nextGroup int
	// native is the driver the fake kernel binds on a probe without driver_override.
	native map[host.Address]string
	// vfSpec remembers how to create VFs of a PF.
	vfSpec map[host.Address]VFSpec
	// nextSoundCard numbers the ALSA cards of HDA functions (sound/cardN).
	nextSoundCard int
	// migGIs are the MIG GPU instances (their profiles) of a PF in MIG mode (SetMIGInstances).
	migGIs map[host.Address][]string
	// uevent is each function's uevent without its DRIVER line, which writeUevent adds
	// whenever the driver changes.
	uevent map[host.Address]string
	// nodeCPUs is each NUMA node's local_cpulist (-1: no node): the kernel prints a function's
	// local_cpulist from its node alone (cpumask_of_node, or every online CPU for -1), so two
	// functions on one node never differ, and Scan reads it once per node.
	nodeCPUs map[int]string
	// resetSupported is each function's reset methods, in the kernel's order: what
	// reset_method lists until a write narrows it, and what "default" brings back.
	resetSupported map[host.Address][]string
}

// New returns an empty host tree: an IOMMU (dmar0) with no groups yet, intel_iommu=on iommu=pt on
// the command line, a CPU with vmx, /dev/kvm and /dev/vfio/vfio, and the vfio-pci module loaded.
// Use NoIOMMU or SetCmdline to change that.
func New(tb testing.TB) *Tree {
	tb.Helper()
	dir := tb.TempDir()
	t := &Tree{tb: tb, dir: dir, devPath: map[host.Address]string{}, native: map[host.Address]string{}, vfSpec: map[host.Address]VFSpec{}, uevent: map[host.Address]string{}}
	for _, d := range []string{
		"sys/bus/pci/devices", "sys/bus/pci/drivers", "sys/kernel/iommu_groups",
		"sys/devices/pci0000:00", "sys/class/iommu", "sys/devices/virtual/iommu/dmar0",
		"sys/bus/mdev/devices", "sys/class/mdev_bus", "sys/module", "dev/vfio", "dev/dri", "proc",
		"etc", "var/lib",
	} {
		t.mkdir(d)
	}
	t.symlink("sys/class/iommu/dmar0", "sys/devices/virtual/iommu/dmar0")
	t.WriteFile("sys/devices/virtual/iommu/dmar0/intel-iommu/cap", "d2008c40660462\n")
	t.WriteFile("sys/devices/virtual/iommu/dmar0/intel-iommu/ecap", "f050da\n")
	t.WriteFile("sys/bus/pci/drivers_probe", "")
	t.WriteFile("proc/cmdline", "BOOT_IMAGE=/vmlinuz root=/dev/vda1 ro intel_iommu=on iommu=pt\n")
	t.WriteFile("proc/cpuinfo", "processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu vme de pse msr pae vmx x2apic\n\n")
	t.WriteFile("proc/interrupts", "           CPU0\n  0:         10   IR-IO-APIC    2-edge      timer\n")
	t.WriteFile("dev/kvm", "")
	t.WriteFile("dev/vfio/vfio", "")
	t.LoadDriver("pcieport")
	t.LoadDriver("vfio-pci")
	t.mkdir("sys/module/vfio_pci")
	t.mkdir("sys/module/vfio")
	t.mkdir("sys/module/vfio_iommu_type1")
	var err error
	t.Root, err = host.NewRoot(dir)
	if err != nil {
		tb.Fatal(err)
	}
	return t
}

// Dir returns the root directory of the tree.
func (t *Tree) Dir() string { return t.dir }

// NoIOMMU removes the IOMMU: no /sys/class/iommu entries, no iommu_groups, no IOMMU on the
// command line, as on a host booted without intel_iommu=on.
func (t *Tree) NoIOMMU() {
	os.RemoveAll(filepath.Join(t.dir, "sys/class/iommu"))
	os.MkdirAll(filepath.Join(t.dir, "sys/class/iommu"), 0o755)
	os.RemoveAll(filepath.Join(t.dir, "sys/kernel/iommu_groups"))
	os.MkdirAll(filepath.Join(t.dir, "sys/kernel/iommu_groups"), 0o755)
	t.SetCmdline("BOOT_IMAGE=/vmlinuz root=/dev/vda1 ro quiet")
}

// SetCmdline replaces /proc/cmdline.
func (t *Tree) SetCmdline(s string) { t.WriteFile("proc/cmdline", s+"\n") }

// LoadDriver creates /sys/bus/pci/drivers/NAME with its bind/unbind/new_id attributes.
func (t *Tree) LoadDriver(name string) {
	d := filepath.Join("sys/bus/pci/drivers", name)
	t.mkdir(d)
	for _, f := range []string{"bind", "unbind", "new_id", "remove_id"} {
		if !exists(filepath.Join(t.dir, d, f)) {
			t.WriteFile(filepath.Join(d, f), "")
		}
	}
}

// PCI describes a fake PCI function.
type PCI struct {
	Addr      string // "0000:41:00.0"
	Parent    string // address of the upstream bridge/port; "" = directly on the root complex
	Vendor    uint16
	Device    uint16
	SubVendor uint16
	SubDevice uint16
	Class     uint32 // 0x030000
	Driver    string // bound driver; "" = none
	// NativeDriver is what the kernel binds when the device is probed without an override
	// (defaults to Driver). Set it for a driverless device whose driver is not loaded.
	NativeDriver string
	// Group is the IOMMU group: 0 allocates a new group, -1 means none (no IOMMU).
	Group        int
	NUMA         int // -1 = no NUMA information; 0 is a valid node (use NUMASet)
	NUMASet      bool
	LocalCPUs    string
	BootVGA      bool
	BARs         []BARSpec
	ResetMethods string // "flr bus"
}

// localCPUs is the local_cpulist of a function on numa: the node's, as the kernel prints it.
// A function that asks for another list than its node's already has is a broken test.
func (t *Tree) localCPUs(a host.Address, numa int, want string) string {
	if t.nodeCPUs == nil {
		t.nodeCPUs = map[int]string{}
	}
	have, ok := t.nodeCPUs[numa]
	switch {
	case ok && want != "" && want != have:
		t.tb.Fatalf("hosttest: %s asks for local_cpulist %q on NUMA node %d, whose functions have %q: the kernel prints it from the node", a, want, numa, have)
	case ok:
		return have
	case want == "" && numa >= 0:
		want = fmt.Sprintf("%d-%d", numa*8, numa*8+7) // 8 CPUs a node
	case want == "":
		want = "0-3" // no node: every online CPU, of a 4-CPU host
	}
	t.nodeCPUs[numa] = want
	return want
}

// BARSpec is one BAR of a fake device.
type BARSpec struct {
	Index    int
	Size     uint64
	Is64     bool
	Prefetch bool
	IO       bool
}

// AddPCI creates a PCI function and returns its address. The group is created when needed.
func (t *Tree) AddPCI(p PCI) host.Address {
	t.tb.Helper()
	a := host.MustParseAddress(p.Addr)
	parentDir := "sys/devices/pci" + fmt.Sprintf("%04x:%02x", a.Domain, 0)
	if p.Parent != "" {
		pa := host.MustParseAddress(p.Parent)
		pd, ok := t.devPath[pa]
		if !ok {
			t.tb.Fatalf("hosttest: parent %s of %s not added yet", pa, a)
		}
		parentDir = pd
	}
	dir := filepath.Join(parentDir, a.String())
	t.mkdir(dir)
	t.devPath[a] = dir
	t.symlink(filepath.Join("sys/bus/pci/devices", a.String()), dir)
	t.symlink(filepath.Join(dir, "subsystem"), "sys/bus/pci")
	t.WriteFile(filepath.Join(dir, "vendor"), fmt.Sprintf("0x%04x\n", p.Vendor))
	t.WriteFile(filepath.Join(dir, "device"), fmt.Sprintf("0x%04x\n", p.Device))
	sv, sd := p.SubVendor, p.SubDevice
	if sv == 0 {
		sv, sd = p.Vendor, p.Device
	}
	t.WriteFile(filepath.Join(dir, "subsystem_vendor"), fmt.Sprintf("0x%04x\n", sv))
	t.WriteFile(filepath.Join(dir, "subsystem_device"), fmt.Sprintf("0x%04x\n", sd))
	t.WriteFile(filepath.Join(dir, "class"), fmt.Sprintf("0x%06x\n", p.Class))
	t.WriteFile(filepath.Join(dir, "driver_override"), "(null)\n")
	modalias := fmt.Sprintf("pci:v%08Xd%08Xsv%08Xsd%08Xbc%02Xsc%02Xi%02X", p.Vendor, p.Device, sv, sd, p.Class>>16, (p.Class>>8)&0xff, p.Class&0xff)
	t.WriteFile(filepath.Join(dir, "modalias"), modalias+"\n")
	// uevent as the kernel's pci_uevent prints it (DRIVER first, when bound: writeUevent).
	t.uevent[a] = fmt.Sprintf("PCI_CLASS=%04X\nPCI_ID=%04X:%04X\nPCI_SUBSYS_ID=%04X:%04X\nPCI_SLOT_NAME=%s\nMODALIAS=%s\n",
		p.Class, p.Vendor, p.Device, sv, sd, a, modalias)
	t.writeUevent(a)
	t.WriteFile(filepath.Join(dir, "enable"), "1\n")
	t.WriteFile(filepath.Join(dir, "remove"), "")
	t.WriteFile(filepath.Join(dir, "reset"), "")
	numa := -1
	if p.NUMASet || p.NUMA != 0 {
		numa = p.NUMA
	}
	t.WriteFile(filepath.Join(dir, "numa_node"), fmt.Sprintf("%d\n", numa))
	t.WriteFile(filepath.Join(dir, "local_cpulist"), t.localCPUs(a, numa, p.LocalCPUs)+"\n")
	if p.Class>>8 == 0x0300 {
		b := "0"
		if p.BootVGA {
			b = "1"
		}
		t.WriteFile(filepath.Join(dir, "boot_vga"), b+"\n")
	}
	if p.ResetMethods != "" {
		t.WriteFile(filepath.Join(dir, "reset_method"), p.ResetMethods+"\n")
		if t.resetSupported == nil {
			t.resetSupported = map[host.Address][]string{}
		}
		t.resetSupported[a] = strings.Fields(p.ResetMethods)
	}
	t.WriteFile(filepath.Join(dir, "resource"), resourceFile(p.BARs))
	t.WriteFile(filepath.Join(dir, "config"), string(configSpace(p, t.ReadFile(filepath.Join(dir, "resource")))))
	if p.Group >= 0 {
		g := p.Group
		if g == 0 {
			g = t.NewGroup()
		}
		t.joinGroup(a, g)
	}
	native := p.NativeDriver
	if native == "" {
		native = p.Driver
	}
	t.native[a] = native
	if p.Driver != "" {
		t.LoadDriver(p.Driver)
		t.Bind(a, p.Driver)
	}
	return a
}

// resourceFile renders the `resource` file: 13 lines of "start end flags" (6 BARs, ROM, 6 more).
func resourceFile(bars []BARSpec) string {
	lines := make([]string, 13)
	for i := range lines {
		lines[i] = "0x0000000000000000 0x0000000000000000 0x0000000000000000"
	}
	next := uint64(0x4000000000)
	for _, b := range bars {
		var flags uint64 = 0x40200 // IORESOURCE_MEM | SIZEALIGN
		start := next
		if b.IO {
			flags = 0x40101
			start = 0xe000
		} else {
			if b.Is64 {
				flags |= 0x100000 // IORESOURCE_MEM_64
			}
			if b.Prefetch {
				flags |= 0x2000 // IORESOURCE_PREFETCH
			}
			next += b.Size
		}
		lines[b.Index] = fmt.Sprintf("0x%016x 0x%016x 0x%016x", start, start+b.Size-1, flags)
	}
	return strings.Join(lines, "\n") + "\n"
}

// NewGroup allocates an unused IOMMU group number and creates it.
func (t *Tree) NewGroup() int {
	for {
		t.nextGroup++
		if !exists(filepath.Join(t.dir, "sys/kernel/iommu_groups", fmt.Sprint(t.nextGroup))) {
			t.mkdir(filepath.Join("sys/kernel/iommu_groups", fmt.Sprint(t.nextGroup), "devices"))
			return t.nextGroup
		}
	}
}

func (t *Tree) joinGroup(a host.Address, g int) {
	gd := filepath.Join("sys/kernel/iommu_groups", fmt.Sprint(g))
	t.mkdir(filepath.Join(gd, "devices"))
	t.symlink(filepath.Join(gd, "devices", a.String()), t.devPath[a])
	t.symlink(filepath.Join(t.devPath[a], "iommu_group"), gd)
	t.symlink(filepath.Join(t.devPath[a], "iommu"), "sys/devices/virtual/iommu/dmar0")
}

// Group returns the IOMMU group number of a.
func (t *Tree) Group(a host.Address) int {
	l, err := os.Readlink(filepath.Join(t.dir, t.devPath[a], "iommu_group"))
	if err != nil {
		t.tb.Fatalf("hosttest: %s has no group: %v", a, err)
	}
	var g int
	fmt.Sscan(filepath.Base(l), &g)
	return g
}

// Bind binds a to driver directly (test setup; the Kernel emulates writes). Bound to vfio-pci,
// a function in an IOMMU group gets the group's /dev/vfio/N, as vfio-pci's probe registers it.
func (t *Tree) Bind(a host.Address, driver string) {
	t.LoadDriver(driver)
	t.symlink(filepath.Join(t.devPath[a], "driver"), filepath.Join("sys/bus/pci/drivers", driver))
	t.symlink(filepath.Join("sys/bus/pci/drivers", driver, a.String()), t.devPath[a])
	t.writeUevent(a)
	if driver == "vfio-pci" {
		if g, err := os.Readlink(filepath.Join(t.dir, t.devPath[a], "iommu_group")); err == nil {
			t.WriteFile(filepath.Join("dev/vfio", filepath.Base(g)), "")
		}
	}
}

// writeUevent writes a's uevent file: DRIVER=NAME while a driver is bound, then the lines
// AddPCI composed.
func (t *Tree) writeUevent(a host.Address) {
	body, ok := t.uevent[a]
	if !ok {
		return
	}
	if d := t.Driver(a); d != "" {
		body = "DRIVER=" + d + "\n" + body
	}
	t.WriteFile(filepath.Join(t.devPath[a], "uevent"), body)
}

// Unbind removes a's driver link (test setup).
func (t *Tree) Unbind(a host.Address) {
	d := t.Driver(a)
	if d == "" {
		return
	}
	os.Remove(filepath.Join(t.dir, t.devPath[a], "driver"))
	os.Remove(filepath.Join(t.dir, "sys/bus/pci/drivers", d, a.String()))
	t.writeUevent(a)
}

// Driver returns the driver bound to a, or "".
func (t *Tree) Driver(a host.Address) string {
	l, err := os.Readlink(filepath.Join(t.dir, t.devPath[a], "driver"))
	if err != nil {
		return ""
	}
	return filepath.Base(l)
}

// DevDir returns the absolute sysfs directory of a.
func (t *Tree) DevDir(a host.Address) string { return filepath.Join(t.dir, t.devPath[a]) }

// Addresses returns every PCI address in the tree, sorted.
func (t *Tree) Addresses() []host.Address {
	var out []host.Address
	for a := range t.devPath {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// WriteFile writes a file relative to the root, creating directories.
func (t *Tree) WriteFile(rel, content string) {
	t.tb.Helper()
	p := filepath.Join(t.dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.tb.Fatal(err)
	}
	if err := writeAtomic(p, content); err != nil {
		t.tb.Fatal(err)
	}
}

// writeAtomic replaces a file by rename, so a concurrent reader sees the old or the new value
// and never an empty file, as with a sysfs attribute.
func writeAtomic(p, content string) error {
	tmp := p + ".hosttest-tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

// ReadFile reads a file relative to the root ("" when missing).
func (t *Tree) ReadFile(rel string) string {
	b, _ := os.ReadFile(filepath.Join(t.dir, rel))
	return string(b)
}

func (t *Tree) mkdir(rel string) {
	if err := os.MkdirAll(filepath.Join(t.dir, rel), 0o755); err != nil {
		t.tb.Fatal(err)
	}
}

// symlink creates link (relative to root) pointing at target (relative to root), with a
// relative link text as sysfs has.
func (t *Tree) symlink(link, target string) {
	lp := filepath.Join(t.dir, link)
	if err := os.MkdirAll(filepath.Dir(lp), 0o755); err != nil {
		t.tb.Fatal(err)
	}
	rel, err := filepath.Rel(filepath.Dir(lp), filepath.Join(t.dir, target))
	if err != nil {
		t.tb.Fatal(err)
	}
	os.Remove(lp)
	if err := os.Symlink(rel, lp); err != nil {
		t.tb.Fatal(err)
	}
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}
