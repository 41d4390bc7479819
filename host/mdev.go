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

// MdevParents lists the devices under ROOT/sys/class/mdev_bus with their types: PCI functions
// (NVIDIA vGPU up to 16.x, Intel GVT-g) and virtual parents such as the kernel's mbochs, mdpy
// and mtty samples. A host without the mdev bus returns an empty list and no error. Attributes
// that cannot be read are left at their zero value (Scan reports them as warnings).
//
//	/sys/class/mdev_bus/mdpy -> ../../devices/virtual/mdpy/mdpy
//	.../mdpy/mdev_supported_types/mdpy-hd/{name,description,device_api,available_instances,devices/UUID}
//
// MdevParents drops those problems; ReadMdevParents returns them.
func MdevParents(root Root) ([]MdevParent, error) {
	return newScanner(root).mdevParents()
}

// ReadMdevParents is MdevParents that also returns the problems met (a type attribute that
// cannot be read, a parent whose types cannot be listed), each naming the parent and path.
func ReadMdevParents(root Root) ([]MdevParent, []string, error) {
	s := newScanner(root)
	p, err := s.mdevParents()
	sort.Strings(s.warnings)
	return p, s.warnings, err
}

func (s *scanner) mdevParents() ([]MdevParent, error) {
	if err := s.root.CheckTree(); err != nil {
		return []MdevParent{}, fmt.Errorf("list mdev parents: %w", err)
	}
	dir := s.root.Sys("class", "mdev_bus")
	ents, err := s.root.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return []MdevParent{}, nil
		}
		return []MdevParent{}, fmt.Errorf("list mdev parents: %w", err)
	}
	out := []MdevParent{}
	for _, e := range ents {
		out = append(out, s.mdevParent(dir, e.Name()))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Parent < out[j].Parent })
	return out, nil
}

// mdevParent reads parent name under dir (ROOT/sys/class/mdev_bus).
func (s *scanner) mdevParent(dir, name string) MdevParent {
	p := MdevParent{Parent: name, Types: []MdevType{}}
	if a, err := ParseAddress(name); err == nil {
		p.Address = &a
	}
	types, err := s.mdevTypes(name, filepath.Join(dir, name, "mdev_supported_types"))
	if err != nil {
		s.warn("%v", err)
	}
	p.Types = types
	return p
}

// MdevParentNamed is the one parent of MdevParents named name (a PCI address as the kernel
// writes it, or a virtual parent's name such as "mbochs"), read alone: a command that names
// its parent need not read every other parent's types. ok is false when ROOT/sys/class/
// mdev_bus has no such entry.
func MdevParentNamed(root Root, name string) (p MdevParent, ok bool) {
	dir := root.Sys("class", "mdev_bus")
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return MdevParent{}, false
	}
	if _, err := root.Stat(filepath.Join(dir, name)); err != nil {
		return MdevParent{}, false
	}
	return newScanner(root).mdevParent(dir, name), true
}

// mdevTypes reads every type directory of one parent.
func (s *scanner) mdevTypes(parent, dir string) ([]MdevType, error) {
	ents, err := s.root.ReadDir(dir)
	if err != nil {
		return []MdevType{}, fmt.Errorf("mdev parent %s: list types: %w", parent, err)
	}
	types := []MdevType{}
	for _, e := range ents {
		// Each type's files are read relative to its directory, opened once (devDir): the
		// parent's path is a symlink deep into the device hierarchy.
		td := s.root.devDir(filepath.Join(dir, e.Name()))
		t := MdevType{ID: e.Name(), Instances: []string{}}
		// name is optional in the kernel's mdev ABI (mtty has none on some kernels).
		if v, err := td.str("name"); err == nil {
			t.Name = v
		} else if !errors.Is(err, fs.ErrNotExist) {
			s.warn("mdev parent %s: %v", parent, err)
		}
		if v, err := td.str("description"); err == nil {
			t.Description = v
		}
		if v, err := td.str("device_api"); err == nil {
			t.DeviceAPI = v
		} else {
			s.warn("mdev parent %s: %v", parent, err)
		}
		if v, err := td.int("available_instances"); err == nil {
			t.AvailableInstances = int(v)
		} else {
			s.warn("mdev parent %s: %v", parent, err)
		}
		if inst, err := td.names("devices"); err == nil {
			t.Instances = append(t.Instances, inst...)
		} else {
			s.warn("mdev parent %s: list instances of %s: %v", parent, e.Name(), err)
		}
		td.close()
		types = append(types, t)
	}
	return types, nil
}

// ReadVendorVGPU reads NVIDIA's vendor-specific vGPU files of a VF (vGPU 17+ on
// Ada/Hopper/Blackwell with kernel >= 6.8, which has no mdev bus). It returns nil and no error
// when the device has no ROOT/sys/bus/pci/devices/ADDR/nvidia/creatable_vgpu_types.
//
//	$ cat nvidia/creatable_vgpu_types        $ cat nvidia/current_vgpu_type
//	ID    : vGPU Name                        0
//	1155  : NVIDIA L40S-1Q
func ReadVendorVGPU(root Root, addr Address) (*VendorVGPU, error) {
	dd := root.devDir(root.PCIDevice(addr))
	defer dd.close()
	return readVendorVGPU(addr, dd)
}

// readVendorVGPU is ReadVendorVGPU of the function addr whose directory is dd.
func readVendorVGPU(addr Address, dd devDir) (*VendorVGPU, error) {
	const creatable = "nvidia/creatable_vgpu_types"
	var page [4096]byte // parsed from here: the one copy kept is the string the names are cut from
	b, err := dd.fileIn(creatable, "", &page)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("%s: read %s: %w", addr, dd.path(creatable), err)
	}
	types, err := ParseCreatableVGPUTypes(string(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", addr, dd.path(creatable), err)
	}
	v := &VendorVGPU{Creatable: types}
	v.CurrentType, err = readCurrentVGPUType(addr, dd)
	return v, err
}

// ParseCreatableVGPUTypes parses the text of nvidia/creatable_vgpu_types: an optional header
// line ("ID    : vGPU Name") and then one "ID : NAME" line per type the VF can still take. An
// empty file (or a header alone) means nothing more can be created on this GPU.
func ParseCreatableVGPUTypes(s string) ([]VendorVGPUType, error) {
	// One slice of the right size at most, the lines cut in place (strings.Split made a slice
	// of them all, and Atoi an error for the header): every VF on a vGPU host has this file.
	out := make([]VendorVGPUType, 0, strings.Count(s, "\n")+1)
	for i, rest := 0, s; rest != ""; i++ {
		line, more, _ := strings.Cut(rest, "\n")
		rest = more
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		id, name, ok := strings.Cut(line, ":")
		if !ok {
			return out, fmt.Errorf("creatable_vgpu_types line %d: want \"ID : NAME\", got %s", i+1, quoted(line))
		}
		id = strings.TrimSpace(id)
		n, ok := atoiDigits(id)
		if !ok {
			err := errNotDigits
			if id != "" && strings.IndexByte("+-0123456789", id[0]) >= 0 {
				n, err = strconv.Atoi(id) // what Atoi alone may still take: a sign, 19+ digits
			}
			if err != nil {
				if i == 0 || len(out) == 0 && strings.EqualFold(id, "ID") {
					continue // the header line
				}
				return out, fmt.Errorf("creatable_vgpu_types line %d: type ID %s is not a number", i+1, quoted(id))
			}
		}
		out = append(out, VendorVGPUType{ID: n, Name: strings.TrimSpace(name)})
	}
	return out, nil
}

// errNotDigits stands for Atoi's error where Atoi is not asked (the header's "ID").
var errNotDigits = errors.New("not a number")

// atoiDigits is strconv.Atoi of 1 to 18 decimal digits (no sign: those, and anything else,
// are left to Atoi), without the error Atoi allocates for a word such as the header's "ID".
func atoiDigits(s string) (int, bool) {
	if len(s) == 0 || len(s) > 18 {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}
