package layout

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/internal/lazy"
	"github.com/vgpu-host/vgpu-host/mdev"
	"github.com/vgpu-host/vgpu-host/mig"
	"github.com/vgpu-host/vgpu-host/vfio"
	"github.com/vgpu-host/vgpu-host/vgpu"
)

// Host is what a layout reads and changes the host through: the same Manager and Binder the
// imperative commands use, so a layout makes exactly their writes.
type Host struct {
	Root host.Root
	// Mdev creates and removes mdev and vendor-VFIO instances and sets VF counts. Its W,
	// DryRun, Domains and Allocated decide where writes go and how in-use is judged.
	Mdev *mdev.Manager
	// Binder binds and restores IOMMU groups.
	Binder *vfio.Binder
	// MIG is the NVML backend; nil means NVML is not available, and a configuration with a
	// mig entry is refused (host.ErrUnsupported).
	MIG mig.Backend
	// MIGPlanner plans and makes MIG changes over MIG (package mig's Plan and Apply); nil
	// with a non-nil MIG is refused the same way.
	MIGPlanner MIGPlanner
}

// MIGPlanner is package mig's planning behind a small interface, so layout depends on mig's
// types only: Plan returns the changes that bring each GPU (by PCI address) to the wanted
// list of profile names, or why they do not fit; Apply makes them.
type MIGPlanner interface {
	Plan(st mig.State, want map[string][]string) (MIGChanges, error)
	Apply(ctx context.Context, b mig.Backend, c MIGChanges) error
}

// MIGChanges is a planned set of MIG changes.
type MIGChanges interface {
	// Steps describes each change, in order ("destroy 3g.40gb (GI 1) on 0000:41:00.0").
	Steps() []string
}

// HostChange actions, in the order a plan makes them (Phase).
const (
	ActRemoveMdev   = "remove-mdev"   // remove an mdev instance and its definition
	ActUndefineMdev = "undefine-mdev" // drop a definition whose instance is not active
	ActClearVGPU    = "clear-vgpu"    // clear a VF's vendor vGPU type
	ActUnbind       = "unbind"        // give an IOMMU group back to its host drivers
	ActSetVFs       = "set-vfs"       // change a PF's VF count (and persist it)
	ActPersistVFs   = "persist-vfs"   // record the VF count host restore applies
	ActMIG          = "mig"           // MIG instance changes through NVML
	ActSetVGPU      = "set-vgpu"      // give free VFs a vendor vGPU type
	ActCreateMdev   = "create-mdev"   // create mdev instances and define them (start=auto)
	ActDefineMdev   = "define-mdev"   // define an active instance so restore brings it back
	ActBind         = "bind"          // bind an IOMMU group to vfio-pci (persisted)
	ActPersistBind  = "persist-bind"  // persist a binding that exists
	checkInUse      = "in-use"        // --force name: remove an instance a VM uses
)

// phase orders the actions: removals before creations, then VFs → MIG → vendor types →
// mdevs → bindings, as host restore orders them.
var phase = lazy.Value[map[string]int]{New: func() map[string]int {
	return map[string]int{
		ActRemoveMdev: 0, ActUndefineMdev: 0, ActClearVGPU: 1, ActUnbind: 2, ActSetVFs: 3, ActPersistVFs: 3,
		ActMIG: 4, ActSetVGPU: 5, ActCreateMdev: 6, ActDefineMdev: 6, ActBind: 7, ActPersistBind: 7,
	}
}}

// ForceableChecks are the safety checks `host layout apply --force` may name: vfio's bind
// checks, an unbind of a group bound for a VM (owner) or not by vgpu-host (not-in-ledger), and
// removing an instance a VM uses (in-use).
// A function: a package-level append would run at every start of every binary that links
// layout.
func ForceableChecks() []string {
	return append(slices.Clone(vfio.ForceableChecks), vfio.CheckOwner, vfio.CheckNotInLedger, checkInUse)
}

// HostChange is one planned change.
type HostChange struct {
	Action string `json:"action"`
	// Target is the device or parent it changes.
	Target string `json:"target"`
	// Detail says what exactly, for people ("2× mbochs-medium", "3 → 0 VFs").
	Detail string `json:"detail"`
	// Instances are the mdev UUIDs or VF addresses it removes, undefines or defines, or the
	// UUIDs of the mdev instances it creates.
	Instances []string `json:"instances,omitempty"`
	// Op is what the change does to the host, typed per action; it is not marshalled, so a
	// HostChange read back from JSON has none.
	Op Op `json:"-"`
}

// newChange is the HostChange that makes op, with its Action.
func newChange(op Op, target, detail string, instances []string) HostChange {
	return HostChange{Action: op.Action(), Target: target, Detail: detail, Instances: instances, Op: op}
}

func (c HostChange) String() string {
	return fmt.Sprintf("%-13s %-14s %s", c.Action, c.Target, c.Detail)
}

// HostRefusal is a reason the plan cannot be applied as it is.
type HostRefusal struct {
	Target string `json:"target"`
	// Check names a safety check --force can go past; empty for a request the host cannot
	// meet (more VFs or instances than it has), which no flag overrides.
	Check  string `json:"check,omitempty"`
	Reason string `json:"reason"`
	err    error
}

// HostPlan is what apply would change, and why it may not.
type HostPlan struct {
	Config   string        `json:"config"`
	Targets  []Target      `json:"targets"`
	Changes  []HostChange  `json:"changes"`
	Refusals []HostRefusal `json:"refusals,omitempty"`
	// Warnings are things worth knowing that do not stop the plan (an entry that selects
	// nothing here, a check --force went past).
	Warnings []string `json:"warnings,omitempty"`
}

// Empty reports whether the host already is in the configuration.
func (p *HostPlan) Empty() bool { return len(p.Changes) == 0 }

// Err is the plan's refusals as one error: the first refusal's class (host.ErrInvalid for
// more VFs than the device has, host.ErrBusy for more instances than available,
// host.ErrUnsupported, host.ErrRefused naming the VM for a device in use) with every reason.
func (p *HostPlan) Err() error {
	if len(p.Refusals) == 0 {
		return nil
	}
	var b strings.Builder
	for _, r := range p.Refusals {
		fmt.Fprintf(&b, "\n  - %s: %s", r.Target, r.Reason)
		if r.Check != "" {
			fmt.Fprintf(&b, " [--force %s]", r.Check)
		}
	}
	return fmt.Errorf("layout %s refused before any change: %w:%s", p.Config, sentinel(p.Refusals[0].err), b.String())
}

func sentinel(err error) error {
	for _, s := range []error{host.ErrRefused, host.ErrBusy, host.ErrInvalid, host.ErrNotFound, host.ErrUnsupported} {
		if errors.Is(err, s) {
			return s
		}
	}
	return host.ErrRefused
}

// planner builds one plan.
type planner struct {
	h       *Host
	ctx     context.Context
	force   []string
	plan    *HostPlan
	inv     *host.Inventory
	insts   []mdev.Instance
	parent  map[string]mdev.Parent
	ledger  *vfio.Bindings
	migWant map[string][]string
}

func (pl *planner) forced(check string) bool { return slices.Contains(pl.force, check) }

func (pl *planner) refuse(target, check string, err error) {
	if check != "" && pl.forced(check) {
		pl.plan.Warnings = append(pl.plan.Warnings, fmt.Sprintf("%s: --force %s: %v", target, check, err))
		return
	}
	pl.plan.Refusals = append(pl.plan.Refusals, HostRefusal{Target: target, Check: check, Reason: err.Error(), err: err})
}

// refuseQuarantined refuses a target that would give guests new instances or VFs while it is
// quarantined (docs/health.md), as mdev create and vf enable would at apply: plan says so first.
func (pl *planner) refuseQuarantined(t *Target, what string) {
	if t.Address == nil {
		return
	}
	if err := vfio.RefuseQuarantined(pl.h.Root, "layout: "+what+" "+t.Name, *t.Address); err != nil {
		pl.refuse(t.Name, vfio.CheckQuarantined, err)
	}
}

// add plans the change op makes to target; detail and instances are what people see.
func (pl *planner) add(op Op, target, detail string, instances []string) {
	pl.plan.Changes = append(pl.plan.Changes, newChange(op, target, detail, instances))
}

// PlanConfig compares configuration name of f with the host now and returns the changes that
// bring the host to it, in dependency order, with every refusal (a request the host cannot
// meet, a device a VM uses) found before anything is written. force names the checks (see
// ForceableChecks) to go past. It writes nothing. A plan with refusals is returned together
// with its Err.
func PlanConfig(ctx context.Context, h *Host, f *File, name string, force []string) (*HostPlan, error) {
	name, c, err := f.Select(name)
	if err != nil {
		return nil, err
	}
	inv, err := host.Scan(h.Root)
	if err != nil {
		return nil, fmt.Errorf("layout: read the host: %w", err)
	}
	targets, unmatched, err := resolve(h.Root, inv, name, c)
	if err != nil {
		return nil, err
	}
	pl := &planner{h: h, ctx: ctx, force: force, inv: inv, plan: &HostPlan{Config: name, Targets: targets, Changes: []HostChange{}, Warnings: unmatched},
		parent: map[string]mdev.Parent{}, migWant: map[string][]string{}}
	if pl.insts, err = h.Mdev.Instances(); err != nil {
		return nil, err
	}
	ps, err := h.Mdev.Parents()
	if err != nil {
		return nil, err
	}
	for _, p := range ps {
		pl.parent[p.Name+"/"+p.Backend] = p
	}
	if pl.ledger, err = vfio.LoadLedger(h.Root); err != nil {
		return nil, err
	}
	for i := range targets {
		pl.target(&targets[i])
	}
	pl.planMIG()
	sort.SliceStable(pl.plan.Changes, func(i, j int) bool {
		return phase.Get()[pl.plan.Changes[i].Action] < phase.Get()[pl.plan.Changes[j].Action]
	})
	return pl.plan, pl.plan.Err()
}

// target plans one device: its mdevs, vendor types, VFs, MIG profiles and binding.
func (pl *planner) target(t *Target) {
	e := t.entry
	var pf *mdev.PF
	if t.Address != nil {
		if p, err := pl.h.Mdev.ReadPF(*t.Address); err == nil {
			pf = &p
		}
	}
	// VFs: -1 leaves them as they are.
	wantVFs, vfDriver := 0, mdev.DriverKeep
	switch e.Mode {
	case ModeSRIOV:
		wantVFs = e.VFs
		if e.VFDriver != "" {
			vfDriver = e.VFDriver
		}
	case ModeVendorVFIO:
		wantVFs = e.VFs
		if wantVFs == 0 && pf != nil {
			wantVFs = pf.TotalVFs
		}
	case ModeMIG:
		wantVFs = e.VFs
		if wantVFs == 0 {
			wantVFs = -1
		}
	}
	vfsChange := pl.planVFs(t, pf, wantVFs, vfDriver)
	if pf != nil && (e.Mode == ModeVendorVFIO || e.Mode == ModeMIG) {
		have := wantVFs
		if have < 0 {
			have = pf.NumVFs
		}
		n := 0
		for _, tc := range append(slices.Clone(e.Types), e.VGPUTypes...) {
			n += tc.Count
		}
		if n > have && have <= pf.TotalVFs {
			pl.refuse(t.Name, "", fmt.Errorf("%s asks for %d vGPU instances: %w: each is one VF, and %s will have %d", t.EntryPath, n, host.ErrInvalid, t.Name, have))
		}
	}

	var wantMdev, wantVendor []TypeCount
	switch e.Mode {
	case ModeMdev:
		wantMdev = e.Types
	case ModeVendorVFIO:
		wantVendor = e.Types
	case ModeMIG:
		wantVendor = e.VGPUTypes
		pl.migTarget(t, e)
	}
	pl.planMdevs(t, wantMdev)
	pl.planVendor(t, pf, wantVendor, vfsChange)
	pl.planBinding(t, e.Mode == ModePassthrough)
}

// planVFs plans the VF count; it reports whether the count changes (every VF, and so every
// vendor type on one, goes away and comes back).
func (pl *planner) planVFs(t *Target, pf *mdev.PF, want int, driver string) bool {
	if want < 0 {
		return false
	}
	if pf == nil {
		if want > 0 {
			pl.refuse(t.Name, "", fmt.Errorf("%s asks for %d VFs: %w: %s has no SR-IOV capability (no sriov_totalvfs)", t.EntryPath, want, host.ErrUnsupported, t.Name))
		}
		return false
	}
	if want > pf.TotalVFs {
		pl.refuse(t.Name, "", fmt.Errorf("%s asks for %d VFs: %w: %s has sriov_totalvfs=%d", t.EntryPath, want, host.ErrInvalid, t.Name, pf.TotalVFs))
		return false
	}
	if want > 0 && want != pf.NumVFs {
		pl.refuseQuarantined(t, "enable VFs on")
	}
	cur := "keep"
	if pf.NumVFs > 0 && allVFIO(pf.VFs) {
		cur = mdev.DriverVFIO
	}
	if want == 0 {
		driver = ""
	}
	persistedOK := (want == 0 && (pf.Persisted == nil || pf.Persisted.NumVFs == 0)) ||
		(pf.Persisted != nil && pf.Persisted.NumVFs == want && pf.Persisted.Driver == driver)
	changes := pf.NumVFs != want || (want > 0 && driver == mdev.DriverVFIO && cur != mdev.DriverVFIO)
	if changes {
		pl.checkVFsFree(t, pf)
		detail := fmt.Sprintf("%d → %d VFs", pf.NumVFs, want)
		if want > 0 {
			detail += ", driver " + driver
		}
		pl.add(SetVFs{PF: pf.Address, Count: want, Driver: driver, From: pf.NumVFs, FromDriver: cur, Persisted: pf.Persisted != nil},
			t.Name, detail+" (persisted for host restore)", nil)
		return pf.NumVFs != want
	}
	if !persistedOK {
		d := fmt.Sprintf("record %d VFs, driver %s, for host restore", want, driver)
		if want == 0 {
			d = "forget the persisted VF count"
		}
		pl.add(PersistVFs{PF: pf.Address, Count: want, Driver: driver}, t.Name, d, nil)
	}
	return false
}

// checkVFsFree refuses a VF count change while a VF is bound for a VM (the vfio ledger's
// owner); the VF verbs themselves refuse one a process holds.
func (pl *planner) checkVFsFree(t *Target, pf *mdev.PF) {
	for _, vf := range pf.VFs {
		if b, ok := pl.ledger.Lookup(vf.Address); ok && b.Owner != "" {
			pl.refuse(t.Name, vfio.CheckOwner, fmt.Errorf("changing the VF count of %s removes VF %s: %w: it is bound for VM %q (vgpu-host destroy %s gives it back)",
				t.Name, vf.Address, host.ErrRefused, b.Owner, b.Owner))
		}
	}
}

func allVFIO(vfs []mdev.VF) bool {
	for _, v := range vfs {
		if v.Driver != mdev.DriverVFIO {
			return false
		}
	}
	return len(vfs) > 0
}

// instancesOf returns the instances of backend on parent name.
func (pl *planner) instancesOf(name, backend string) []mdev.Instance {
	var out []mdev.Instance
	for _, in := range pl.insts {
		if in.Parent == name && in.Backend == backend {
			out = append(out, in)
		}
	}
	return out
}

// planMdevs plans the mdev instances of a parent: removes what is not wanted (undefining
// it), defines what is kept, creates what is missing.
func (pl *planner) planMdevs(t *Target, want []TypeCount) {
	have := pl.instancesOf(t.Name, mdev.BackendMdev)
	p, isParent := pl.parent[t.Name+"/"+mdev.BackendMdev]
	if len(want) > 0 && !isParent {
		pl.refuse(t.Name, "", fmt.Errorf("%s asks for mdev instances: %w: %s offers no mdev types (no mdev_supported_types; is the vGPU or mdev driver loaded?)", t.EntryPath, host.ErrUnsupported, t.Name))
		return
	}
	if len(want) > 0 {
		pl.refuseQuarantined(t, "create mdev instances on")
	}
	wantByID := map[string]int{}
	var order []string
	for i, tc := range want {
		ty, err := mdev.LookupType(p, tc.Type)
		if err != nil {
			pl.refuse(t.Name, "", fmt.Errorf("%s.types[%d]: %w", t.EntryPath, i, err))
			return
		}
		if _, seen := wantByID[ty.ID]; seen {
			pl.refuse(t.Name, "", fmt.Errorf("%s.types[%d]: %w: %q is type %s, listed already", t.EntryPath, i, host.ErrInvalid, tc.Type, ty.ID))
			return
		}
		wantByID[ty.ID] = tc.Count
		order = append(order, ty.ID)
	}
	byType := map[string][]mdev.Instance{}
	var stale []mdev.Instance
	for _, in := range have {
		if !in.Active {
			stale = append(stale, in)
			continue
		}
		byType[in.Type] = append(byType[in.Type], in)
	}
	if len(stale) > 0 {
		pl.add(UndefineMdev{RemoveMdev{Instances: ids(stale), Removed: stale}}, t.Name, fmt.Sprintf("%d definition(s) of instances that are not active", len(stale)), ids(stale))
	}
	var typeIDs []string
	for id := range byType {
		typeIDs = append(typeIDs, id)
	}
	sort.Strings(typeIDs)
	removedAny := false
	for _, id := range typeIDs {
		ins := byType[id]
		keep := wantByID[id]
		if len(ins) <= keep {
			continue
		}
		gone := pickRemovals(ins, len(ins)-keep, pl.h.Mdev.Allocated)
		pl.checkRemovable(t, gone)
		removedAny = true
		pl.add(RemoveMdev{Instances: ids(gone), Removed: gone}, t.Name, fmt.Sprintf("%d× %s (and their definitions)", len(gone), typeName(p, id)), ids(gone))
		byType[id] = without(ins, gone)
	}
	for _, id := range order {
		kept := byType[id]
		var undefined []mdev.Instance
		for _, in := range kept {
			if !in.Defined || in.Start != "auto" {
				undefined = append(undefined, in)
			}
		}
		if len(undefined) > 0 {
			pl.add(DefineMdev{UUIDs: ids(undefined)}, t.Name, fmt.Sprintf("%d× %s (start=auto, for host restore)", len(undefined), typeName(p, id)), ids(undefined))
		}
		n := wantByID[id] - len(kept)
		if n <= 0 {
			continue
		}
		ty, _ := mdev.LookupType(p, id)
		if n > ty.Available && !removedAny {
			pl.refuse(t.Name, "", fmt.Errorf("%s wants %d× %s, %d exist: %w: %s reports available_instances=%d for %d more",
				t.EntryPath, wantByID[id], typeName(p, id), len(kept), host.ErrBusy, t.Name, ty.Available, n))
			continue
		}
		uuids := pl.newUUIDs(t.Name, id, n)
		pl.add(CreateMdev{Parent: t.Name, Type: id, Count: n, UUIDs: uuids}, t.Name, fmt.Sprintf("%d× %s (defined, start=auto)", n, typeName(p, id)), uuids)
	}
}

// planVendor plans the vendor-VFIO vGPU types on a PF's VFs. When the VF count changes every
// type goes (the VFs do) and the wanted ones are set on the new VFs.
func (pl *planner) planVendor(t *Target, pf *mdev.PF, want []TypeCount, vfsChange bool) {
	if len(want) > 0 {
		pl.refuseQuarantined(t, "create vendor vGPU instances on")
	}
	have := pl.instancesOf(t.Name, mdev.BackendNvidiaVFIO)
	p, isParent := pl.parent[t.Name+"/"+mdev.BackendNvidiaVFIO]
	byType := map[string][]mdev.Instance{}
	for _, in := range have {
		if in.Active {
			byType[in.Type] = append(byType[in.Type], in)
		}
	}
	// A full GPU stops listing its running type on free VFs: match against what runs too.
	p.Types = slices.Clone(p.Types)
	for _, in := range have {
		i := slices.IndexFunc(p.Types, func(t mdev.Type) bool { return t.ID == in.Type })
		switch {
		case !in.Active:
		case i < 0:
			p.Types = append(p.Types, mdev.Type{ID: in.Type, Name: in.TypeName})
		case p.Types[i].Name == "":
			p.Types[i].Name = in.TypeName
		}
	}
	wantByID := map[string]int{}
	var order []string
	for i, tc := range want {
		id := tc.Type
		if isParent && !vfsChange {
			ty, err := mdev.LookupType(p, tc.Type)
			if err != nil {
				pl.refuse(t.Name, "", fmt.Errorf("%s types[%d]: %w", t.EntryPath, i, err))
				return
			}
			id = ty.ID
		} else if pf == nil {
			pl.refuse(t.Name, "", fmt.Errorf("%s asks for vendor vGPU types: %w: %s has no SR-IOV VFs for them", t.EntryPath, host.ErrUnsupported, t.Name))
			return
		}
		wantByID[id] += tc.Count
		order = append(order, id)
	}
	var typeIDs []string
	for id := range byType {
		typeIDs = append(typeIDs, id)
	}
	sort.Strings(typeIDs)
	for _, id := range typeIDs {
		ins := byType[id]
		keep := wantByID[id]
		if vfsChange {
			keep = 0
		}
		if len(ins) <= keep {
			continue
		}
		gone := pickRemovals(ins, len(ins)-keep, pl.h.Mdev.Allocated)
		pl.checkRemovable(t, gone)
		pl.add(ClearVGPU{RemoveMdev{Instances: ids(gone), Removed: gone}}, t.Name, fmt.Sprintf("%d× %s", len(gone), typeName(p, id)), ids(gone))
		byType[id] = without(ins, gone)
	}
	for _, id := range order {
		n := wantByID[id] - len(byType[id])
		if n <= 0 {
			continue
		}
		if isParent && !vfsChange {
			ty, _ := mdev.LookupType(p, id)
			if n > ty.Available {
				pl.refuse(t.Name, "", fmt.Errorf("%s wants %d more %s: %w: %d free VFs of %s list it", t.EntryPath, n, typeName(p, id), host.ErrBusy, ty.Available, t.Name))
				continue
			}
		}
		pl.add(SetVGPU{Parent: t.Name, Type: id, Count: n}, t.Name, fmt.Sprintf("%d× %s on free VFs", n, typeName(p, id)), nil)
	}
}

// planBinding plans the target's IOMMU group: bound (passthrough) or on its host drivers.
func (pl *planner) planBinding(t *Target, want bool) {
	if t.Address == nil {
		return
	}
	g, err := host.GroupOf(pl.h.Root, *t.Address)
	if err != nil {
		if want {
			pl.refuse(t.Name, "", fmt.Errorf("%s: passthrough needs the IOMMU group: %w", t.EntryPath, err))
		}
		return
	}
	eps := g.Endpoints()
	bound, anyBound, persisted := len(eps) > 0, false, true
	for _, m := range eps {
		on := m.Driver == vfio.DriverName
		bound = bound && on
		anyBound = anyBound || on
		if b, ok := pl.ledger.Lookup(m.Address); ok && !b.Persist {
			persisted = false
		}
	}
	addrs := []host.Address{*t.Address}
	groupDesc := fmt.Sprintf("IOMMU group %d (%s)", g.ID, memberList(eps))
	switch {
	case want && !bound:
		rs, err := pl.h.Binder.Preflight(addrs)
		if err != nil {
			pl.refuse(t.Name, "", err)
			return
		}
		for _, r := range rs {
			pl.refuse(t.Name, r.Check, fmt.Errorf("bind %s: %w: %s", t.Name, host.ErrRefused, r))
		}
		pl.add(Bind{Addrs: addrs}, t.Name, groupDesc+" → vfio-pci (persisted)", nil)
	case want && !persisted:
		pl.add(PersistBind{Bind{Addrs: addrs}}, t.Name, groupDesc+": persist the binding (driverctl override + softdep)", nil)
	case !want && anyBound:
		// Unbind's own checks, as a dry run: a group bound for a VM (owner), held open, or
		// put on vfio-pci by something else (not-in-ledger).
		dry := *pl.h.Binder
		dry.W = &host.Recorder{}
		force := pl.forced(vfio.CheckOwner) || pl.forced(vfio.CheckNotInLedger) || pl.forced(vfio.CheckHeld)
		if _, err := dry.Unbind(pl.ctx, addrs, vfio.UnbindOptions{DryRun: true, Persist: true, Force: force}); err != nil {
			pl.refuse(t.Name, "", err)
		}
		pl.add(Unbind{Addrs: addrs}, t.Name, groupDesc+" → host drivers", nil)
	}
}

func memberList(ms []host.GroupMember) string {
	var s []string
	for _, m := range ms {
		s = append(s, m.Address.String())
	}
	return strings.Join(s, ", ")
}

// checkRemovable refuses removing instances a VM uses: the kernel's holders, the allocation
// ledger, libvirt (mdev's own check, before any write).
func (pl *planner) checkRemovable(t *Target, gone []mdev.Instance) {
	if err := pl.h.Mdev.CheckRemove(pl.ctx, ids(gone), mdev.RemoveOptions{Force: pl.forced(checkInUse)}); err != nil {
		pl.refuse(t.Name, checkInUse, err)
	}
}

// pickRemovals chooses n instances to remove: first those no VM is given (allocation ledger)
// and no owner was recorded for, newest (last) first.
func pickRemovals(ins []mdev.Instance, n int, allocated func(mdev.Instance) string) []mdev.Instance {
	score := func(in mdev.Instance) int {
		s := 0
		if in.Owner != "" {
			s++
		}
		if allocated != nil && allocated(in) != "" {
			s += 2
		}
		return s
	}
	c := slices.Clone(ins)
	slices.Reverse(c)
	sort.SliceStable(c, func(i, j int) bool { return score(c[i]) < score(c[j]) })
	return c[:n]
}

func without(ins, gone []mdev.Instance) []mdev.Instance {
	var out []mdev.Instance
	for _, in := range ins {
		if !slices.ContainsFunc(gone, func(g mdev.Instance) bool { return g.ID() == in.ID() }) {
			out = append(out, in)
		}
	}
	return out
}

func ids(ins []mdev.Instance) []string {
	out := make([]string, len(ins))
	for i, in := range ins {
		out[i] = in.ID()
	}
	return out
}

// typeName shows a type as "mbochs-medium (medium)" when the parent names it.
func typeName(p mdev.Parent, id string) string {
	for _, t := range p.Types {
		if t.ID == id && t.Name != "" && t.Name != id {
			return id + " (" + t.Name + ")"
		}
	}
	return id
}

// migTarget records a GPU's wanted MIG profiles (planned together in planMIG).
func (pl *planner) migTarget(t *Target, e *Entry) {
	if t.Address == nil {
		pl.refuse(t.Name, "", fmt.Errorf("%s: %w: MIG needs an NVIDIA GPU (a PCI address), not a virtual parent", t.EntryPath, host.ErrUnsupported))
		return
	}
	var want []string
	for _, p := range e.Profiles {
		for range p.Count {
			want = append(want, p.Profile)
		}
	}
	pl.migWant[t.Name] = want
}

// planMIG plans every GPU's MIG instances at once through the MIG planner.
func (pl *planner) planMIG() {
	if len(pl.migWant) == 0 {
		return
	}
	var gpus []string
	for a := range pl.migWant {
		gpus = append(gpus, a)
	}
	sort.Strings(gpus)
	if pl.h.MIG == nil || pl.h.MIGPlanner == nil {
		pl.refuse(strings.Join(gpus, ", "), "", fmt.Errorf("mode mig: %w: NVML is not available on this host (the NVIDIA driver and vgpu-host's NVML helper are needed for MIG)", host.ErrUnsupported))
		return
	}
	st, err := pl.h.MIG.State(pl.ctx)
	if err != nil {
		pl.refuse(strings.Join(gpus, ", "), "", fmt.Errorf("mode mig: read MIG state: %w", err))
		return
	}
	ch, err := pl.h.MIGPlanner.Plan(st, pl.migWant)
	if err != nil {
		pl.refuse(strings.Join(gpus, ", "), "", err)
		return
	}
	if steps := ch.Steps(); len(steps) > 0 {
		pl.add(ChangeMIG{Changes: ch}, strings.Join(gpus, ", "), strings.Join(steps, "; "), nil)
	}
}

// newUUIDs names n new instances of type id on parent: the one UUID scheme
// (vgpu.InstanceUUID) over "host-layout:PARENT:TYPE", skipping UUIDs that exist, so plan, the
// dry run and apply name the same instances and a re-plan after a failed apply names them again.
func (pl *planner) newUUIDs(parent, id string, n int) []string {
	used := map[string]bool{}
	for _, in := range pl.insts {
		used[in.UUID] = true
	}
	var out []string
	for i := 0; len(out) < n; i++ {
		if u := vgpu.InstanceUUID("host-layout:"+parent+":"+id, i); !used[u] {
			out = append(out, u)
		}
	}
	return out
}
