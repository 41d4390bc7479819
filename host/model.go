package host

// The inventory data model. JSON field names are a stable, documented interface
// (README "inspect --output json"): add fields, never rename or remove them.

// Inventory is what `vgpu-host inspect` reports about a host.
type Inventory struct {
	// Root is the --host-root the inventory was read from.
	Root string `json:"host_root"`
	// IOMMU reports whether the kernel has an active IOMMU (groups exist).
	IOMMU bool `json:"iommu"`
	// Devices are every display-class function (class 0x03xxxx) and every other member of
	// their IOMMU groups, plus SR-IOV VFs of GPUs; sorted by address.
	Devices []Device `json:"devices"`
	// Groups are the IOMMU groups of Devices and of mdev instances, sorted by id.
	Groups []Group `json:"groups"`
	// MdevParents are the devices that offer mediated-device types.
	MdevParents []MdevParent `json:"mdev_parents"`
	// Warnings are problems met while scanning (a device that vanished, an unreadable file).
	Warnings []string `json:"warnings,omitempty"`
}

// Device is one PCI function.
type Device struct {
	Address        Address     `json:"address"`
	VendorID       string      `json:"vendor_id"` // "10de"
	DeviceID       string      `json:"device_id"` // "2236"
	SubsysVendorID string      `json:"subsystem_vendor_id,omitempty"`
	SubsysDeviceID string      `json:"subsystem_device_id,omitempty"`
	VendorName     string      `json:"vendor_name,omitempty"` // from pci.ids
	DeviceName     string      `json:"device_name,omitempty"`
	SubsystemName  string      `json:"subsystem_name,omitempty"`
	Class          string      `json:"class"`      // "030000"
	ClassName      string      `json:"class_name"` // "VGA compatible controller"
	Driver         string      `json:"driver"`     // "" when no driver is bound
	DriverOverride string      `json:"driver_override,omitempty"`
	IOMMUGroup     int         `json:"iommu_group"` // -1 without an IOMMU
	NUMANode       int         `json:"numa_node"`   // -1 when the platform reports none
	LocalCPUs      string      `json:"local_cpulist,omitempty"`
	BootVGA        bool        `json:"boot_vga"`
	IsGPU          bool        `json:"is_gpu"`    // class 0x03xxxx
	IsBridge       bool        `json:"is_bridge"` // class 0x0604xx / 0x0600xx etc.
	ResetMethods   []string    `json:"reset_methods,omitempty"`
	BARs           []BAR       `json:"bars,omitempty"`
	Companions     []Address   `json:"companions,omitempty"`  // other functions of the same slot/group (HDMI audio, USB-C)
	SRIOV          *SRIOV      `json:"sriov,omitempty"`       // set on PFs
	PhysFn         *Address    `json:"physfn,omitempty"`      // set on VFs
	Mdev           *MdevParent `json:"-"`                     // set on mdev parents (also listed in MdevParents)
	VendorVGPU     *VendorVGPU `json:"vendor_vgpu,omitempty"` // NVIDIA vendor-specific VFIO files on a VF
}

// BAR is one memory or I/O region from the device's `resource` file.
type BAR struct {
	Index    int    `json:"index"`
	Start    uint64 `json:"start"`
	Size     uint64 `json:"size"`
	Is64     bool   `json:"is64"`
	Prefetch bool   `json:"prefetchable"`
	IO       bool   `json:"io"`
}

// SRIOV describes a physical function's virtual functions.
type SRIOV struct {
	TotalVFs         int       `json:"total_vfs"`
	NumVFs           int       `json:"num_vfs"`
	DriversAutoprobe *bool     `json:"drivers_autoprobe,omitempty"`
	VFs              []Address `json:"vfs"`
	// Offset and Stride are sriov_offset and sriov_stride: VF i's routing ID is the PF's +
	// Offset + i*Stride (see VFAddresses). 0 when the kernel does not show them.
	Offset int `json:"vf_offset,omitempty"`
	Stride int `json:"vf_stride,omitempty"`
}

// Group is an IOMMU group: the smallest set of functions that can be given to a guest.
type Group struct {
	ID      int           `json:"id"`
	Members []GroupMember `json:"members"`
	// Viable is true when every endpoint is on vfio-pci or has no driver; bridges on
	// pcieport (or driverless) may stay.
	Viable bool `json:"viable"`
	// Blockers are the members that keep the group from being viable, with the reason.
	Blockers []Blocker `json:"blockers"`
	// Mdevs are the members that are mediated-device instances, listed by UUID rather than PCI
	// address. The kernel gives every mdev instance a group of its own (its /dev/vfio/N), so a
	// group has either PCI Members or Mdevs. Omitted when there are none.
	Mdevs []GroupMdev `json:"mdevs,omitempty"`
}

// GroupMdev is an mdev instance in an IOMMU group:
//
//	/sys/kernel/iommu_groups/14/devices/66666666-7777-8888-9999-000000000000 -> .../virtual/mdpy/mdpy/6666...
//	.../mdpy/mdpy/6666.../mdev_type -> ../mdev_supported_types/mdpy-hd
type GroupMdev struct {
	UUID   string `json:"uuid"`
	Parent string `json:"parent"` // the parent device: a PCI address, or "mdpy" etc. for virtual parents
	Type   string `json:"type"`   // the mdev type id, e.g. "nvidia-558", "mdpy-hd"
	Driver string `json:"driver"` // the mdev driver ("vfio_mdev", or the parent's own on kernels >= 5.16); "" when none
}

// GroupMember is one function of a group.
type GroupMember struct {
	Address  Address `json:"address"`
	Class    string  `json:"class"`
	Driver   string  `json:"driver"`
	IsBridge bool    `json:"is_bridge"`
	// DriverOverride is the function's driver_override ("" when unset).
	DriverOverride string `json:"driver_override,omitempty"`
	// BootVGA is true for the VGA device the firmware and the host console use (boot_vga=1).
	BootVGA bool `json:"boot_vga,omitempty"`
}

// Blocker names a group member that stops the group from being viable for vfio.
type Blocker struct {
	Address Address `json:"address"`
	Driver  string  `json:"driver"`
	Reason  string  `json:"reason"`
}

// MdevParent is a device that offers mediated-device types (mdev_supported_types).
type MdevParent struct {
	Parent  string     `json:"parent"`            // device name: a PCI address, or "mbochs" etc. for virtual parents
	Address *Address   `json:"address,omitempty"` // set when the parent is a PCI function
	Types   []MdevType `json:"types"`
}

// MdevType is one mdev type of a parent.
type MdevType struct {
	ID                 string   `json:"id"`   // directory name, e.g. "nvidia-558", "mbochs-2"
	Name               string   `json:"name"` // the `name` attribute, e.g. "GRID A100-4C"
	Description        string   `json:"description,omitempty"`
	DeviceAPI          string   `json:"device_api"`
	AvailableInstances int      `json:"available_instances"`
	Instances          []string `json:"instances"` // UUIDs of existing instances of this type
}

// VendorVGPU is NVIDIA's vendor-specific VFIO interface on a VF (vGPU 17+, kernel >= 6.8):
// the VF has nvidia/creatable_vgpu_types and nvidia/current_vgpu_type and no mdev bus.
type VendorVGPU struct {
	Creatable   []VendorVGPUType `json:"creatable"`
	CurrentType int              `json:"current_type"` // 0 = none
}

// VendorVGPUType is one "ID : NAME" line of nvidia/creatable_vgpu_types.
type VendorVGPUType struct {
	ID   int    `json:"id"`
	Name string `json:"name"`
}
