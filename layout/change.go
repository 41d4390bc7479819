package layout

import (
	"context"
	"slices"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/internal/revert"
	"github.com/vgpu-host/vgpu-host/mdev"
	"github.com/vgpu-host/vgpu-host/vfio"
)

// Op is what a HostChange does to the host: one type per action below, each made and undone by
// its own Do and Undo, as a VM's plan does with step.Step. A HostChange carries its Op beside the
// words people and JSON see (Action, Target, Detail, Instances); the Op is never marshalled.
//
// A layout's ops are not step's types even where they sound alike (create-mdev, bind): a
// step is owned by a VM (its undo releases what the VM's records name) and goes through
// step.HostPrep, while an op is the host's own, persisted (definitions, driverctl overrides,
// the VF count host restore applies) and made through the Manager and Binder the imperative
// commands use, with their dry run.
type Op interface {
	// Action says which change this is (ActRemoveMdev, ...), as HostChange.Action spells it.
	Action() string
	// Do makes the change. Its Outcome says what it created and, in a dry run, which files
	// it would write; Files may be set with an error too.
	Do(ctx context.Context, env Env) (Outcome, error)
	// Undo reverts a change Do made (done is what Do returned); a change with nothing to undo
	// returns nil.
	Undo(ctx context.Context, env Env, done Outcome) error
}

// Env is what an Op is made in: the host and the apply's options (which checks --force goes
// past, whether this is a dry run).
type Env struct {
	Host *Host
	ApplyOptions
}

// forced reports whether --force names check.
func (e Env) forced(check string) bool { return slices.Contains(e.Force, check) }

// Outcome is what one Op's Do did.
type Outcome struct {
	// Created are the instances it created (mdev UUIDs, VF addresses).
	Created []string
	// Files are the files a dry run would write or remove.
	Files []string
}

// RemoveMdev removes mdev instances and their definitions (mdev remove --undefine); its undo
// creates them again, with their UUIDs and definitions.
type RemoveMdev struct {
	// Instances are the IDs to remove (mdev UUIDs, or VF addresses of vendor types).
	Instances []string
	// Removed are the instances as they were, for the undo.
	Removed []mdev.Instance
}

// Action implements Op.
func (RemoveMdev) Action() string { return ActRemoveMdev }

// Do implements Op. A dry run lists the definitions it would remove.
func (o RemoveMdev) Do(ctx context.Context, env Env) (Outcome, error) {
	m := env.Host.Mdev
	var files []string
	if env.DryRun {
		defs, _ := m.Definitions()
		for _, d := range defs {
			if slices.Contains(o.Instances, d.UUID) {
				files = append(files, d.Path+" (removed)")
			}
		}
	}
	if _, err := m.Remove(ctx, o.Instances, mdev.RemoveOptions{Force: env.forced(checkInUse), Undefine: true}); err != nil {
		return Outcome{}, err
	}
	return Outcome{Files: files}, nil
}

// Undo puts the removed instances back.
func (o RemoveMdev) Undo(ctx context.Context, env Env, _ Outcome) error {
	return env.Host.recreate(ctx, o.Removed)
}

// UndefineMdev drops the definitions of instances that are not active; it is made and undone
// as RemoveMdev.
type UndefineMdev struct{ RemoveMdev }

// Action implements Op.
func (UndefineMdev) Action() string { return ActUndefineMdev }

// ClearVGPU clears the vendor vGPU type of VFs; it is made and undone as RemoveMdev (the
// Manager removes a vendor instance by clearing its VF's type).
type ClearVGPU struct{ RemoveMdev }

// Action implements Op.
func (ClearVGPU) Action() string { return ActClearVGPU }

// SetVFs changes PF's VF count from From to Count (vf enable/disable --persist); its undo
// brings back the count, driver and persistence it had.
type SetVFs struct {
	PF     host.Address
	Count  int
	Driver string // VF driver; empty with Count 0
	// From and FromDriver are the count and VF driver before; Persisted says whether a count
	// was persisted before.
	From       int
	FromDriver string
	Persisted  bool
}

// Action implements Op.
func (SetVFs) Action() string { return ActSetVFs }

// Do implements Op.
func (o SetVFs) Do(ctx context.Context, env Env) (Outcome, error) {
	return setVFs(ctx, env, o.PF, o.Count, o.Driver)
}

// Undo implements Op.
func (o SetVFs) Undo(ctx context.Context, env Env, _ Outcome) error {
	m := env.Host.Mdev
	if o.From == 0 {
		_, err := m.DisableVFsWith(ctx, o.PF, mdev.DisableOptions{Persist: !o.Persisted})
		return err
	}
	_, err := m.EnableVFs(ctx, o.PF, o.From, mdev.EnableOptions{Driver: o.FromDriver, Persist: o.Persisted})
	return err
}

// PersistVFs records the VF count PF has (Count, Driver) for host restore; the count does not
// change, so there is nothing to undo.
type PersistVFs struct {
	PF     host.Address
	Count  int
	Driver string
}

// Action implements Op.
func (PersistVFs) Action() string { return ActPersistVFs }

// Do implements Op.
func (o PersistVFs) Do(ctx context.Context, env Env) (Outcome, error) {
	return setVFs(ctx, env, o.PF, o.Count, o.Driver)
}

// Undo does nothing.
func (PersistVFs) Undo(context.Context, Env, Outcome) error { return nil }

// setVFs sets and persists pf's VF count (SetVFs and PersistVFs).
func setVFs(ctx context.Context, env Env, pf host.Address, count int, driver string) (Outcome, error) {
	m := env.Host.Mdev
	var err error
	if count == 0 {
		_, err = m.DisableVFsWith(ctx, pf, mdev.DisableOptions{Persist: true})
	} else {
		_, err = m.EnableVFs(ctx, pf, count, mdev.EnableOptions{Driver: driver, Persist: true})
	}
	if err != nil {
		return Outcome{}, err
	}
	if env.DryRun {
		return Outcome{Files: []string{m.SRIOVPath()}}, nil
	}
	return Outcome{}, nil
}

// CreateMdev creates Count mdev instances (UUIDs) of Type on Parent and defines each
// (start=auto) so host restore brings it back; its undo removes and undefines them.
type CreateMdev struct {
	Parent, Type string
	Count        int
	UUIDs        []string
}

// Action implements Op.
func (CreateMdev) Action() string { return ActCreateMdev }

// Do implements Op. A definition that fails removes the instances it created.
func (o CreateMdev) Do(ctx context.Context, env Env) (Outcome, error) {
	m := env.Host.Mdev
	ins, err := m.Create(ctx, mdev.CreateRequest{Parent: o.Parent, Profile: o.Type, Count: o.Count, UUIDs: o.UUIDs})
	if err != nil {
		return Outcome{}, err
	}
	var files []string
	for _, in := range ins {
		d, err := m.Define(mdev.Definition{UUID: in.UUID, Parent: in.Parent, Type: in.Type, Start: "auto"})
		if err != nil {
			return Outcome{}, revert.Wrap(err, removeCreated(context.WithoutCancel(ctx), env, ids(ins)))
		}
		if env.DryRun {
			files = append(files, d.Path)
		}
	}
	return Outcome{Created: ids(ins), Files: files}, nil
}

// Undo removes and undefines the instances Do created.
func (CreateMdev) Undo(ctx context.Context, env Env, done Outcome) error {
	return removeCreated(ctx, env, done.Created)
}

// SetVGPU gives Count free VFs of Parent vendor vGPU type Type; its undo clears them.
type SetVGPU struct {
	Parent, Type string
	Count        int
}

// Action implements Op.
func (SetVGPU) Action() string { return ActSetVGPU }

// Do implements Op; Outcome.Created are the VFs it gave the type.
func (o SetVGPU) Do(ctx context.Context, env Env) (Outcome, error) {
	ins, err := env.Host.Mdev.Create(ctx, mdev.CreateRequest{Parent: o.Parent, Profile: o.Type, Count: o.Count})
	if err != nil {
		return Outcome{}, err
	}
	return Outcome{Created: ids(ins)}, nil
}

// Undo clears the VFs Do gave the type.
func (SetVGPU) Undo(ctx context.Context, env Env, done Outcome) error {
	return removeCreated(ctx, env, done.Created)
}

// removeCreated removes (and undefines) the instances a change created.
func removeCreated(ctx context.Context, env Env, created []string) error {
	_, err := env.Host.Mdev.Remove(ctx, created, mdev.RemoveOptions{Force: true, Undefine: true})
	return err
}

// DefineMdev defines active instances (start=auto) so host restore brings them back. The
// instances were there before, so there is nothing to undo.
type DefineMdev struct {
	UUIDs []string
}

// Action implements Op.
func (DefineMdev) Action() string { return ActDefineMdev }

// Do implements Op.
func (o DefineMdev) Do(ctx context.Context, env Env) (Outcome, error) {
	var files []string
	for _, id := range o.UUIDs {
		d, err := env.Host.Mdev.Define(mdev.Definition{UUID: id, Start: "auto"})
		if err != nil {
			return Outcome{}, err
		}
		if env.DryRun {
			files = append(files, d.Path)
		}
	}
	return Outcome{Files: files}, nil
}

// Undo does nothing.
func (DefineMdev) Undo(context.Context, Env, Outcome) error { return nil }

// Bind binds the IOMMU groups of Addrs to vfio-pci, persisted (bind --persist); its undo
// gives them back to their host drivers.
type Bind struct {
	Addrs []host.Address
}

// Action implements Op.
func (Bind) Action() string { return ActBind }

// Do implements Op.
func (o Bind) Do(ctx context.Context, env Env) (Outcome, error) {
	h := env.Host
	res, err := h.Binder.Bind(ctx, o.Addrs, vfio.BindOptions{ForceChecks: env.Force, Persist: true, DryRun: env.DryRun})
	return Outcome{Files: h.dryOps(res, env.DryRun)}, err
}

// Undo implements Op.
func (o Bind) Undo(ctx context.Context, env Env, _ Outcome) error {
	_, err := env.Host.Binder.Unbind(ctx, o.Addrs, vfio.UnbindOptions{Persist: true})
	return err
}

// PersistBind persists a binding that exists; it is made and undone as Bind.
type PersistBind struct{ Bind }

// Action implements Op.
func (PersistBind) Action() string { return ActPersistBind }

// Unbind gives the IOMMU groups of Addrs back to their host drivers and forgets the
// persistence (unbind --persist); its undo binds them again.
type Unbind struct {
	Addrs []host.Address
}

// Action implements Op.
func (Unbind) Action() string { return ActUnbind }

// Do implements Op. --force owner, not-in-ledger or held goes past unbind's checks.
func (o Unbind) Do(ctx context.Context, env Env) (Outcome, error) {
	h := env.Host
	fu := env.forced(vfio.CheckOwner) || env.forced(vfio.CheckNotInLedger) || env.forced(vfio.CheckHeld)
	res, err := h.Binder.Unbind(ctx, o.Addrs, vfio.UnbindOptions{Persist: true, Force: fu, DryRun: env.DryRun})
	return Outcome{Files: h.dryOps(res, env.DryRun)}, err
}

// Undo implements Op.
func (o Unbind) Undo(ctx context.Context, env Env, _ Outcome) error {
	_, err := env.Host.Binder.Bind(ctx, o.Addrs, vfio.BindOptions{Force: true, Persist: true})
	return err
}

// ChangeMIG makes MIG instance changes through NVML (Host.MIGPlanner). NVML has no dry run:
// a dry run does nothing, the plan's steps are what would happen. It has no undo.
type ChangeMIG struct {
	Changes MIGChanges
}

// Action implements Op.
func (ChangeMIG) Action() string { return ActMIG }

// Do implements Op.
func (o ChangeMIG) Do(ctx context.Context, env Env) (Outcome, error) {
	if env.DryRun {
		return Outcome{}, nil
	}
	h := env.Host
	return Outcome{}, h.MIGPlanner.Apply(ctx, h.MIG, o.Changes)
}

// Undo does nothing.
func (ChangeMIG) Undo(context.Context, Env, Outcome) error { return nil }
