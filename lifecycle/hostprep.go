package lifecycle

import (
	"context"
	"fmt"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/mdev"
	"github.com/vgpu-host/vgpu-host/vfio"
)

// SysfsPrep is the HostPrep that changes the host through the vfio binder and the mdev
// manager (both writing through their host.Writer: the real sysfs, or hosttest.Kernel on a
// fake tree). The VM name is the owner both record, so only this VM's release undoes them.
type SysfsPrep struct {
	Binder *vfio.Binder
	Mdev   *mdev.Manager
}

// NewSysfsPrep returns the SysfsPrep for root, writing through w and loading modules with m.
func NewSysfsPrep(root host.Root, w host.Writer, m host.ModuleLoader) *SysfsPrep {
	return &SysfsPrep{
		Binder: &vfio.Binder{Root: root, W: w, Modules: m},
		Mdev:   mdev.New(root, w),
	}
}

// BindGroup binds the whole IOMMU groups of addrs to vfio-pci for vm.
func (p *SysfsPrep) BindGroup(ctx context.Context, vm string, addrs []host.Address) error {
	if _, err := p.Binder.Bind(ctx, addrs, vfio.BindOptions{Owner: vm}); err != nil {
		return fmt.Errorf("bind %s for %s: %w", joinAddrs(addrs), vm, err)
	}
	return nil
}

// RestoreGroup gives the groups of addrs back to the drivers they had before vm's bind.
func (p *SysfsPrep) RestoreGroup(ctx context.Context, vm string, addrs []host.Address) error {
	if _, err := p.Binder.Unbind(ctx, addrs, vfio.UnbindOptions{Owner: vm}); err != nil {
		return fmt.Errorf("restore drivers of %s for %s: %w", joinAddrs(addrs), vm, err)
	}
	return nil
}

// CreateMdev creates mdev uuid of type typ on parent for vm.
func (p *SysfsPrep) CreateMdev(ctx context.Context, vm, parent, typ, uuid string) error {
	if _, err := p.Mdev.Create(ctx, mdev.CreateRequest{Parent: parent, Profile: typ, Count: 1, UUIDs: []string{uuid}, Owner: vm}); err != nil {
		return fmt.Errorf("create mdev %s for %s: %w", uuid, vm, err)
	}
	return nil
}

// RemoveMdev removes mdev uuid (an already removed instance is fine).
func (p *SysfsPrep) RemoveMdev(ctx context.Context, vm, uuid string) error {
	if _, err := p.Mdev.Remove(ctx, []string{uuid}, mdev.RemoveOptions{Owner: vm, Undefine: true}); err != nil {
		return fmt.Errorf("remove mdev %s of %s: %w", uuid, vm, err)
	}
	return nil
}
