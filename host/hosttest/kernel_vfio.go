package hosttest

import (
	"context"
	"os"
	"path/filepath"
)

// VFIOKernel is a Kernel that also removes /dev/vfio/N when the last function of group N
// leaves vfio-pci, as the real kernel does when vfio-pci's remove unregisters the group
// (Kernel alone only creates the node). Use it where a test asserts the node goes away.
type VFIOKernel struct {
	*Kernel
}

// NewVFIOKernel returns a VFIOKernel for t.
func NewVFIOKernel(t *Tree) VFIOKernel { return VFIOKernel{NewKernel(t)} }

// Write implements host.Writer: Kernel.Write, then drop /dev/vfio nodes of groups with no
// function left on vfio-pci.
func (k VFIOKernel) Write(ctx context.Context, path, value string) error {
	err := k.Kernel.Write(ctx, path, value)
	t := k.T
	groups, _ := filepath.Glob(filepath.Join(t.dir, "sys/kernel/iommu_groups/*"))
	for _, g := range groups {
		node := filepath.Join(t.dir, "dev/vfio", filepath.Base(g))
		if _, serr := os.Stat(node); serr != nil {
			continue
		}
		members, _ := os.ReadDir(filepath.Join(g, "devices"))
		onVFIO := false
		for _, m := range members {
			if l, lerr := os.Readlink(filepath.Join(g, "devices", m.Name(), "driver")); lerr == nil && filepath.Base(l) == "vfio-pci" {
				onVFIO = true
			}
			if _, merr := os.Lstat(filepath.Join(g, "devices", m.Name(), "mdev_type")); merr == nil {
				onVFIO = true // mdev groups keep their node while the instance exists
			}
		}
		if !onVFIO {
			os.Remove(node)
		}
	}
	return err
}
