package kube

import (
	"os"
	"path/filepath"
	"sort"

	"github.com/vgpu-host/vgpu-host/host"
)

// VFIOCdevs returns the VFIO device-cdev nodes of PCI function a ("/dev/vfio/devices/vfio3"),
// one per entry of its sysfs vfio-dev directory, which kernels ≥ 6.6 with VFIO_DEVICE_CDEV
// create for a function on vfio-pci:
//
//	/sys/bus/pci/devices/0000:41:00.0/vfio-dev/vfio3   →   /dev/vfio/devices/vfio3
//
// KubeVirt's own PCI device plugin hands these to the pod beside the group nodes, so that a
// launcher using iommufd can open the device; vgpu-host's does the same. The inventory does not
// carry them (they matter only here), hence this small reader. None on older kernels.
func VFIOCdevs(root host.Root, a host.Address) []string {
	ents, err := os.ReadDir(root.PCIDevice(a, "vfio-dev"))
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
