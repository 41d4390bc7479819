package host

import (
	"fmt"
)

// IsVendorVF reports whether the function at addr uses NVIDIA's vendor-specific VFIO interface
// (vGPU 17+): it has nvidia/creatable_vgpu_types and no mdev_supported_types. The files exist
// while the VF is bound to the nvidia driver.
func IsVendorVF(root Root, addr Address) bool {
	return root.Exists(root.PCIDevice(addr, "nvidia", "creatable_vgpu_types")) &&
		!root.Exists(root.PCIDevice(addr, "mdev_supported_types"))
}

// ReadCurrentVGPUType reads nvidia/current_vgpu_type of a vendor-VFIO VF: the vGPU type ID
// assigned to it, 0 for none. This is what a caller reads back after writing the file.
func ReadCurrentVGPUType(root Root, vf Address) (int, error) {
	return readCurrentVGPUType(vf, root.pathDir(root.PCIDevice(vf)))
}

// readCurrentVGPUType is ReadCurrentVGPUType of the VF whose directory is dd.
func readCurrentVGPUType(vf Address, dd devDir) (int, error) {
	n, err := dd.int("nvidia/current_vgpu_type")
	if err != nil {
		return 0, fmt.Errorf("%s: %w", vf, err)
	}
	return int(n), nil
}
