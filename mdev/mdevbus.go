package mdev

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"syscall"

	"github.com/google/uuid"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/internal/revert"
)

// The mdev backend. Layout (a 6.1 kernel):
//
//	/sys/class/mdev_bus/PARENT -> ../../devices/.../PARENT
//	PARENT/mdev_supported_types/TYPE/{name,description,device_api,available_instances,create,devices/}
//	/sys/bus/mdev/devices/UUID -> ../../../devices/.../PARENT/UUID  (UUID/mdev_type -> the type dir)

func (m *Manager) mdevBusDir() string { return m.Root.Sys("class", "mdev_bus") }

// mdevParents is the mdev backend's view of host.MdevParents: each parent with its driver and
// NUMA node (PCI parents), its types, and the types that have instances.
func (m *Manager) mdevParents() ([]Parent, error) {
	hps, err := host.MdevParents(m.Root)
	if err != nil {
		return nil, err
	}
	var out []Parent
	for _, hp := range hps {
		out = append(out, m.mdevParent(hp))
	}
	return out, nil
}

func (m *Manager) mdevParent(hp host.MdevParent) Parent {
	p := Parent{Name: hp.Parent, Address: hp.Address, Backend: BackendMdev, NUMA: -1}
	if hp.Address != nil {
		if l, err := host.ReadFunctionLinks(m.Root, *hp.Address); err == nil {
			p.Driver, p.NUMA = l.Driver, l.NUMANode
		}
	}
	for _, ht := range hp.Types {
		t := mdevType(ht)
		if len(t.Instances) > 0 {
			p.Running = append(p.Running, t.ID)
		}
		p.Types = append(p.Types, t)
	}
	return p
}

// mdevType is a host.MdevType as a Type: a type without a name attribute is named by its id.
func mdevType(ht host.MdevType) Type {
	t := Type{ID: ht.ID, Name: ht.Name, Description: ht.Description, DeviceAPI: ht.DeviceAPI,
		Available: ht.AvailableInstances, Instances: append([]string{}, ht.Instances...)}
	if t.Name == "" {
		t.Name = t.ID
	}
	sort.Strings(t.Instances)
	return t
}

// listedMdevs is the set of instances the mdev bus lists now (host.ListMdevInstances; empty
// on a host without the bus); ok is false when the bus could not be listed.
func (m *Manager) listedMdevs() (map[string]bool, bool) {
	names, err := host.ListMdevInstances(m.Root)
	if err != nil {
		return nil, false
	}
	set := make(map[string]bool, len(names))
	for _, n := range names {
		set[n] = true
	}
	return set, true
}

// activeMdev reads instance id's parent and type from its links on the mdev bus
// (host.ReadMdevInstanceLinks: what every caller compares); ok is false when the instance does
// not exist (or its links cannot be read).
func (m *Manager) activeMdev(id string) (host.MdevInstance, bool) {
	in, err := host.ReadMdevInstanceLinks(m.Root, id)
	return in, err == nil
}

// mdevInstances returns the mdev instances, active and defined, with their owners from st.
// With only non-nil (lowercase UUIDs) it returns just those: each is read on its own instead of
// the whole bus (Remove names the instances it removes; reading every other one cost a 16-instance
// remove in the lab about as much as removing them).
func (m *Manager) mdevInstances(st *state, only []string) ([]Instance, error) {
	var act []host.MdevInstance
	var err error
	if only == nil {
		if act, _, err = host.ReadMdevInstances(m.Root); err != nil {
			return nil, err
		}
	} else {
		// Only what an Instance holds: parent and type from the two links, and each type's
		// name read once for all its instances (a remove of 16 instances of one type read the
		// name, device_api, driver and group of each: 96 reads where 33 say the same).
		names := map[string]string{}
		for _, id := range only {
			// As ReadMdevInstances: one that is gone or cannot be read is not listed.
			a, err := host.ReadMdevInstanceLinks(m.Root, id)
			if err != nil {
				continue
			}
			key := a.Parent + "/" + a.Type
			name, ok := names[key]
			if !ok {
				name, _ = host.MdevInstanceTypeName(m.Root, a.UUID)
				names[key] = name
			}
			a.TypeName = name
			act = append(act, a)
		}
	}
	defs, err := m.Definitions()
	if err != nil {
		return nil, err
	}
	if only != nil {
		want := make(map[string]bool, len(only))
		for _, id := range only {
			want[id] = true
		}
		kept := defs[:0]
		for _, d := range defs {
			if want[d.UUID] {
				kept = append(kept, d)
			}
		}
		defs = kept
	}
	byID := map[string]*Instance{}
	var order []string
	for _, a := range act {
		in := &Instance{Backend: BackendMdev, Parent: a.Parent, Type: a.Type, TypeName: a.TypeName, UUID: a.UUID, Active: true}
		byID[a.UUID] = in
		order = append(order, a.UUID)
	}
	var inactive bool
	for _, d := range defs {
		in, ok := byID[d.UUID]
		if !ok {
			in = &Instance{Backend: BackendMdev, Parent: d.Parent, Type: d.Type, UUID: d.UUID}
			byID[d.UUID] = in
			order = append(order, d.UUID)
			inactive = true
		}
		in.Defined = true
		in.Start = d.Start
	}
	// A defined instance that is not active takes its type's name from its parent's types.
	names := map[string]string{}
	if inactive {
		hps, err := host.MdevParents(m.Root)
		if err != nil {
			return nil, err
		}
		for _, hp := range hps {
			for _, ht := range hp.Types {
				names[hp.Parent+"/"+ht.ID] = ht.Name
			}
		}
	}
	out := make([]Instance, 0, len(order))
	for _, id := range order {
		in := byID[id]
		if i, ok := st.find(id); ok {
			in.Owner, in.Index = st.Instances[i].Owner, st.Instances[i].Index
		}
		if !in.Active {
			in.TypeName = names[in.Parent+"/"+in.Type]
		}
		out = append(out, *in)
	}
	return out, nil
}

// createMdev creates count instances of type t on parent p: the given uuids, or UUIDs derived
// from owner (InstanceUUID(owner, firstIndex+i)), or random ones. An instance that already
// exists with the same parent and type counts as created (a re-run converges); one with
// another parent or type is a conflict. The number of missing instances is checked against
// available_instances first, and a failure part-way removes what this call created.
func (m *Manager) createMdev(ctx context.Context, p Parent, t Type, req CreateRequest) ([]Instance, error) {
	ids := make([]string, req.Count)
	for i := range ids {
		switch {
		case len(req.UUIDs) > 0:
			u, err := ParseUUID(req.UUIDs[i])
			if err != nil {
				return nil, fmt.Errorf("create %s on %s: %w: %w", t.ID, p.Name, host.ErrInvalid, err)
			}
			ids[i] = u
		case req.Owner != "":
			ids[i] = InstanceUUID(req.Owner, req.FirstIndex+i)
		default:
			ids[i] = uuid.NewString()
		}
	}
	typeDir := filepath.Join(m.mdevBusDir(), p.Name, "mdev_supported_types", t.ID)
	out := make([]Instance, len(ids))
	var missing []int
	// One listing of the bus tells which exist: only those are read (16 failed readlinks,
	// each with an error built, for a new VM's instances).
	listed, lok := m.listedMdevs()
	for i, id := range ids {
		out[i] = Instance{Backend: BackendMdev, Parent: p.Name, Type: t.ID, TypeName: t.Name, UUID: id, Owner: req.Owner, Index: req.FirstIndex + i, Active: true}
		if lok && !listed[id] {
			missing = append(missing, i)
			continue
		}
		a, ok := m.activeMdev(id)
		switch {
		case !ok:
			missing = append(missing, i)
		case a.Parent != p.Name || a.Type != t.ID:
			return nil, fmt.Errorf("create mdev %s (%s on %s): %w: it already exists as %s on %s (remove it first: vgpu-host mdev remove %s)",
				id, t.ID, p.Name, host.ErrBusy, a.Type, a.Parent, id)
		}
	}
	if len(missing) > t.Available {
		return nil, fmt.Errorf("create %d× %s on %s: %w: %s reports available_instances=%d, so nothing was created (remove instances, or pick another parent or a smaller type)",
			len(missing), t.ID, p.Name, host.ErrBusy, filepath.Join(typeDir, "available_instances"), t.Available)
	}
	// The state file is updated after the kernel writes; a broken one must stop the create
	// before any of them, not after (the revert would then undo every instance).
	if _, err := m.readState(); err != nil {
		return nil, err
	}
	// The create writes as one run (host.WriteEach), each undone if a later step fails.
	rv := revert.New()
	writes := make([]host.RecordedWrite, len(missing))
	for k, i := range missing {
		writes[k] = host.RecordedWrite{Path: filepath.Join(typeDir, "create"), Value: ids[i]}
	}
	n, werr := host.WriteEach(ctx, m.W, m.timeout(), writes)
	for _, i := range missing[:n] {
		id := ids[i]
		rv.Add(func() error {
			return m.write(context.WithoutCancel(ctx), m.Root.Sys("bus", "mdev", "devices", id, "remove"), "1")
		})
	}
	if werr != nil {
		uerr := rv.Fail()
		return nil, revert.Wrap(mdevCreateErr(p, t, ids[missing[n]], typeDir, werr, m.undoNote(rv.Len(), "instance(s)")), uerr)
	}
	err := m.updateState(func(st *state) error {
		for _, in := range out {
			st.put(stateEntry{Backend: BackendMdev, Parent: in.Parent, Type: in.Type, UUID: in.UUID, Owner: in.Owner, Index: in.Index})
		}
		return nil
	})
	if err != nil {
		return nil, revert.Wrap(err, rv.Fail())
	}
	rv.Success()
	return out, nil
}

// undoNote says, for an error that stops a multi-step create, what happens to the n steps this
// call made before it: undone (the caller's revert runs next), nothing to undo, or, in a dry
// run, nothing changed at all (the writes were only recorded).
func (m *Manager) undoNote(n int, what string) string {
	switch {
	case m.DryRun && n > 0:
		return fmt.Sprintf("nothing was changed (dry run; a real run would undo the %d %s made before this)", n, what)
	case m.DryRun:
		return "nothing was changed (dry run)"
	case n == 0:
		return "nothing was changed"
	}
	return fmt.Sprintf("undid the %d %s this call made", n, what)
}

// mdevCreateErr explains a failed create write; undone says what became of this call's
// earlier instances (undoNote).
func mdevCreateErr(p Parent, t Type, id, typeDir string, err error, undone string) error {
	where := filepath.Join(typeDir, "create")
	switch errno(err) {
	case syscall.EUSERS, syscall.ENOSPC:
		return fmt.Errorf("create mdev %s (%s on %s) via %s: %w: the parent has no room left for this type (another type may be running on it); %s: %w",
			id, t.ID, p.Name, where, host.ErrBusy, undone, err)
	case syscall.EEXIST:
		return fmt.Errorf("create mdev %s via %s: %w: the UUID is already in use: %w", id, where, host.ErrBusy, err)
	case syscall.ENOENT, syscall.ENODEV:
		return fmt.Errorf("create mdev %s via %s: %w: the type or parent vanished (driver unloaded?): %w", id, where, host.ErrNotFound, err)
	}
	return fmt.Errorf("create mdev %s (%s on %s) via %s: %w", id, t.ID, p.Name, where, err)
}

// removeMdev removes an active mdev instance (a missing one is already removed): removeMdevs
// of one.
func (m *Manager) removeMdev(ctx context.Context, id string) error {
	_, err := m.removeMdevs(ctx, []string{id})
	return err
}

// removeMdevs removes active mdev instances in order, with their remove writes made as one
// run (host.WriteEach: one goroutine for them all), and returns how many are removed when one
// fails. The caller has just read the instances as active, so they are not read again first: a
// remove attribute that is gone by its write (ENOENT) means the instance went meanwhile. The
// kernel's remove_store deletes the device before the write returns (mdev_device_remove →
// device_del), so one listing of the bus afterwards normally finds them all gone; one is still
// there only when another remover's removal is in progress (device_remove_file_self lost the
// race and the write returned at once), and then this waits for it. (A look at each instance's
// link after its own write was, in the lab's TCG guest, a sixth of a 16-instance remove beyond
// the kernel's work, #32.)
func (m *Manager) removeMdevs(ctx context.Context, ids []string) (int, error) {
	writes := make([]host.RecordedWrite, len(ids))
	for i, id := range ids {
		writes[i] = host.RecordedWrite{Path: filepath.Join(m.Root.Sys("bus", "mdev", "devices", id), "remove"), Value: "1"}
	}
	for start := 0; start < len(ids); {
		n, err := host.WriteEach(ctx, m.W, m.timeout(), writes[start:])
		start += n
		if err == nil {
			break
		}
		id, path := ids[start], writes[start].Path
		switch errno(err) {
		case syscall.ENOENT:
			start++ // gone meanwhile
			continue
		case syscall.EBUSY:
			return start, fmt.Errorf("remove mdev %s via %s: %w: a VM (or another process) has it open; stop the VM first: %w", id, path, host.ErrBusy, err)
		}
		return start, fmt.Errorf("remove mdev %s via %s: %w", id, path, err)
	}
	if m.DryRun {
		return len(ids), nil
	}
	listed, lok := m.listedMdevs() // unreadable: each is looked at below
	for i, id := range ids {
		if lok && !listed[id] {
			continue
		}
		if err := m.wait(ctx, func() (bool, error) { return !host.MdevInstanceExists(m.Root, id), nil }); err != nil {
			return i, err
		}
	}
	return len(ids), nil
}
