package mdev

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/internal/filelock"
	"github.com/vgpu-host/vgpu-host/internal/revert"
)

// Persistence. Three records bring the host's vGPU state back after a reboot, applied by
// Restore in this order:
//
//  1. SR-IOV VF counts: root.Etc("vgpu-host", "sriov.json") (EnableVFs with Persist).
//  2. Vendor-VFIO types: the state file (every recorded VF gets its type back).
//  3. mdev instances: mdevctl's own files, root.Etc("mdevctl.d", PARENT, UUID):
//
//     {"mdev_type": "nvidia-471", "start": "auto", "attrs": []}
//
//     so `mdevctl list --defined` and libvirt's node-device API (which uses mdevctl) see them.

// Definition is one persistent mdev definition in mdevctl's format.
type Definition struct {
	UUID   string `json:"uuid"`
	Parent string `json:"parent"`
	Type   string `json:"mdev_type"`
	// Start is "auto" (created at boot / when the parent appears) or "manual".
	Start string `json:"start"`
	// Attrs are mdevctl's ordered attributes: [{"name": "value"}, ...], written to the
	// instance's sysfs directory after it is created.
	Attrs []map[string]string `json:"attrs"`
	// Path is the definition file.
	Path string `json:"path"`
}

// mdevctlFile is the on-disk JSON of an mdevctl definition (field order as mdevctl writes it).
type mdevctlFile struct {
	MdevType string              `json:"mdev_type"`
	Start    string              `json:"start"`
	Attrs    []map[string]string `json:"attrs"`
}

func (m *Manager) mdevctlDir(elem ...string) string {
	return m.Root.Etc(append([]string{"mdevctl.d"}, elem...)...)
}

// Definitions reads every mdevctl definition under root.Etc("mdevctl.d"), sorted by parent and
// UUID. Files that are not UUIDs (scripts.d) are skipped.
func (m *Manager) Definitions() ([]Definition, error) {
	defs, bad, err := m.scanDefinitions()
	if err != nil {
		return nil, err
	}
	if len(bad) > 0 {
		return nil, bad[0].err
	}
	return defs, nil
}

// badFile is a file that could not be read or parsed, and why.
type badFile struct {
	path string
	err  error
}

// scanDefinitions reads every definition it can: bad holds each file that could not be read or
// parsed, err an unreadable mdevctl.d.
func (m *Manager) scanDefinitions() (defs []Definition, bad []badFile, err error) {
	parents, err := m.Root.ReadDir(m.mdevctlDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read mdev definitions in %s: %w", m.mdevctlDir(), err)
	}
	var out []Definition
	for _, p := range parents {
		if !p.IsDir() || p.Name() == "scripts.d" {
			continue
		}
		files, err := m.Root.ReadDir(m.mdevctlDir(p.Name()))
		if err != nil {
			bad = append(bad, badFile{m.mdevctlDir(p.Name()), fmt.Errorf("read mdev definitions in %s: %w", m.mdevctlDir(p.Name()), err)})
			continue
		}
		for _, f := range files {
			// A directory (or anything else) named as a definition is a bad file, not
			// skipped: host restore reports it as a failed step naming the path.
			id, err := ParseUUID(f.Name())
			if err != nil {
				continue
			}
			path := m.mdevctlDir(p.Name(), f.Name())
			b, err := m.Root.ReadFileLimit(path, host.MaxStateFileSize)
			if err != nil {
				bad = append(bad, badFile{path, fmt.Errorf("read mdev definition %s: %w", path, err)})
				continue
			}
			var mf mdevctlFile
			if err := json.Unmarshal(b, &mf); err != nil {
				bad = append(bad, badFile{path, fmt.Errorf("read mdev definition %s: %w: %v", path, host.ErrInvalid, err)})
				continue
			}
			out = append(out, Definition{UUID: id, Parent: p.Name(), Type: mf.MdevType, Start: mf.Start, Attrs: mf.Attrs, Path: path})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Parent != out[j].Parent {
			return out[i].Parent < out[j].Parent
		}
		return out[i].UUID < out[j].UUID
	})
	return out, bad, nil
}

// Define writes a persistent definition for an mdev instance. Parent and type come from the
// active instance when they are empty; an existing identical definition is left alone, and a
// definition of the same UUID under another parent is replaced (mdevctl would list both).
// In a dry run the file is not written; the returned Definition says what would be.
func (m *Manager) Define(d Definition) (Definition, error) {
	if m.DryRun {
		return m.define(d)
	}
	var out Definition
	err := m.withDefinitionsLock(func() (err error) {
		out, err = m.define(d)
		return err
	})
	return out, err
}

// withDefinitionsLock runs fn holding the lock of the mdevctl definitions
// (ROOT/var/lib/vgpu-host/mdevctl.lock: mdevctl.d itself is mdevctl's directory, so the lock
// file stays out of it).
func (m *Manager) withDefinitionsLock(fn func() error) error {
	return filelock.WithIn(m.Root, m.Root.StateDir("mdevctl.lock"), filelock.Exclusive, filelock.DefaultTimeout, fn)
}

func (m *Manager) define(d Definition) (Definition, error) {
	id, err := ParseUUID(d.UUID)
	if err != nil {
		return Definition{}, fmt.Errorf("define mdev: %w: %w", host.ErrInvalid, err)
	}
	d.UUID = id
	if a, ok := m.activeMdev(id); ok {
		if d.Parent == "" {
			d.Parent = a.Parent
		}
		if d.Type == "" {
			d.Type = a.Type
		}
	}
	if d.Parent == "" || d.Type == "" {
		return Definition{}, fmt.Errorf("define mdev %s: %w: it is not active, so name its --parent and --type", id, host.ErrNotFound)
	}
	// Both become part of a path (mdevctl.d/PARENT/UUID) or of one mdevctl writes in sysfs.
	if err := errors.Join(host.CheckComponent("mdev parent", d.Parent), host.CheckComponent("mdev type", d.Type)); err != nil {
		return Definition{}, fmt.Errorf("define mdev %s: %w", id, err)
	}
	if d.Start == "" {
		d.Start = "auto"
	}
	if d.Start != "auto" && d.Start != "manual" {
		return Definition{}, fmt.Errorf("define mdev %s: %w: start %q (auto or manual)", id, host.ErrInvalid, d.Start)
	}
	// Resolve a type name ("A100-4C") to its directory name as mdevctl needs it.
	// A parent that is not present now keeps the type as given (mdevctl allows that too).
	if p, err := m.Parent(d.Parent); err == nil {
		t, err := LookupType(p, d.Type)
		if err != nil {
			return Definition{}, fmt.Errorf("define mdev %s: %w (types: %s)", id, err, typeList(p.Types))
		}
		d.Type = t.ID
		d.Parent = p.Name
	}
	if d.Attrs == nil {
		d.Attrs = []map[string]string{}
	}
	d.Path = m.mdevctlDir(d.Parent, id)
	b, err := json.MarshalIndent(mdevctlFile{MdevType: d.Type, Start: d.Start, Attrs: d.Attrs}, "", "  ")
	if err != nil {
		return Definition{}, fmt.Errorf("define mdev %s: %w", id, err)
	}
	b = append(b, '\n')
	if m.DryRun {
		return d, nil
	}
	if old, err := m.Root.ReadFileLimit(d.Path, host.MaxStateFileSize); err == nil && string(old) == string(b) {
		return d, nil
	}
	defs, err := m.Definitions()
	if err != nil {
		return Definition{}, err
	}
	for _, o := range defs {
		if o.UUID == id && o.Path != d.Path {
			if err := m.Root.Remove(o.Path); err != nil {
				return Definition{}, fmt.Errorf("define mdev %s: remove the old definition %s: %w", id, o.Path, err)
			}
		}
	}
	if err := m.Root.WriteFileAtomic(d.Path, b, 0o644); err != nil {
		return Definition{}, fmt.Errorf("define mdev %s: %w", id, err)
	}
	return d, nil
}

// Undefine deletes the persistent definitions of id (a missing one is already undefined) and
// returns the files it removed.
func (m *Manager) Undefine(id string) ([]string, error) {
	if m.DryRun {
		return m.undefine(id)
	}
	var removed []string
	err := m.withDefinitionsLock(func() (err error) {
		removed, err = m.undefine(id)
		return err
	})
	return removed, err
}

func (m *Manager) undefine(id string) ([]string, error) {
	u, err := ParseUUID(id)
	if err != nil {
		return nil, fmt.Errorf("undefine mdev: %w: %w", host.ErrInvalid, err)
	}
	defs, err := m.Definitions()
	if err != nil {
		return nil, err
	}
	var removed []string
	for _, d := range defs {
		if d.UUID != u {
			continue
		}
		if !m.DryRun {
			if err := m.Root.Remove(d.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return removed, fmt.Errorf("undefine mdev %s: %w", u, err)
			}
		}
		removed = append(removed, d.Path)
	}
	return removed, nil
}

// PersistedPF is a VF count `host restore` applies at boot.
type PersistedPF struct {
	Address string `json:"address"`
	NumVFs  int    `json:"num_vfs"`
	Driver  string `json:"driver"`
}

type sriovFile struct {
	Version int           `json:"version"`
	PFs     []PersistedPF `json:"pfs"`
}

// SRIOVPath is where persisted VF counts live.
func (m *Manager) SRIOVPath() string { return m.Root.Etc("vgpu-host", "sriov.json") }

// PersistedPFs returns the VF counts recorded for boot, sorted by address.
func (m *Manager) PersistedPFs() ([]PersistedPF, error) {
	b, err := m.Root.ReadFileLimit(m.SRIOVPath(), host.MaxStateFileSize)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read persisted VF counts %s: %w", m.SRIOVPath(), err)
	}
	var f sriovFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("read persisted VF counts %s: %w: %v", m.SRIOVPath(), host.ErrInvalid, err)
	}
	return f.PFs, nil
}

func (m *Manager) persistedPF(a host.Address) (PersistedPF, bool) {
	ps, _ := m.PersistedPFs()
	for _, p := range ps {
		if p.Address == a.String() {
			return p, true
		}
	}
	return PersistedPF{}, false
}

// writePersisted edits sriov.json under its lock (sriov.lock beside it), so parallel
// vf enable --persist runs each see the others' records.
func (m *Manager) writePersisted(edit func([]PersistedPF) []PersistedPF) error {
	if m.DryRun {
		return m.editPersisted(edit)
	}
	// Before the lock file beside it is created: not even that goes through a link out of root.
	if err := m.Root.CheckInside(m.SRIOVPath()); err != nil {
		return fmt.Errorf("persist VF counts: %w", err)
	}
	return filelock.WithIn(m.Root, filelock.Sibling(m.SRIOVPath()), filelock.Exclusive, filelock.DefaultTimeout, func() error {
		return m.editPersisted(edit)
	})
}

func (m *Manager) editPersisted(edit func([]PersistedPF) []PersistedPF) error {
	ps, err := m.PersistedPFs()
	if err != nil {
		return err
	}
	ps = edit(ps)
	sort.Slice(ps, func(i, j int) bool { return ps[i].Address < ps[j].Address })
	if m.DryRun {
		return nil
	}
	b, err := json.MarshalIndent(sriovFile{Version: 1, PFs: ps}, "", "  ")
	if err != nil {
		return err
	}
	return m.Root.WriteFileAtomic(m.SRIOVPath(), append(b, '\n'), 0o644)
}

func (m *Manager) persistPF(p PersistedPF) error {
	return m.writePersisted(func(ps []PersistedPF) []PersistedPF {
		for i := range ps {
			if ps[i].Address == p.Address {
				ps[i] = p
				return ps
			}
		}
		return append(ps, p)
	})
}

func (m *Manager) forgetPF(a host.Address) error {
	return m.writePersisted(func(ps []PersistedPF) []PersistedPF {
		var out []PersistedPF
		for _, p := range ps {
			if p.Address != a.String() {
				out = append(out, p)
			}
		}
		return out
	})
}

// RestoreStep is one thing Restore did or checked.
type RestoreStep struct {
	Kind   string `json:"kind"` // "sriov", "vendor-vgpu", "mdev"
	Target string `json:"target"`
	Want   string `json:"want"`
	// Result is "applied", "already", "skipped" or "failed".
	Result string `json:"result"`
	Error  string `json:"error,omitempty"`
	// Duration is how long the step took (reading the current state and, if needed, applying).
	Duration time.Duration `json:"-"`
}

// Restore re-applies the persisted host state, in the order guests need it: VF counts first
// (vendor vGPU VFs and mdev parents on VFs need them), then vendor-VFIO types from the state
// file, then mdev definitions with start "auto". Everything already in place is left alone.
// It carries on past a failed step and returns every failure joined.
func (m *Manager) Restore(ctx context.Context) ([]RestoreStep, error) {
	return m.RestoreEach(ctx, nil)
}

// RestoreEach is Restore that also hands each step to each (when not nil) as soon as it is
// done, so a caller can log it while the rest runs (the agent's boot reconcile does).
func (m *Manager) RestoreEach(ctx context.Context, each func(RestoreStep)) ([]RestoreStep, error) {
	var steps []RestoreStep
	var errs []error
	t0 := time.Now() // start of the current step: reset after each one is recorded
	add := func(s RestoreStep) {
		s.Duration = time.Since(t0)
		steps = append(steps, s)
		if each != nil {
			each(s)
		}
		t0 = time.Now()
	}
	record := func(kind, target, want string, already bool, err error) {
		s := RestoreStep{Kind: kind, Target: target, Want: want, Result: "applied"}
		switch {
		case err != nil:
			s.Result, s.Error = "failed", err.Error()
			errs = append(errs, err)
		case already:
			s.Result = "already"
		}
		add(s)
	}

	// A file that cannot be read is one failed step: the others are still restored.
	pfs, err := m.PersistedPFs()
	if err != nil {
		record("sriov", m.SRIOVPath(), "", false, err)
	}
	for _, p := range pfs {
		a, err := host.ParseAddress(p.Address)
		if err != nil {
			record("sriov", p.Address, "", false, fmt.Errorf("restore VFs: %w: bad address %q in %s", host.ErrInvalid, p.Address, m.SRIOVPath()))
			continue
		}
		want := fmt.Sprintf("%d VFs, driver %s", p.NumVFs, p.Driver)
		cur, err := m.ReadPF(a)
		if err != nil {
			record("sriov", p.Address, want, false, err)
			continue
		}
		already := cur.NumVFs == p.NumVFs && (p.Driver != DriverVFIO || allOn(cur.VFs, DriverVFIO))
		if p.NumVFs == 0 {
			_, err = m.DisableVFs(ctx, a, false)
		} else {
			_, err = m.EnableVFs(ctx, a, p.NumVFs, EnableOptions{Driver: p.Driver})
		}
		record("sriov", p.Address, want, already, err)
	}

	st, err := m.readState()
	if err != nil {
		record("vendor-vgpu", m.statePath(), "", false, err)
		st = &state{}
	}
	for _, e := range st.Instances {
		if e.Backend != BackendNvidiaVFIO {
			continue
		}
		want := "vGPU type " + e.Type
		a, err := host.ParseAddress(e.VF)
		if err != nil {
			record("vendor-vgpu", e.VF, want, false, fmt.Errorf("restore vGPU type: %w: bad VF %q in %s", host.ErrInvalid, e.VF, m.statePath()))
			continue
		}
		cur, err := host.ReadCurrentVGPUType(m.Root, a)
		if err != nil {
			record("vendor-vgpu", e.VF, want, false, fmt.Errorf("restore vGPU type %s on VF %s: %w: %w (are its VFs enabled and the vGPU driver loaded?)", e.Type, e.VF, host.ErrNotFound, err))
			continue
		}
		if strconv.Itoa(cur) == e.Type {
			record("vendor-vgpu", e.VF, want, true, nil)
			continue
		}
		id, _ := strconv.Atoi(e.Type)
		if cur != 0 {
			record("vendor-vgpu", e.VF, want, false, fmt.Errorf("restore vGPU type %s on VF %s: %w: it holds type %d now", e.Type, e.VF, host.ErrBusy, cur))
			continue
		}
		record("vendor-vgpu", e.VF, want, false, m.assignVendor(ctx, a, id, Type{ID: e.Type}))
	}

	defs, bad, err := m.scanDefinitions()
	if err != nil {
		record("mdev", m.mdevctlDir(), "", false, err)
	}
	for _, b := range bad {
		record("mdev", b.path, "", false, b.err)
	}
	for _, d := range defs {
		want := d.Type + " on " + d.Parent
		if d.Start != "auto" {
			add(RestoreStep{Kind: "mdev", Target: d.UUID, Want: want, Result: "skipped"})
			continue
		}
		if a, ok := m.activeMdev(d.UUID); ok && a.Parent == d.Parent && a.Type == d.Type {
			record("mdev", d.UUID, want, true, nil)
			continue
		}
		err := m.startDefinition(ctx, d)
		record("mdev", d.UUID, want, false, err)
	}
	return steps, errors.Join(errs...)
}

// startDefinition creates a defined mdev and writes its attributes in the definition's order
// (mdevctl's attrs are an ordered list of one-key objects). Like mdevctl's start, it is all or
// none: if an attribute cannot be written, the instance it just created is removed again, so a
// later restore retries instead of finding an instance without its attributes "already" there.
func (m *Manager) startDefinition(ctx context.Context, d Definition) error {
	dir := m.Root.Sys("bus", "mdev", "devices", d.UUID)
	type kv struct{ k, v string }
	var attrs []kv
	for _, attr := range d.Attrs {
		keys := make([]string, 0, len(attr))
		for k := range attr {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if k == "" || k == "." || k == ".." || strings.Contains(k, "/") {
				return fmt.Errorf("start mdev %s: %w: attribute %q in %s", d.UUID, host.ErrInvalid, k, d.Path)
			}
			attrs = append(attrs, kv{k, attr[k]})
		}
	}
	p, t, err := m.ResolveType(d.Parent, d.Type)
	if err != nil {
		return fmt.Errorf("start mdev %s: %w", d.UUID, err)
	}
	st, err := m.readState()
	if err != nil {
		return fmt.Errorf("start mdev %s: %w", d.UUID, err)
	}
	owner, index := "", 0
	if i, ok := st.find(d.UUID); ok {
		owner, index = st.Instances[i].Owner, st.Instances[i].Index
	}
	if _, err := m.createMdev(ctx, p, t, CreateRequest{Count: 1, UUIDs: []string{d.UUID}, Owner: owner, FirstIndex: index}); err != nil {
		return err
	}
	for _, a := range attrs {
		path := filepath.Join(dir, a.k)
		if err := m.write(ctx, path, a.v); err != nil {
			aerr := fmt.Errorf("start mdev %s: set attribute %s=%s via %s (from %s): %w; removed the instance again", d.UUID, a.k, a.v, path, d.Path, err)
			return revert.Wrap(aerr, m.removeMdev(context.WithoutCancel(ctx), d.UUID))
		}
	}
	return nil
}

func allOn(vfs []VF, driver string) bool {
	for _, v := range vfs {
		if v.Driver != driver {
			return false
		}
	}
	return true
}
