package mdev

import (
	"context"
	"fmt"
	"strings"

	"github.com/vgpu-host/vgpu-host/host"
)

// CheckRemove runs the checks Remove makes before it removes anything, and removes nothing:
// for each id (an mdev UUID or a VF address) that exists, the kernel's holders first (ErrBusy),
// then the allocation ledger and libvirt (ErrRefused naming the VM), and a vendor-VFIO type
// vgpu-host did not set. A planner (host layout) calls it for every instance it would remove,
// so that a refusal comes before the first write. Missing ids pass (already gone).
func (m *Manager) CheckRemove(ctx context.Context, ids []string, opts RemoveOptions) error {
	st, err := m.readState()
	if err != nil {
		return err
	}
	all, err := m.instances(st)
	if err != nil {
		return err
	}
	var named []Instance
	for _, raw := range ids {
		id, err := instanceID(raw)
		if err != nil {
			return err
		}
		for _, in := range all {
			if in.ID() == id {
				named = append(named, in)
			}
		}
	}
	hx := m.holderIndex(named, opts)
	for _, in := range named {
		if err := m.checkRemovable(ctx, in, st, opts, hx); err != nil {
			return err
		}
	}
	return nil
}

// instanceID normalises an instance's name: a VF address in the kernel's form, or a UUID.
func instanceID(raw string) (string, error) {
	id := strings.ToLower(strings.TrimSpace(raw))
	if a, err := host.ParseAddress(id); err == nil {
		return a.String(), nil
	} else if u, err := ParseUUID(id); err == nil {
		return u, nil
	}
	return "", fmt.Errorf("remove %q: %w: name an mdev UUID or a VF address", raw, host.ErrInvalid)
}
