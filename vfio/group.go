package vfio

import (
	"errors"

	"github.com/vgpu-host/vgpu-host/host"
)

// DriverName is the driver every endpoint of a passed-through group must be bound to.
const DriverName = host.VFIODriver

// ErrNotInLedger is returned by Unbind for a device vgpu-host did not bind.
var ErrNotInLedger = errors.New("not in the vgpu-host ledger")

// groupOf reads the IOMMU group of a (host.GroupOf) for the binder, which works on pointers.
func groupOf(root host.Root, a host.Address) (*host.Group, error) {
	g, err := host.GroupOf(root, a)
	if err != nil {
		return nil, err
	}
	return &g, nil
}
