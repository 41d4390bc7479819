package host

import (
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
)

// FunctionLinks is what a PCI function's own links and numa_node say about it, the cheap
// subset of ReadDevice that code acting on one function needs between writes:
//
//	devices/ADDR/driver      -> ../../../bus/pci/drivers/nvidia    Driver "nvidia"
//	devices/ADDR/physfn      -> ../0000:41:00.0                    PhysFn (on a VF)
//	devices/ADDR/iommu_group -> ../../../kernel/iommu_groups/27    IOMMUGroup 27
//	devices/ADDR/numa_node      1                                  NUMANode 1
type FunctionLinks struct {
	// Driver is the bound driver; "" when none.
	Driver string
	// PhysFn is the PF of a VF; nil on any other function.
	PhysFn *Address
	// IOMMUGroup is the function's group; -1 without an IOMMU.
	IOMMUGroup int
	// NUMANode is the function's NUMA node; -1 when the platform reports none.
	NUMANode int
}

// ReadFunctionLinks reads the FunctionLinks of the PCI function at addr. It returns an error
// satisfying errors.Is(err, ErrNotFound) when the device does not exist; a link or attribute
// that is missing or unreadable is left at its zero value (-1 for the numbers), as ReadDevice
// does.
func ReadFunctionLinks(root Root, addr Address) (FunctionLinks, error) {
	dir := root.PCIDevice(addr)
	if _, err := root.Lstat(dir); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return FunctionLinks{IOMMUGroup: -1, NUMANode: -1}, fmt.Errorf("PCI function %s: no %s: %w", addr, dir, ErrNotFound)
		}
		return FunctionLinks{IOMMUGroup: -1, NUMANode: -1}, fmt.Errorf("PCI function %s: %w", addr, err)
	}
	dd := root.devDir(dir)
	defer dd.close()
	l, _ := newScanner(root).functionLinks(addr, dd, nil)
	return l, nil
}

// functionLinks reads a function's links and numa_node, recording problems as warnings. When
// Scan's first pass read the function (pre), its iommu_group link and, from a PCI uevent, its
// driver are taken from there (the kernel prints DRIVER= from the driver the link points to).
// numaRead says numa_node was read: NUMANode -1 is then the kernel's "no node", not a failure.
func (s *scanner) functionLinks(addr Address, dd devDir, pre *firstRead) (l FunctionLinks, numaRead bool) {
	l = FunctionLinks{IOMMUGroup: -1, NUMANode: -1}
	if pre != nil && pre.id.hasIDs {
		l.Driver = pre.id.driver
	} else {
		l.Driver = s.optionalLink(addr, dd, "driver")
	}
	var g string
	if pre != nil && pre.hasGroup {
		g = pre.group
		if err := pre.groupErr; err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.warn("%s: %v", addr, err)
		}
	} else {
		g = s.optionalLink(addr, dd, "iommu_group")
	}
	if g != "" {
		if n, err := strconv.Atoi(g); err == nil {
			l.IOMMUGroup = n
		} else {
			s.warn("%s: iommu_group link %s names %q, not a group number", addr, dd.path("iommu_group"), g)
		}
	}
	if n, err := dd.int("numa_node"); err == nil {
		l.NUMANode, numaRead = int(n), true
	} else {
		s.warn("%s: %v", addr, err)
	}
	// The kernel makes a VF's physfn link and its PF's virtfnN link together and removes them
	// together (pci_iov_sysfs_link, pci_iov_remove_virtfn): in Scan, a VF whose PF was read
	// first (a VF's routing ID is above its PF's, and Scan reads in address order) takes its
	// PF from there, one readlink less per VF (512 on the 64-GPU host).
	if pf, ok := s.knownPF(addr); pre != nil && ok {
		l.PhysFn = &pf
	} else if pf := s.optionalLink(addr, dd, "physfn"); pf != "" {
		if a, err := ParseAddress(pf); err == nil {
			l.PhysFn = &a
		} else {
			s.warn("%s: physfn link names %q: %v", addr, pf, err)
		}
	}
	return l, numaRead
}

// knownPF is the PF whose virtfnN link named vf, when Scan read it (pfOf).
func (s *scanner) knownPF(vf Address) (Address, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pf, ok := s.pfOf[vf]
	return pf, ok
}

// ListPCIFunctions returns the address of every function under ROOT/sys/bus/pci/devices,
// sorted; entries that are not PCI addresses are skipped. A host without the directory
// returns an empty list and no error.
func ListPCIFunctions(root Root) ([]Address, error) {
	if err := root.CheckTree(); err != nil {
		return nil, fmt.Errorf("list PCI functions: %w", err)
	}
	dir := root.Sys("bus", "pci", "devices")
	ents, err := root.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return []Address{}, nil
		}
		return nil, fmt.Errorf("list PCI functions in %s: %w", dir, err)
	}
	out := make([]Address, 0, len(ents))
	for _, e := range ents {
		if a, err := ParseAddress(e.Name()); err == nil {
			out = append(out, a)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out, nil
}
