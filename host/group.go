package host

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strconv"
)

// bridgeDriver reports whether driver may stay bound to a bridge in a group handed to vfio.
func bridgeDriver(driver string) bool {
	return driver == "" || driver == "pcieport" || driver == "shpchp"
}

// MemberViable is the one rule for a group member: an endpoint must be on vfio-pci or have no
// driver; a bridge may stay on pcieport or shpchp, or have none. inspect's verdict and the
// binder's use it both, so they cannot disagree.
func MemberViable(isBridge bool, driver string) bool {
	if isBridge {
		return bridgeDriver(driver)
	}
	return driver == "" || driver == VFIODriver
}

// VFIODriver is the driver every endpoint of an assigned IOMMU group must be on (or have none).
const VFIODriver = "vfio-pci"

// GroupOf returns the IOMMU group of the function at addr, with every member's binding state
// and the viability verdict. It returns an error satisfying errors.Is(err, ErrNotFound) when
// the device does not exist, and ErrUnsupported (with ErrNoIOMMU when there is no IOMMU at
// all) when it has no group; the message says how to fix it.
func GroupOf(root Root, addr Address) (Group, error) {
	id, err := IOMMUGroupID(root, addr)
	if err != nil {
		return Group{}, err
	}
	return ReadGroup(root, id)
}

// ReadGroup reads IOMMU group id from ROOT/sys/kernel/iommu_groups/ID/devices: every member's
// binding state (ReadFunction) and the viability verdict (see EvaluateGroup).
func ReadGroup(root Root, id int) (Group, error) {
	dir := root.Sys("kernel", "iommu_groups", strconv.Itoa(id), "devices")
	ents, err := root.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return Group{}, fmt.Errorf("read iommu group %d at %s: %w", id, dir, ErrNotFound)
		}
		return Group{}, fmt.Errorf("read iommu group %d: %w", id, err)
	}
	g := Group{ID: id, Members: []GroupMember{}}
	for _, e := range ents {
		a, err := ParseAddress(e.Name())
		if err != nil {
			if !IsMdevUUID(e.Name()) {
				continue // neither a PCI function nor an mdev: no other bus shows up in x86 groups
			}
			m, err := readGroupMdev(root, dir, e.Name())
			if err != nil {
				return g, fmt.Errorf("read iommu group %d: %w", id, err)
			}
			g.Mdevs = append(g.Mdevs, m)
			continue
		}
		m, err := ReadFunction(root, a)
		if err != nil {
			return g, fmt.Errorf("read iommu group %d: member %s: %w", id, a, err)
		}
		g.Members = append(g.Members, m)
	}
	sortMembers(g.Members)
	sort.Slice(g.Mdevs, func(i, j int) bool { return g.Mdevs[i].UUID < g.Mdevs[j].UUID })
	EvaluateGroup(&g)
	return g, nil
}

// GroupUnchanged reports whether ROOT/sys/kernel/iommu_groups/ID/devices still lists exactly
// g's members and mdev instances: one directory read, for a caller that changed the members'
// drivers itself, saw each change confirmed, and needs to know only that no function joined or
// left the group meanwhile (a hot-plug), instead of reading every member again.
func GroupUnchanged(root Root, g *Group) bool {
	ents, err := root.ReadDir(root.Sys("kernel", "iommu_groups", strconv.Itoa(g.ID), "devices"))
	if err != nil {
		return false
	}
	want := map[string]bool{}
	for _, m := range g.Members {
		want[m.Address.String()] = true
	}
	for _, m := range g.Mdevs {
		want[m.UUID] = true
	}
	n := 0
	for _, e := range ents {
		name := e.Name()
		if _, err := ParseAddress(name); err != nil && !IsMdevUUID(name) {
			continue // as ReadGroup: neither a PCI function nor an mdev
		}
		if !want[name] {
			return false
		}
		n++
	}
	return n == len(want)
}

// IsMdevUUID reports whether name has the shape of an mdev instance name, a UUID
// (8-4-4-4-12 hex digits), as listed in /sys/bus/mdev/devices and in an mdev's IOMMU group.
func IsMdevUUID(name string) bool {
	if len(name) != 36 {
		return false
	}
	for i, c := range name {
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
				return false
			}
		}
	}
	return true
}

// readGroupMdev describes the mdev instance uuid listed in the group directory dir: its parent
// is the directory the link points into, its type and driver come from its own links.
//
//	devices/UUID -> ../../../../devices/virtual/mdpy/mdpy/UUID         (virtual parent "mdpy")
//	devices/UUID -> ../../../../devices/pci0000:00/0000:00:02.0/UUID   (PCI parent 0000:00:02.0)
func readGroupMdev(root Root, dir, uuid string) (GroupMdev, error) {
	m := GroupMdev{UUID: uuid}
	link := filepath.Join(dir, uuid)
	target, err := root.Readlink(link)
	if err != nil {
		return m, fmt.Errorf("mdev %s: read link %s: %w", uuid, link, err)
	}
	m.Parent = filepath.Base(filepath.Dir(target))
	if t, err := root.linkBase(filepath.Join(link, "mdev_type")); err == nil {
		m.Type = t
	} else if errors.Is(err, fs.ErrNotExist) {
		return m, fmt.Errorf("mdev %s: no mdev_type link under %s (removed during the read?): %w", uuid, link, ErrNotFound)
	} else {
		return m, fmt.Errorf("mdev %s: %w", uuid, err)
	}
	drv, err := root.linkBase(filepath.Join(link, "driver"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return m, fmt.Errorf("mdev %s: %w", uuid, err)
	}
	m.Driver = drv
	return m, nil
}

func sortMembers(m []GroupMember) {
	sort.Slice(m, func(i, j int) bool { return addrLess(m[i].Address, m[j].Address) })
}

func addrLess(a, b Address) bool {
	if a.Domain != b.Domain {
		return a.Domain < b.Domain
	}
	if a.Bus != b.Bus {
		return a.Bus < b.Bus
	}
	if a.Device != b.Device {
		return a.Device < b.Device
	}
	return a.Function < b.Function
}

// EvaluateGroup sets g.Viable and g.Blockers from g.Members: a group can be given to a guest
// when every endpoint is on vfio-pci or has no driver; bridges on pcieport (or shpchp, or no
// driver) may stay. Any other member is a blocker, named with its driver and the fix. An mdev
// instance (g.Mdevs) never blocks: the mdev core made the group for it, and a VM takes it by
// UUID through its mdev driver, not through vfio-pci.
func EvaluateGroup(g *Group) {
	g.Blockers = []Blocker{}
	for _, m := range g.Members {
		switch {
		case MemberViable(m.IsBridge, m.Driver):
		case m.IsBridge:
			g.Blockers = append(g.Blockers, Blocker{Address: m.Address, Driver: m.Driver,
				Reason: fmt.Sprintf("bridge bound to %s, not pcieport: unbind it or bind it to vfio-pci", m.Driver)})
		default:
			g.Blockers = append(g.Blockers, Blocker{Address: m.Address, Driver: m.Driver,
				Reason: fmt.Sprintf("class %s bound to host driver %s: the whole group must move to vfio-pci (vgpu-host bind binds every member)", m.Class, m.Driver)})
		}
	}
	g.Viable = len(g.Members)+len(g.Mdevs) > 0 && len(g.Blockers) == 0
}
