package host

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
)

// MdevInstance is one mediated-device instance as /sys/bus/mdev/devices/UUID shows it:
//
//	/sys/bus/mdev/devices/6666... -> ../../../devices/virtual/mdpy/mdpy/6666...   (parent "mdpy")
//	.../6666.../mdev_type   -> ../mdev_supported_types/mdpy-hd
//	.../6666.../iommu_group -> ../../../../../kernel/iommu_groups/14
//	.../6666.../driver      -> ../../../../../bus/mdev/drivers/mdpy
type MdevInstance struct {
	UUID string `json:"uuid"`
	// Parent is the parent device's name: a PCI address, or "mdpy" etc. for virtual parents.
	Parent string `json:"parent"`
	// ParentAddress is set when the parent is a PCI function.
	ParentAddress *Address `json:"parent_address,omitempty"`
	// Type is the mdev type id ("nvidia-558", "mdpy-hd"); TypeName its `name` attribute,
	// omitted when the type has none.
	Type     string `json:"type"`
	TypeName string `json:"type_name,omitempty"`
	// DeviceAPI is the type's device_api ("vfio-pci"), omitted when unreadable.
	DeviceAPI string `json:"device_api,omitempty"`
	// Driver is the mdev driver bound to the instance ("vfio_mdev", or the parent's own on
	// kernels >= 5.16); "" when none.
	Driver string `json:"driver"`
	// IOMMUGroup is the instance's own IOMMU group (its /dev/vfio/N); -1 when it has none.
	IOMMUGroup int `json:"iommu_group"`
}

// MdevInstanceExists reports whether the mdev instance uuid (lowercase, as the kernel names
// it) is on the bus: one lstat of ROOT/sys/bus/mdev/devices/UUID, for a caller that only waits
// for a removal to finish and needs none of ReadMdevInstance's reads.
func MdevInstanceExists(root Root, uuid string) bool {
	_, err := root.Lstat(root.Sys("bus", "mdev", "devices", uuid))
	return err == nil
}

// ReadMdevInstanceLinks reads what the two links of instance uuid say: that it exists, its
// parent (the bus link's target directory) and its type (the mdev_type link), with two
// readlinks and none of ReadMdevInstance's other reads: for a caller that removes or lists
// instances by parent and type and reads a type's name once for all its instances. TypeName,
// DeviceAPI and Driver are left empty and IOMMUGroup -1; errors are ReadMdevInstance's.
func ReadMdevInstanceLinks(root Root, uuid string) (MdevInstance, error) {
	if !IsMdevUUID(uuid) {
		return MdevInstance{}, fmt.Errorf("mdev instance %q: want a UUID (8-4-4-4-12 hex digits): %w", uuid, ErrInvalid)
	}
	uuid = strings.ToLower(uuid)
	m := MdevInstance{UUID: uuid, IOMMUGroup: -1}
	link := root.Sys("bus", "mdev", "devices", uuid)
	target, err := root.Readlink(link)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return m, fmt.Errorf("mdev instance %s: no %s (list instances with `vgpu-host mdev list`): %w", uuid, link, ErrNotFound)
		}
		return m, fmt.Errorf("mdev instance %s: read link %s: %w", uuid, link, err)
	}
	m.Parent = filepath.Base(filepath.Dir(target))
	if a, err := ParseAddress(m.Parent); err == nil {
		m.ParentAddress = &a
	}
	typeLink := filepath.Join(link, "mdev_type")
	m.Type, err = root.linkBase(typeLink)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return m, fmt.Errorf("mdev instance %s: no mdev_type link at %s (removed during the read?): %w", uuid, typeLink, ErrNotFound)
		}
		return m, fmt.Errorf("mdev instance %s: %w", uuid, err)
	}
	return m, nil
}

// MdevInstanceTypeName reads the name attribute of instance uuid's type through its mdev_type
// link: "" when the type has none (name is optional in the mdev ABI), an error when it cannot
// be read.
func MdevInstanceTypeName(root Root, uuid string) (string, error) {
	v, err := root.readAttr(root.Sys("bus", "mdev", "devices", strings.ToLower(uuid), "mdev_type", "name"))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	return v, err
}

// ReadMdevInstance reads the mdev instance uuid (any case; the kernel names instances in
// lowercase) from ROOT/sys/bus/mdev/devices. It returns an error satisfying
// errors.Is(err, ErrNotFound) when no such instance exists, and ErrInvalid when uuid is not a
// UUID. Optional attributes (the type's name and device_api) that cannot be read are returned
// as warnings naming the instance and the path.
func ReadMdevInstance(root Root, uuid string) (MdevInstance, []string, error) {
	m, err := ReadMdevInstanceLinks(root, uuid)
	if err != nil {
		return m, nil, err
	}
	uuid = m.UUID
	link := root.Sys("bus", "mdev", "devices", uuid)
	typeLink := filepath.Join(link, "mdev_type")
	var warnings []string
	if v, err := root.readAttr(filepath.Join(typeLink, "name")); err == nil {
		m.TypeName = v
	} else if !errors.Is(err, fs.ErrNotExist) { // name is optional in the mdev ABI
		warnings = append(warnings, fmt.Sprintf("mdev instance %s: %v", uuid, err))
	}
	if v, err := root.readAttr(filepath.Join(typeLink, "device_api")); err == nil {
		m.DeviceAPI = v
	} else {
		warnings = append(warnings, fmt.Sprintf("mdev instance %s: %v", uuid, err))
	}
	if m.Driver, err = root.linkBase(filepath.Join(link, "driver")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return m, warnings, fmt.Errorf("mdev instance %s: %w", uuid, err)
	}
	groupLink := filepath.Join(link, "iommu_group")
	g, err := root.linkBase(groupLink)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// No group: no IOMMU-backed vfio registration (the mdev driver is not bound).
	case err != nil:
		return m, warnings, fmt.Errorf("mdev instance %s: %w", uuid, err)
	default:
		id, err := strconv.Atoi(g)
		if err != nil {
			return m, warnings, fmt.Errorf("mdev instance %s: %s names %q, not a group number", uuid, groupLink, g)
		}
		m.IOMMUGroup = id
	}
	return m, warnings, nil
}

// ListMdevInstances names the entries of ROOT/sys/bus/mdev/devices, sorted (the active mdev
// instances by UUID): none, and no error, on a host without the mdev bus.
func ListMdevInstances(root Root) ([]string, error) {
	if err := root.CheckTree(); err != nil {
		return nil, fmt.Errorf("list mdev instances: %w", err)
	}
	dir := root.Sys("bus", "mdev", "devices")
	ents, err := root.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("list mdev instances in %s: %w", dir, err)
	}
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.Name()
	}
	return names, nil
}

// ReadMdevInstances reads every instance under ROOT/sys/bus/mdev/devices (see
// ReadMdevInstance), sorted by UUID. A host without the mdev bus returns an empty list and no
// error; an instance removed during the read is skipped; an entry that is not a UUID, or an
// instance that cannot be read, is a warning naming it.
func ReadMdevInstances(root Root) ([]MdevInstance, []string, error) {
	names, err := ListMdevInstances(root)
	if err != nil {
		return nil, nil, err
	}
	out := []MdevInstance{}
	var warnings []string
	for _, name := range names {
		m, w, err := ReadMdevInstance(root, name)
		warnings = append(warnings, w...)
		switch {
		case errors.Is(err, ErrNotFound):
			continue // removed while we read
		case err != nil:
			warnings = append(warnings, err.Error())
			continue
		}
		out = append(out, m)
	}
	return out, warnings, nil
}
