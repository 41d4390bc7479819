package mdev

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/internal/filelock"
	"github.com/vgpu-host/vgpu-host/internal/revert"
	"github.com/vgpu-host/vgpu-host/vfio"
)

// CreateRequest asks for Count instances of one profile on one parent.
type CreateRequest struct {
	// Parent names the parent: a PCI address (a VF's address names its GPU for the
	// vendor-VFIO backend) or a virtual parent's name ("mbochs").
	Parent string
	// Profile is a type ID or name (see MatchType).
	Profile string
	// Count is the number of instances (default 1).
	Count int
	// UUIDs are explicit UUIDs for mdev instances (len(UUIDs) == Count); optional.
	UUIDs []string
	// Owner is the VM the instances are for: mdev UUIDs derive from it, and the state file
	// records it so only this owner's release clears them.
	Owner string
	// FirstIndex is the owner's index of the first instance (when one VM's instances span
	// several parents, the second parent's instances continue the numbering).
	FirstIndex int
	// VFs pins the VFs of a vendor-VFIO request, one per instance (len(VFs) == Count), for a
	// caller that allocated them itself (apply: its allocation decides which VF gets which
	// type). Without it, free VFs are taken in address order. A pinned VF that holds a type,
	// is recorded for another instance, or no longer lists the type is ErrBusy; nothing else
	// is tried.
	VFs []host.Address
}

// ResolveType returns the parent and type a request names, or an error listing what exists.
func (m *Manager) ResolveType(parent, profile string) (Parent, Type, error) {
	p, err := m.Parent(parent)
	if err != nil {
		return Parent{}, Type{}, err
	}
	t, err := LookupType(p, profile)
	if errors.Is(err, host.ErrInvalid) {
		return Parent{}, Type{}, err
	}
	if err != nil {
		running := ""
		if p.Backend == BackendNvidiaVFIO && len(p.Running) > 0 {
			var rs []string
			for _, id := range p.Running {
				rs = append(rs, typeDisplay(p, id))
			}
			running = fmt.Sprintf("; the GPU runs %s, and the driver offers one type per GPU at a time", strings.Join(rs, ", "))
		}
		return Parent{}, Type{}, fmt.Errorf("%w%s", err, running)
	}
	return p, t, nil
}

// Create creates req.Count instances of req.Profile on req.Parent, all or none. Instances that
// already exist for the same owner/UUID and type count as created, so a re-run converges.
func (m *Manager) Create(ctx context.Context, req CreateRequest) ([]Instance, error) {
	if req.Count == 0 {
		req.Count = 1
		if len(req.UUIDs) > 0 {
			req.Count = len(req.UUIDs)
		}
	}
	if req.Count < 0 {
		return nil, fmt.Errorf("create vGPU instances: %w: count %d", host.ErrInvalid, req.Count)
	}
	if len(req.UUIDs) > 0 && len(req.UUIDs) != req.Count {
		return nil, fmt.Errorf("create vGPU instances: %w: %d UUIDs for count %d", host.ErrInvalid, len(req.UUIDs), req.Count)
	}
	// One create at a time: the check of what exists and what is free, the kernel writes and
	// the state record form one step, so two runs for one VM converge on the same instances
	// instead of the second failing (EEXIST) and undoing what the first made.
	if !m.DryRun {
		lock, err := filelock.AcquireIn(m.Root, m.Root.StateDir("vgpu-create.lock"), filelock.Exclusive, filelock.DefaultTimeout)
		if err != nil {
			return nil, fmt.Errorf("create vGPU instances: %w", err)
		}
		defer lock.Release()
	}
	p, t, err := m.ResolveType(req.Parent, req.Profile)
	if err != nil {
		return nil, err
	}
	if len(req.VFs) > 0 && (p.Backend != BackendNvidiaVFIO || len(req.VFs) != req.Count) {
		return nil, fmt.Errorf("create vGPU instances on %s: %w: %d pinned VFs for count %d (VFs are for vendor-VFIO parents only, one per instance)", p.Name, host.ErrInvalid, len(req.VFs), req.Count)
	}
	// A parent (or a pinned VF) that failed its handback check gets no new instance
	// (docs/health.md): the guest would get a broken device.
	quarantinable := append([]host.Address(nil), req.VFs...)
	if p.Address != nil {
		quarantinable = append([]host.Address{*p.Address}, req.VFs...)
	}
	if err := vfio.RefuseQuarantined(m.Root, fmt.Sprintf("create %s on %s", t.ID, p.Name), quarantinable...); err != nil {
		return nil, err
	}
	if p.Backend == BackendNvidiaVFIO {
		return m.createVendor(ctx, p, t, req)
	}
	return m.createMdev(ctx, p, t, req)
}

// CreatePlacement creates the instances of a placement for owner, numbering them across
// parents from 0. It is all or none: a failure on a later parent removes what earlier parents
// got in this call. Re-running with the same owner converges.
func (m *Manager) CreatePlacement(ctx context.Context, owner string, p Placement) ([]Instance, error) {
	var out []Instance
	rv := revert.New()
	index := 0
	for _, a := range p.Assignments {
		got, err := m.Create(ctx, CreateRequest{Parent: a.Parent, Profile: a.Type, Count: a.Count, Owner: owner, FirstIndex: index})
		if err != nil {
			return nil, revert.Wrap(err, rv.Fail())
		}
		for _, in := range got {
			in := in
			rv.Add(func() error { return m.remove(context.WithoutCancel(ctx), in) })
		}
		out = append(out, got...)
		index += a.Count
	}
	rv.Success()
	return out, nil
}

// RemoveOptions controls Remove.
type RemoveOptions struct {
	// Force removes instances a libvirt domain uses, and vendor-VFIO types vgpu-host did not set.
	Force bool
	// Owner, when set, refuses instances recorded for another owner (unless Force).
	Owner string
	// Undefine also deletes the instance's persistent definition (mdevctl JSON / vendor state).
	Undefine bool
}

// Remove removes the instances named by ids (mdev UUIDs or VF addresses). Missing instances
// are already removed. An instance a libvirt domain uses is refused (host.ErrRefused) unless
// opts.Force; so is a vendor-VFIO type this tool did not set. Every instance is checked before
// any is removed.
func (m *Manager) Remove(ctx context.Context, ids []string, opts RemoveOptions) ([]Instance, error) {
	st, err := m.readState()
	if err != nil {
		return nil, err
	}
	all, err := m.instancesOf(st, ids)
	if err != nil {
		return nil, err
	}
	return m.removeFrom(ctx, all, st, ids, opts)
}

// removeFrom is Remove over an instance list and state the caller read once.
func (m *Manager) removeFrom(ctx context.Context, all []Instance, st *state, ids []string, opts RemoveOptions) ([]Instance, error) {
	var todo []Instance
	for _, raw := range ids {
		id, err := instanceID(raw)
		if err != nil {
			return nil, err
		}
		var found *Instance
		for i := range all {
			if all[i].ID() == id {
				found = &all[i]
			}
		}
		if found == nil {
			continue // already gone
		}
		todo = append(todo, *found)
	}
	hx := m.holderIndex(todo, opts)
	for _, in := range todo {
		if err := m.checkRemovable(ctx, in, st, opts, hx); err != nil {
			return nil, err
		}
	}
	done, rerr := m.removeInOrder(ctx, todo, opts)
	// One state update for the whole batch (each one takes the lock and rewrites the file).
	serr := m.updateState(func(st *state) error {
		for _, in := range done {
			if in.Backend == BackendNvidiaVFIO || !in.Defined || opts.Undefine {
				st.drop(in.ID())
			}
		}
		return nil
	})
	return done, errors.Join(rerr, serr)
}

// removeInOrder removes todo's instances in order, each undefined after its removal with
// opts.Undefine, and returns those removed until one failed. A run of active mdev instances is
// removed as one (removeMdevs: one run of remove writes, one look at the bus after them).
func (m *Manager) removeInOrder(ctx context.Context, todo []Instance, opts RemoveOptions) ([]Instance, error) {
	var done []Instance
	finish := func(in Instance) error {
		if opts.Undefine && in.Backend == BackendMdev {
			if _, err := m.Undefine(in.UUID); err != nil {
				return err
			}
			in.Defined = false
		}
		done = append(done, in)
		return nil
	}
	for i := 0; i < len(todo); {
		in := todo[i]
		if in.Backend != BackendMdev || !in.Active {
			if err := m.removeActive(ctx, in); err != nil {
				return done, err
			}
			if err := finish(in); err != nil {
				return done, err
			}
			i++
			continue
		}
		j := i
		var ids []string
		for ; j < len(todo) && todo[j].Backend == BackendMdev && todo[j].Active; j++ {
			ids = append(ids, todo[j].UUID)
		}
		n, err := m.removeMdevs(ctx, ids)
		for _, in := range todo[i : i+n] {
			if ferr := finish(in); ferr != nil {
				return done, ferr
			}
		}
		if err != nil {
			return done, err
		}
		i = j
	}
	return done, nil
}

// RemoveOwner removes every instance recorded for owner (see Remove for the checks).
func (m *Manager) RemoveOwner(ctx context.Context, owner string, opts RemoveOptions) ([]Instance, error) {
	if owner == "" {
		return nil, fmt.Errorf("remove instances: %w: empty owner", host.ErrInvalid)
	}
	st, err := m.readState()
	if err != nil {
		return nil, err
	}
	// Only the state file records owners, so the owner's instances are among its entries.
	var recorded []string
	for _, e := range st.Instances {
		if e.Owner == owner {
			recorded = append(recorded, e.id())
		}
	}
	all, err := m.instancesOf(st, recorded)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, in := range all {
		if in.Owner == owner {
			ids = append(ids, in.ID())
		}
	}
	opts.Owner = owner
	return m.removeFrom(ctx, all, st, ids, opts)
}

// OwnerInstances returns the instances recorded for owner, by index.
func (m *Manager) OwnerInstances(owner string) ([]Instance, error) {
	all, err := m.Instances()
	if err != nil {
		return nil, err
	}
	var out []Instance
	for _, in := range all {
		if in.Owner == owner && owner != "" {
			out = append(out, in)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Index < out[j].Index })
	return out, nil
}

// holders are the processes holding instances' /dev/vfio/GROUP open, from one search of every
// process's open files for all the instances a call checks (not one per instance).
type holders struct {
	node map[string]string        // instance ID -> its /dev/vfio/GROUP (host path), "" for none
	by   map[string][]host.Holder // node -> holders
}

// holderIndex searches once for the holders of every active instance of ins; nil when no
// check will ask (opts.Force).
func (m *Manager) holderIndex(ins []Instance, opts RemoveOptions) *holders {
	if opts.Force {
		return nil
	}
	hx := &holders{node: map[string]string{}, by: map[string][]host.Holder{}}
	var nodes []string
	for _, in := range ins {
		if !in.Active {
			continue
		}
		if n := m.vfioNode(in); n != "" {
			hx.node[in.ID()] = n
			nodes = append(nodes, n)
		}
	}
	for _, h := range host.Holders(m.Root, nodes) {
		hx.by[h.Path] = append(hx.by[h.Path], h)
	}
	return hx
}

// vfioNode is the host path of the /dev/vfio/GROUP through which a guest uses in, "" when it
// has no group.
func (m *Manager) vfioNode(in Instance) string {
	if in.Backend == BackendMdev {
		if mi, _, err := host.ReadMdevInstance(m.Root, in.UUID); err == nil && mi.IOMMUGroup >= 0 {
			return host.HostPath(m.Root, host.VFIODev(m.Root, mi.IOMMUGroup))
		}
	} else if in.VF != nil {
		if l, err := host.ReadFunctionLinks(m.Root, *in.VF); err == nil && l.IOMMUGroup >= 0 {
			return host.HostPath(m.Root, host.VFIODev(m.Root, l.IOMMUGroup))
		}
	}
	return ""
}

func (m *Manager) checkRemovable(ctx context.Context, in Instance, st *state, opts RemoveOptions, hx *holders) error {
	i, recorded := st.find(in.ID())
	if opts.Owner != "" && recorded && st.Instances[i].Owner != opts.Owner && !opts.Force {
		return fmt.Errorf("remove %s: %w: it was created for %q, not %q", in.ID(), host.ErrRefused, st.Instances[i].Owner, opts.Owner)
	}
	if in.Backend == BackendNvidiaVFIO && in.Active && !recorded && !opts.Force {
		return fmt.Errorf("clear vGPU type %s of VF %s: %w: vgpu-host did not set it (no record in %s); another tool or an operator did",
			in.Type, in.ID(), host.ErrRefused, m.statePath())
	}
	if opts.Force || !in.Active {
		return nil
	}
	return m.inUse(ctx, in, opts.Owner, hx)
}

// inUse says whether an active instance is in use, judged by the kernel first: a process
// holding its /dev/vfio/GROUP (a running guest's QEMU) is busy (host.ErrBusy), naming the
// process. Then the allocation ledger: an instance it gives to a VM other than owner is
// refused (host.ErrRefused): destroy that VM instead. libvirt, when reachable, names the
// domains whose configuration uses it (refused too); an unreachable libvirtd is no reason
// to refuse by itself.
func (m *Manager) inUse(ctx context.Context, in Instance, owner string, hx *holders) error {
	if hx == nil {
		hx = m.holderIndex([]Instance{in}, RemoveOptions{})
	}
	var doms []string
	if m.Domains != nil {
		doms, _ = m.Domains.DomainsUsing(ctx, in) // unreachable: the kernel and the ledger decide
	}
	used := ""
	if len(doms) > 0 {
		used = " (libvirt domain " + strings.Join(doms, ", ") + ")"
	}
	if hs := hx.by[hx.node[in.ID()]]; len(hs) > 0 {
		var parts []string
		for _, h := range hs {
			parts = append(parts, h.String())
		}
		return fmt.Errorf("remove %s: %w: in use%s: %s (stop the guest first, or --force)", in.ID(), host.ErrBusy, used, strings.Join(parts, "; "))
	}
	if m.Allocated != nil {
		if vm := m.Allocated(in); vm != "" && vm != owner {
			return fmt.Errorf("remove %s: %w: the allocation ledger gives it to VM %q%s; run vgpu-host destroy %s (or --force)", in.ID(), host.ErrRefused, vm, used, vm)
		}
	}
	if len(doms) > 0 {
		return fmt.Errorf("remove %s: %w: used by libvirt domain(s) %s (undefine them or detach the hostdev first, or --force)", in.ID(), host.ErrRefused, strings.Join(doms, ", "))
	}
	return nil
}

// removeActive removes one instance from the kernel (nothing when it is not active).
func (m *Manager) removeActive(ctx context.Context, in Instance) error {
	switch {
	case in.Backend == BackendNvidiaVFIO && in.Active:
		return m.clearVendor(ctx, *in.VF)
	case in.Backend == BackendMdev && in.Active:
		return m.removeMdev(ctx, in.UUID)
	}
	return nil
}

// remove removes one instance and drops its state record (kept for a defined mdev, so a
// restore knows its owner).
func (m *Manager) remove(ctx context.Context, in Instance) error {
	if err := m.removeActive(ctx, in); err != nil {
		return err
	}
	return m.updateState(func(st *state) error {
		if in.Backend == BackendNvidiaVFIO || !in.Defined {
			st.drop(in.ID())
		}
		return nil
	})
}
