package lifecycle

import (
	"context"
	"errors"
	"fmt"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/mdev"
	"github.com/vgpu-host/vgpu-host/step"
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

// Preflight returns the binder's safety refusals for the groups of addrs, changing nothing.
func (p *SysfsPrep) Preflight(_ context.Context, addrs []host.Address) ([]vfio.Refusal, error) {
	return p.Binder.Preflight(addrs)
}

// BindGroup binds the whole IOMMU groups of addrs to vfio-pci for vm, past the checks force
// names.
func (p *SysfsPrep) BindGroup(ctx context.Context, vm string, addrs []host.Address, force []string) error {
	if _, err := p.Binder.Bind(ctx, addrs, vfio.BindOptions{Owner: vm, ForceChecks: force}); err != nil {
		return fmt.Errorf("bind %s for %s: %w", step.JoinAddrs(addrs), vm, err)
	}
	return nil
}

// RestoreGroup gives the groups of addrs back to the drivers they had before vm's bind: only
// the functions the binder's ledger records for vm. Those it does not list were on vfio-pci
// before the bind (vfio-pci.ids=, another tool), and those it records for no VM were bound by
// the user (`vgpu-host bind`): the bind left both alone, so the restore does too, and
// `vgpu-host unbind` gives the user's back.
func (p *SysfsPrep) RestoreGroup(ctx context.Context, vm string, addrs []host.Address) error {
	l, err := p.Binder.Ledger()
	if err != nil {
		return fmt.Errorf("restore drivers of %s for %s: %w", step.JoinAddrs(addrs), vm, err)
	}
	var bound []host.Address
	for _, a := range addrs {
		if e, ok := l.Lookup(a); ok && e.Owner == vm {
			bound = append(bound, a)
		}
	}
	if len(bound) == 0 {
		return nil
	}
	if _, err := p.Binder.Unbind(ctx, bound, vfio.UnbindOptions{Owner: vm}); err != nil {
		return fmt.Errorf("restore drivers of %s for %s: %w", step.JoinAddrs(addrs), vm, err)
	}
	return nil
}

// CreateMdev creates vm's mdev instance number index, uuid, of type typ on parent.
func (p *SysfsPrep) CreateMdev(ctx context.Context, vm, parent, typ, uuid string, index int) error {
	if _, err := p.Mdev.Create(ctx, mdev.CreateRequest{Parent: parent, Profile: typ, Count: 1, UUIDs: []string{uuid}, Owner: vm, FirstIndex: index}); err != nil {
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

// AssignVGPU writes vendor vGPU type typ to VF vf for vm through the mdev manager's vendor
// backend, pinned to vf: the allocation decided which VF gets the type, and the manager must
// not pick another. The manager records vm as the VF's owner, so only vm's release clears it.
// Re-running converges (a VF holding typ for vm is left as is).
func (p *SysfsPrep) AssignVGPU(ctx context.Context, vm string, vf host.Address, typ string, index int) error {
	if _, err := p.Mdev.Create(ctx, mdev.CreateRequest{Parent: vf.String(), Profile: typ, Count: 1, Owner: vm, FirstIndex: index, VFs: []host.Address{vf}}); err != nil {
		return fmt.Errorf("assign vGPU type %s to VF %s for %s: %w", typ, vf, vm, err)
	}
	return nil
}

// ClearVGPU clears the vendor vGPU type of vf (writes 0) if vm set it: the mdev manager
// refuses a type recorded for another owner, or set by another tool. A VF that holds no type
// is already clear.
//
// One exception to "recorded": apply journals the step (VF and type) in the ledger before the
// write, and the manager records the owner after it, so a process killed between the two
// leaves the VF holding the journaled type with no owner record. The ledger's journal is then
// the record that vgpu-host set it for vm, and the type is cleared when it is exactly typ.
func (p *SysfsPrep) ClearVGPU(ctx context.Context, vm string, vf host.Address, typ string) error {
	_, err := p.Mdev.Remove(ctx, []string{vf.String()}, mdev.RemoveOptions{Owner: vm, Undefine: true})
	if errors.Is(err, host.ErrRefused) && typ != "" {
		if ins, ierr := p.Mdev.Instances(); ierr == nil {
			for _, in := range ins {
				if in.VF != nil && *in.VF == vf && in.Active && !in.Defined && in.Owner == "" && in.Type == typ {
					_, err = p.Mdev.Remove(ctx, []string{vf.String()}, mdev.RemoveOptions{Force: true, Undefine: true})
				}
			}
		}
	}
	if err != nil {
		return fmt.Errorf("clear vGPU type %s of VF %s for %s: %w", typ, vf, vm, err)
	}
	return nil
}
