package vfio

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/vgpu-host/vgpu-host/host"
)

// DriverName is the driver every endpoint of a passed-through group must be bound to.
const DriverName = "vfio-pci"

// ErrNoIOMMU is returned when the kernel has no active IOMMU (no groups): vfio-pci cannot
// isolate devices, and --force cannot change that.
var ErrNoIOMMU = errors.New("no active IOMMU")

// ErrNotInLedger is returned by Unbind for a device vgpu-host did not bind.
var ErrNotInLedger = errors.New("not in the vgpu-host ledger")

// Member is one PCI function of an IOMMU group, as sysfs shows it now.
type Member struct {
	Address host.Address `json:"address"`
	// Class is the 24-bit class code, e.g. 0x030000.
	Class uint32 `json:"class"`
	// Driver is the bound driver, "" when none.
	Driver string `json:"driver"`
	// Override is driver_override, "" when unset (sysfs shows "(null)").
	Override string `json:"driver_override,omitempty"`
	// Bridge is true for PCI-to-PCI and CardBus bridges (header type 1/2), which the kernel lets
	// stay on any driver in a viable group; vfio-pci cannot even bind them.
	Bridge bool `json:"is_bridge"`
	// BootVGA is true for the VGA device the firmware and the host console use (boot_vga=1).
	BootVGA bool `json:"boot_vga"`
}

// Group is an IOMMU group and its members, sorted by address.
type Group struct {
	ID      int      `json:"id"`
	Members []Member `json:"members"`
}

// Endpoints returns the members that must be on vfio-pci (everything but bridges).
func (g *Group) Endpoints() []Member {
	var out []Member
	for _, m := range g.Members {
		if !m.Bridge {
			out = append(out, m)
		}
	}
	return out
}

// Viable reports whether the group can be given to a guest by host.MemberViable's rule (every
// endpoint on vfio-pci or driverless, bridges on pcieport or driverless), the same verdict
// `vgpu-host inspect` prints.
func (g *Group) Viable() bool {
	for _, m := range g.Members {
		if !host.MemberViable(m.Bridge, m.Driver) {
			return false
		}
	}
	return true
}

// readMember reads one function's state from sysfs.
func readMember(root host.Root, a host.Address) (Member, error) {
	m := Member{Address: a}
	if _, err := os.Stat(root.PCIDevice(a)); err != nil {
		return m, fmt.Errorf("device %s: no %s: %w (check the address with lspci -D)", a, root.PCIDevice(a), host.ErrNotFound)
	}
	class, err := host.ReadHex(root.PCIDevice(a, "class"))
	if err != nil {
		return m, fmt.Errorf("device %s: %w", a, err)
	}
	m.Class = class
	m.Bridge = host.IsBridgeClass(class)
	m.Driver, err = currentDriver(root, a)
	if err != nil {
		return m, err
	}
	m.Override, err = currentOverride(root, a)
	if err != nil {
		return m, err
	}
	if v, err := host.ReadString(root.PCIDevice(a, "boot_vga")); err == nil && v == "1" {
		m.BootVGA = true
	}
	return m, nil
}

// currentDriver returns the driver bound to a ("" when none).
func currentDriver(root host.Root, a host.Address) (string, error) {
	d, err := host.LinkBase(root.PCIDevice(a, "driver"))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("device %s: %w", a, err)
	}
	return d, nil
}

// currentOverride returns a's driver_override ("" when unset).
func currentOverride(root host.Root, a host.Address) (string, error) {
	p := root.PCIDevice(a, "driver_override")
	v, err := host.ReadString(p)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("device %s has no %s (kernel older than 3.16?): %w", a, p, host.ErrUnsupported)
	}
	if err != nil {
		return "", fmt.Errorf("device %s: %w", a, err)
	}
	if v == "(null)" {
		v = ""
	}
	return v, nil
}

// groupID returns the IOMMU group number of a.
func groupID(root host.Root, a host.Address) (int, error) {
	l, err := os.Readlink(root.PCIDevice(a, "iommu_group"))
	if err != nil {
		if _, serr := os.Stat(root.PCIDevice(a)); serr != nil {
			return 0, fmt.Errorf("device %s: no %s: %w (check the address with lspci -D)", a, root.PCIDevice(a), host.ErrNotFound)
		}
		if !iommuActive(root) {
			return 0, noIOMMUError(root, a)
		}
		return 0, fmt.Errorf("device %s has no %s although the IOMMU is on (is it behind a non-isolating bridge the IOMMU skips?): %w", a, root.PCIDevice(a, "iommu_group"), host.ErrUnsupported)
	}
	id, err := strconv.Atoi(filepath.Base(l))
	if err != nil {
		return 0, fmt.Errorf("device %s: iommu_group link %q is not a group number", a, l)
	}
	return id, nil
}

// iommuActive reports whether the kernel created any IOMMU group.
func iommuActive(root host.Root) bool {
	ents, err := os.ReadDir(root.Sys("kernel", "iommu_groups"))
	return err == nil && len(ents) > 0
}

func noIOMMUError(root host.Root, a host.Address) error {
	return fmt.Errorf("device %s: %s is empty: %w, so vfio-pci cannot isolate the device; enable VT-d/AMD-Vi in the firmware and boot with intel_iommu=on (Intel) or amd_iommu=on (AMD), plus iommu=pt: %w",
		a, root.Sys("kernel", "iommu_groups"), ErrNoIOMMU, host.ErrUnsupported)
}

// ReadGroup reads IOMMU group id and all its members.
func ReadGroup(root host.Root, id int) (*Group, error) {
	dir := root.Sys("kernel", "iommu_groups", strconv.Itoa(id), "devices")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read IOMMU group %d: %w", id, errors.Join(host.ErrNotFound, err))
	}
	g := &Group{ID: id}
	for _, e := range ents {
		a, err := host.ParseAddress(e.Name())
		if err != nil {
			continue // not a PCI function (an mdev UUID, for instance)
		}
		m, err := readMember(root, a)
		if err != nil {
			return nil, fmt.Errorf("read IOMMU group %d: %w", id, err)
		}
		g.Members = append(g.Members, m)
	}
	sort.Slice(g.Members, func(i, j int) bool { return g.Members[i].Address.String() < g.Members[j].Address.String() })
	return g, nil
}

// GroupOf returns the IOMMU group of a with every member, read from
// ROOT/sys/kernel/iommu_groups/N/devices.
func GroupOf(root host.Root, a host.Address) (*Group, error) {
	if !iommuActive(root) {
		if _, err := os.Stat(root.PCIDevice(a)); err != nil {
			return nil, fmt.Errorf("device %s: no %s: %w (check the address with lspci -D)", a, root.PCIDevice(a), host.ErrNotFound)
		}
		return nil, noIOMMUError(root, a)
	}
	id, err := groupID(root, a)
	if err != nil {
		return nil, err
	}
	return ReadGroup(root, id)
}

// VFIODev returns the group's character device, ROOT/dev/vfio/ID.
func VFIODev(root host.Root, id int) string { return root.Dev("vfio", strconv.Itoa(id)) }

// hostPath turns a path under root into the path the host itself sees (for messages and
// for comparing with /proc/PID/fd link targets).
func hostPath(root host.Root, p string) string {
	rel, err := filepath.Rel(root.Dir(), p)
	if err != nil || strings.HasPrefix(rel, "..") {
		return p
	}
	return string(filepath.Separator) + rel
}
