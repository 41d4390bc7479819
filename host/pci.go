package host

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// The live state of one PCI function, read fresh each time: what the binder needs before and
// after every write, where an inventory read a moment ago may already be stale.

// ErrNoIOMMU is returned when the kernel has no active IOMMU (no groups): vfio-pci cannot
// isolate devices, and --force cannot change that.
var ErrNoIOMMU = errors.New("no active IOMMU")

// ClassCode returns the member's 24-bit class code (0x030000), 0 when Class is not hex.
func (m GroupMember) ClassCode() uint32 {
	v, _ := strconv.ParseUint(m.Class, 16, 32)
	return uint32(v)
}

// Endpoints returns the members that must be on vfio-pci for the group to be viable
// (everything but bridges).
func (g *Group) Endpoints() []GroupMember {
	var out []GroupMember
	for _, m := range g.Members {
		if !m.IsBridge {
			out = append(out, m)
		}
	}
	return out
}

// ReadFunction reads one function's binding state now: class, driver, driver_override and
// boot_vga. A function that does not exist is ErrNotFound, naming the path.
func ReadFunction(root Root, a Address) (GroupMember, error) {
	m := GroupMember{Address: a}
	if _, err := root.Lstat(root.PCIDevice(a)); err != nil {
		return m, NoDevice(root, a)
	}
	class, err := root.readHexAttr(root.PCIDevice(a, "class"))
	if err != nil {
		return m, fmt.Errorf("device %s: %w", a, err)
	}
	m.Class, m.IsBridge = fmt.Sprintf("%06x", class), IsBridgeClass(class)
	if m.Driver, err = Driver(root, a); err != nil {
		return m, err
	}
	if m.DriverOverride, err = DriverOverride(root, a); err != nil {
		return m, err
	}
	if v, err := root.readAttr(root.PCIDevice(a, "boot_vga")); err == nil && v == "1" {
		m.BootVGA = true
	}
	return m, nil
}

// Driver returns the driver bound to a now ("" when none).
func Driver(root Root, a Address) (string, error) {
	d, err := root.linkBase(root.PCIDevice(a, "driver"))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("device %s: %w", a, err)
	}
	return d, nil
}

// DriverOverride returns a's driver_override now ("" when unset; sysfs shows "(null)"). A
// kernel without the attribute (before 3.16) is ErrUnsupported.
func DriverOverride(root Root, a Address) (string, error) {
	p := root.PCIDevice(a, "driver_override")
	v, err := root.readAttr(p)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("device %s has no %s (kernel older than 3.16?): %w", a, p, ErrUnsupported)
	}
	if err != nil {
		return "", fmt.Errorf("device %s: %w", a, err)
	}
	if v == "(null)" {
		v = ""
	}
	return v, nil
}

// IOMMUActive reports whether the kernel created any IOMMU group.
func IOMMUActive(root Root) bool {
	ents, err := root.ReadDir(root.Sys("kernel", "iommu_groups"))
	return err == nil && len(ents) > 0
}

// noIOMMUError says why a cannot be isolated and how to turn the IOMMU on (IOMMUFix: check's
// words, for bare metal or a VM).
func noIOMMUError(root Root, a Address) error {
	return fmt.Errorf("device %s: %s is empty: %w, so vfio-pci cannot isolate the device; %s: %w",
		a, root.Sys("kernel", "iommu_groups"), ErrNoIOMMU, IOMMUFix(root), ErrUnsupported)
}

// IOMMUGroupID returns the IOMMU group number of a: ErrNotFound when a does not exist,
// ErrUnsupported (and ErrNoIOMMU) when there is no IOMMU, with the fix in the message.
func IOMMUGroupID(root Root, a Address) (int, error) {
	dir := root.PCIDevice(a)
	if _, err := root.Lstat(dir); err != nil {
		return 0, NoDevice(root, a)
	}
	if !IOMMUActive(root) {
		return 0, noIOMMUError(root, a)
	}
	link := filepath.Join(dir, "iommu_group")
	g, err := root.linkBase(link)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return 0, fmt.Errorf("device %s has no %s although the IOMMU is on (is it behind a non-isolating bridge the IOMMU skips?): %w", a, link, ErrUnsupported)
		}
		return 0, fmt.Errorf("iommu group of %s: %w", a, err)
	}
	id, err := strconv.Atoi(g)
	if err != nil {
		return 0, fmt.Errorf("iommu group of %s: link %s names %q, not a number", a, link, g)
	}
	return id, nil
}

// DriverFunctions are the functions bound to PCI driver name, from the entries of
// ROOT/sys/bus/pci/drivers/NAME that are addresses, sorted; none when the driver is not
// loaded.
func DriverFunctions(root Root, name string) []Address {
	ents, err := root.ReadDir(root.PCIDriver(name))
	if err != nil {
		return nil
	}
	var out []Address
	for _, e := range ents {
		if a, err := ParseAddress(e.Name()); err == nil {
			out = append(out, a)
		}
	}
	return out
}

// DriverLoaded reports whether PCI driver name is registered (ROOT/sys/bus/pci/drivers/NAME).
func DriverLoaded(root Root, name string) bool { return root.Exists(root.PCIDriver(name)) }

// DriverModule returns the kernel module that provides PCI driver name (its module link),
// "" when the driver is built in or not loaded.
func DriverModule(root Root, name string) string {
	if name == "" {
		return ""
	}
	m, err := root.linkBase(root.PCIDriver(name, "module"))
	if err != nil {
		return ""
	}
	return m
}

// VFIODev returns IOMMU group id's character device, ROOT/dev/vfio/ID.
func VFIODev(root Root, id int) string { return root.Dev("vfio", strconv.Itoa(id)) }

// VFIODevFamily is every group's character device as Holders reads a prefix, the host's
// /dev/vfio/* (the container node /dev/vfio/vfio and iommufd's /dev/vfio/devices/ too): what
// unbind searches for before it knows which groups move.
func VFIODevFamily(root Root) string { return HostPath(root, root.Dev("vfio")) + "/*" }

// VFIODevExists reports whether group id's /dev/vfio/ID exists.
func VFIODevExists(root Root, id int) bool { return root.Exists(VFIODev(root, id)) }

// HostPath turns a path under root into the path the host itself sees (for messages, and to
// compare with /proc/PID/fd link targets): ROOT/dev/vfio/3 → /dev/vfio/3.
func HostPath(root Root, p string) string {
	rel, err := filepath.Rel(root.Dir(), p)
	if err != nil || strings.HasPrefix(rel, "..") {
		return p
	}
	return string(filepath.Separator) + rel
}

// VFIOCdevs returns the VFIO device-cdev nodes of PCI function a ("/dev/vfio/devices/vfio3",
// host paths), one per entry of its sysfs vfio-dev directory, which kernels >= 6.6 with
// VFIO_DEVICE_CDEV create for a function on vfio-pci; none on older kernels:
//
//	/sys/bus/pci/devices/0000:41:00.0/vfio-dev/vfio3   ->   /dev/vfio/devices/vfio3
func VFIOCdevs(root Root, a Address) []string {
	ents, err := root.ReadDir(root.PCIDevice(a, "vfio-dev"))
	if err != nil {
		return nil
	}
	out := make([]string, 0, len(ents))
	for _, e := range ents {
		out = append(out, filepath.Join("/dev/vfio/devices", e.Name()))
	}
	sort.Strings(out)
	return out
}

// VFIOCdevsPresent reports whether PCI function a has VFIO device cdevs (VFIOCdevs) and each
// one's node exists under the root.
func VFIOCdevsPresent(root Root, a Address) bool {
	cdevs := VFIOCdevs(root, a)
	for _, n := range cdevs {
		if !root.Exists(root.Path(n)) {
			return false
		}
	}
	return len(cdevs) > 0
}
