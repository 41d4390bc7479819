package mdev

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"syscall"

	"github.com/google/uuid"

	"github.com/vgpu-host/vgpu-host/host"
)

// The mdev backend. Layout (a 6.1 kernel):
//
//	/sys/class/mdev_bus/PARENT -> ../../devices/.../PARENT
//	PARENT/mdev_supported_types/TYPE/{name,description,device_api,available_instances,create,devices/}
//	/sys/bus/mdev/devices/UUID -> ../../../devices/.../PARENT/UUID  (UUID/mdev_type -> the type dir)

func (m *Manager) mdevBusDir() string { return m.Root.Sys("class", "mdev_bus") }

// mdevParents reads every parent under /sys/class/mdev_bus.
func (m *Manager) mdevParents() ([]Parent, error) {
	ents, err := os.ReadDir(m.mdevBusDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list mdev parents in %s: %w", m.mdevBusDir(), err)
	}
	var out []Parent
	for _, e := range ents {
		p, err := m.mdevParent(e.Name())
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

func (m *Manager) mdevParent(name string) (Parent, error) {
	dir := filepath.Join(m.mdevBusDir(), name)
	p := Parent{Name: name, Backend: BackendMdev, NUMA: numaOf(dir)}
	if a, err := host.ParseAddress(name); err == nil {
		p.Address = &a
		p.Driver = m.driverOf(a)
	}
	tdir := filepath.Join(dir, "mdev_supported_types")
	ents, err := os.ReadDir(tdir)
	if err != nil {
		return Parent{}, fmt.Errorf("read mdev types of %s in %s: %w", name, tdir, err)
	}
	for _, e := range ents {
		t, err := readMdevType(filepath.Join(tdir, e.Name()))
		if err != nil {
			return Parent{}, fmt.Errorf("mdev parent %s: %w", name, err)
		}
		if len(t.Instances) > 0 {
			p.Running = append(p.Running, t.ID)
		}
		p.Types = append(p.Types, t)
	}
	return p, nil
}

func readMdevType(dir string) (Type, error) {
	t := Type{ID: filepath.Base(dir), Instances: []string{}}
	t.Name, _ = host.ReadString(filepath.Join(dir, "name"))
	if t.Name == "" {
		t.Name = t.ID
	}
	t.Description, _ = host.ReadString(filepath.Join(dir, "description"))
	t.DeviceAPI, _ = host.ReadString(filepath.Join(dir, "device_api"))
	n, err := host.ReadInt(filepath.Join(dir, "available_instances"))
	if err != nil {
		return Type{}, err
	}
	t.Available = int(n)
	ents, _ := os.ReadDir(filepath.Join(dir, "devices"))
	for _, e := range ents {
		t.Instances = append(t.Instances, e.Name())
	}
	sort.Strings(t.Instances)
	return t, nil
}

// activeMdev is an mdev instance as sysfs shows it.
type activeMdev struct {
	UUID, Parent, Type string
}

// activeMdev reads /sys/bus/mdev/devices/UUID; ok is false when the instance does not exist.
func (m *Manager) activeMdev(id string) (activeMdev, bool) {
	link := m.Root.Sys("bus", "mdev", "devices", id)
	dir, err := filepath.EvalSymlinks(link)
	if err != nil {
		return activeMdev{}, false
	}
	typeDir, err := filepath.EvalSymlinks(filepath.Join(dir, "mdev_type"))
	if err != nil {
		return activeMdev{}, false
	}
	return activeMdev{UUID: id, Parent: filepath.Base(filepath.Dir(dir)), Type: filepath.Base(typeDir)}, true
}

func (m *Manager) activeMdevs() ([]activeMdev, error) {
	d := m.Root.Sys("bus", "mdev", "devices")
	ents, err := os.ReadDir(d)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list mdev instances in %s: %w", d, err)
	}
	var out []activeMdev
	for _, e := range ents {
		if a, ok := m.activeMdev(e.Name()); ok {
			out = append(out, a)
		}
	}
	return out, nil
}

func (m *Manager) mdevInstances(st *state) ([]Instance, error) {
	act, err := m.activeMdevs()
	if err != nil {
		return nil, err
	}
	defs, err := m.Definitions()
	if err != nil {
		return nil, err
	}
	byID := map[string]*Instance{}
	var order []string
	for _, a := range act {
		in := &Instance{Backend: BackendMdev, Parent: a.Parent, Type: a.Type, UUID: a.UUID, Active: true}
		byID[a.UUID] = in
		order = append(order, a.UUID)
	}
	for _, d := range defs {
		in, ok := byID[d.UUID]
		if !ok {
			in = &Instance{Backend: BackendMdev, Parent: d.Parent, Type: d.Type, UUID: d.UUID}
			byID[d.UUID] = in
			order = append(order, d.UUID)
		}
		in.Defined = true
		in.Start = d.Start
	}
	names := map[string]string{}
	out := make([]Instance, 0, len(order))
	for _, id := range order {
		in := byID[id]
		if i, ok := st.find(id); ok {
			in.Owner, in.Index = st.Instances[i].Owner, st.Instances[i].Index
		}
		key := in.Parent + "/" + in.Type
		if _, ok := names[key]; !ok {
			names[key], _ = host.ReadString(filepath.Join(m.mdevBusDir(), in.Parent, "mdev_supported_types", in.Type, "name"))
		}
		in.TypeName = names[key]
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
	for i, id := range ids {
		out[i] = Instance{Backend: BackendMdev, Parent: p.Name, Type: t.ID, TypeName: t.Name, UUID: id, Owner: req.Owner, Index: req.FirstIndex + i, Active: true}
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
	rv := &revert{}
	for _, i := range missing {
		id := ids[i]
		if err := m.write(ctx, filepath.Join(typeDir, "create"), id); err != nil {
			uerr := rv.fail()
			return nil, errors.Join(mdevCreateErr(p, t, id, typeDir, err, m.undoNote(len(rv.undo), "instance(s)")), undoErr(uerr))
		}
		rv.add(func() error {
			return m.write(context.WithoutCancel(ctx), m.Root.Sys("bus", "mdev", "devices", id, "remove"), "1")
		})
	}
	err := m.updateState(func(st *state) error {
		for _, in := range out {
			st.put(stateEntry{Backend: BackendMdev, Parent: in.Parent, Type: in.Type, UUID: in.UUID, Owner: in.Owner, Index: in.Index})
		}
		return nil
	})
	if err != nil {
		return nil, errors.Join(err, undoErr(rv.fail()))
	}
	rv.success()
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

func undoErr(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("undo also failed, check by hand: %w", err)
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

// removeMdev removes an active mdev instance (a missing one is already removed).
func (m *Manager) removeMdev(ctx context.Context, id string) error {
	if _, ok := m.activeMdev(id); !ok {
		return nil
	}
	path := m.Root.Sys("bus", "mdev", "devices", id, "remove")
	if err := m.write(ctx, path, "1"); err != nil {
		if errno(err) == syscall.EBUSY {
			return fmt.Errorf("remove mdev %s via %s: %w: a VM (or another process) has it open; stop the VM first: %w", id, path, host.ErrBusy, err)
		}
		return fmt.Errorf("remove mdev %s via %s: %w", id, path, err)
	}
	return m.wait(ctx, func() (bool, error) { _, ok := m.activeMdev(id); return !ok, nil })
}
