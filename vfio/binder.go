package vfio

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/internal/future"
	"github.com/vgpu-host/vgpu-host/internal/revert"
)

// DefaultTimeout bounds each sysfs write and each wait for a driver link.
const DefaultTimeout = 10 * time.Second

// ErrGroupNotViable is returned when a group still has an endpoint on a host driver after a bind.
var ErrGroupNotViable = errors.New("IOMMU group is not viable")

// Binder binds IOMMU groups to vfio-pci and restores them. The zero Timeout means
// DefaultTimeout. Modules may be nil when vfio-pci is known to be loaded.
type Binder struct {
	Root    host.Root
	W       host.Writer
	Modules host.ModuleLoader
	Timeout time.Duration
	// NVIDIA is the gate of this process's own users of the NVIDIA driver's device nodes (its
	// NVML helpers), paused while a bind or unbind moves a function off or onto the nvidia
	// driver; nil: host.NVIDIANodes, the process's.
	NVIDIA *host.NVIDIAGate
}

// nvidiaGate is b.NVIDIA, or the process's gate.
func (b *Binder) nvidiaGate() *host.NVIDIAGate {
	if b.NVIDIA != nil {
		return b.NVIDIA
	}
	return host.NVIDIANodes
}

// pauseNVIDIA pauses this process's own users of the NVIDIA driver's nodes when a member of
// groups that a bind moves is on the nvidia driver: otherwise the holder search finds this
// process's NVML helper (in the agent, the Xid watch's) holding /dev/nvidia*, and the unbind
// from nvidia would wait for it. held, the search started before the groups were known, is
// then started again once the helpers have exited. Users open their nodes again after resume.
func (b *Binder) pauseNVIDIA(groups []*host.Group, held *future.Value[[]host.Holder]) (*future.Value[[]host.Holder], func()) {
	for _, g := range groups {
		for _, m := range g.Members {
			if moves(m) && m.Driver == host.NVIDIADriver {
				resume := b.nvidiaGate().Pause()
				held.Wait()
				return startHolderSearch(b.Root), resume
			}
		}
	}
	return held, func() {}
}

// BindOptions control Bind.
type BindOptions struct {
	// Force turns safety refusals (boot VGA, host-critical devices, held devices, missing
	// interrupt remapping) into warnings.
	Force bool
	// ForceChecks turns only the refusals of these checks (CheckBootVGA, CheckHeld, ...) into
	// warnings: apply's --force=NAME.
	ForceChecks []string
	// Persist makes the binding survive a reboot (driverctl override + modprobe softdep).
	Persist bool
	// DryRun records the exact writes and changes nothing (no ledger, no lock, no files).
	DryRun bool
	// Owner is recorded in the ledger (apply passes the VM name).
	Owner string
}

// UnbindOptions control Unbind.
type UnbindOptions struct {
	// Force restores devices vgpu-host did not bind (to their native driver), devices bound
	// for another owner, and devices held open.
	Force bool
	// Persist also removes the reboot persistence that bind --persist wrote.
	Persist bool
	// DryRun records the exact writes and changes nothing.
	DryRun bool
	// Owner, when set, refuses to restore devices the ledger records for another owner.
	Owner string
}

// HostOp operations.
const (
	OpWrite    = "write"    // a sysfs write
	OpModprobe = "modprobe" // load a kernel module
	OpFile     = "file"     // write a configuration file (persistence)
	OpRemove   = "remove"   // remove a configuration file
)

// HostOp is one host change, in order. Dry runs report them instead of making them.
type HostOp struct {
	Op    string `json:"op"`
	Path  string `json:"path,omitempty"`
	Value string `json:"value,omitempty"`
}

// String renders the step as the shell command that would make it.
func (s HostOp) String() string {
	switch s.Op {
	case OpModprobe:
		return "modprobe " + s.Value
	case OpFile:
		return fmt.Sprintf("printf '%%s' '%s' > %s", strings.ReplaceAll(s.Value, "'", `'\''`), s.Path)
	case OpRemove:
		return "rm -f " + s.Path
	}
	return host.RecordedWrite{Path: s.Path, Value: s.Value}.String()
}

// DriverChange is what happened (or, in a dry run, would happen) to one function.
type DriverChange struct {
	Address host.Address `json:"address"`
	Group   int          `json:"iommu_group"`
	// From and To are driver names; "" means no driver.
	From    string `json:"from"`
	To      string `json:"to"`
	Changed bool   `json:"changed"`
	// Note says why nothing changed or what was special: "already bound", "bridge stays", ...
	Note string `json:"note,omitempty"`
}

// GroupState is a group after the operation.
type GroupState struct {
	ID     int  `json:"id"`
	Viable bool `json:"viable"`
	// VFIODev is the group's device node (host path), "" when it does not exist.
	VFIODev string `json:"vfio_dev,omitempty"`
}

// Result reports a Bind or Unbind.
type Result struct {
	Action  string         `json:"action"` // "bind" or "unbind"
	DryRun  bool           `json:"dry_run"`
	Changed bool           `json:"changed"`
	Devices []DriverChange `json:"devices"`
	Groups  []GroupState   `json:"groups"`
	// Steps are the host changes made (or, in a dry run, that would be made), in order.
	Steps []HostOp `json:"steps"`
	// Warnings are safety checks that --force overrode, and other things worth knowing.
	Warnings []string `json:"warnings,omitempty"`
	// Ledger is the state file path.
	Ledger string `json:"ledger"`
}

// forced reports whether the options override a refusal of check.
func (o BindOptions) forced(check string) bool {
	if check == CheckQuarantined {
		return false // only a clean check lifts it (host release-quarantine)
	}
	return o.Force || slices.Contains(o.ForceChecks, check)
}

func (b *Binder) timeout() time.Duration {
	if b.Timeout <= 0 {
		return DefaultTimeout
	}
	return b.Timeout
}

// Group returns the IOMMU group of a with all members.
func (b *Binder) Group(a host.Address) (*host.Group, error) { return groupOf(b.Root, a) }

// Ledger reads the ledger of functions vgpu-host has bound.
func (b *Binder) Ledger() (*Bindings, error) { return LoadLedger(b.Root) }

// Plan returns the steps Bind would take for addrs, changing nothing. Safety refusals are
// returned as the error, as Bind would return them.
func (b *Binder) Plan(ctx context.Context, addrs []host.Address, opts BindOptions) ([]HostOp, error) {
	opts.DryRun = true
	r, err := b.Bind(ctx, addrs, opts)
	if r == nil {
		return nil, err
	}
	return r.Steps, err
}

// run holds the state of one Bind or Unbind.
type run struct {
	b      *Binder
	root   host.Root
	w      host.Writer
	rec    *host.Recorder
	dry    bool
	ledger *Bindings
	res    *Result
	// touched are the functions this run moved or restored, and confirmed the driver the
	// kernel was seen to give each (the driver link read after the write): what is reported
	// after the run comes from these instead of a second read of every member.
	touched   map[host.Address]bool
	confirmed map[host.Address]string
}

func (b *Binder) start(action string, dry bool) (*run, func(), error) {
	if b.W == nil && !dry {
		return nil, nil, fmt.Errorf("vfio: Binder.W is nil: %w", host.ErrInvalid)
	}
	r := &run{b: b, root: b.Root, w: b.W, dry: dry, res: &Result{Action: action, DryRun: dry, Ledger: host.HostPath(b.Root, LedgerPath(b.Root)),
		Devices: []DriverChange{}, Groups: []GroupState{}, Steps: []HostOp{}}}
	r.touched, r.confirmed = map[host.Address]bool{}, map[host.Address]string{}
	r.rec = &host.Recorder{Next: b.W}
	if dry {
		r.rec.Next = nil
	}
	r.w = r.rec
	unlock := func() {}
	if !dry {
		var err error
		if unlock, err = lock(b.Root, b.timeout()); err != nil {
			return nil, nil, err
		}
	}
	l, err := LoadLedger(b.Root)
	if err != nil {
		unlock()
		return nil, nil, err
	}
	r.ledger = l
	return r, unlock, nil
}

// finish copies the recorded sysfs writes into the result's steps, in order with the others.
func (r *run) flushWrites() {
	for _, w := range r.rec.Writes() {
		r.res.Steps = append(r.res.Steps, HostOp{Op: OpWrite, Path: w.Path, Value: w.Value})
	}
	r.rec = &host.Recorder{Next: r.rec.Next}
	r.w = r.rec
}

func (r *run) step(s *HostOp) {
	if s != nil {
		r.flushWrites()
		r.res.Steps = append(r.res.Steps, *s)
	}
}

func (r *run) saveLedger() error {
	if r.dry {
		return nil
	}
	return r.ledger.save(r.root)
}

// groupsOf reads the groups of addrs, each once, in the order first named.
func groupsOf(root host.Root, addrs []host.Address) ([]*host.Group, error) {
	if len(addrs) == 0 {
		return nil, fmt.Errorf("no device address given: %w", host.ErrInvalid)
	}
	var out []*host.Group
	seen := map[int]bool{}
	for _, a := range addrs {
		g, err := groupOf(root, a)
		if err != nil {
			return nil, err
		}
		if !seen[g.ID] {
			seen[g.ID] = true
			out = append(out, g)
		}
	}
	return out, nil
}

// Bind moves every endpoint of the IOMMU groups of addrs to vfio-pci, by address. Functions
// already on vfio-pci are left alone (binding twice changes nothing and writes nothing);
// bridges stay on their driver. The original driver and override of each function are
// recorded in the ledger before it moves. When a function fails, the functions already moved
// are put back, in reverse order, so no group is left half-bound.
func (b *Binder) Bind(ctx context.Context, addrs []host.Address, opts BindOptions) (*Result, error) {
	held := startHolderSearch(b.Root)
	defer held.Wait() // no goroutine of the call outlives it
	groups, err := groupsOf(b.Root, addrs)
	if err != nil {
		return nil, err
	}
	held, resume := b.pauseNVIDIA(groups, held)
	defer resume()
	defer held.Wait()
	hc := startHostChecks(b.Root, groups, held)
	defer hc.Wait()
	r, unlock, err := b.start("bind", opts.DryRun)
	if err != nil {
		return nil, err
	}
	defer unlock()
	res := r.res
	pf := preflight(b.Root, groups, r.ledger, hc)
	res.Devices, res.Warnings = pf.devices, append(res.Warnings, pf.warnings...)
	moves, fixes := pf.moves, pf.fixes
	anyMove := len(moves) > 0
	if err := r.refuseOrWarn("bind "+addrList(addrs), pf.refusals, opts.forced); err != nil {
		return res, err
	}
	if opts.Persist {
		if err := checkPersistFiles(b.Root, groups); err != nil {
			return res, err
		}
	}

	if anyMove {
		if err := r.ensureVFIOLoaded(ctx); err != nil {
			return res, err
		}
	}
	for _, a := range fixes {
		if err := SetDriverOverride(ctx, b.Root, r.w, b.timeout(), a, DriverName); err != nil {
			r.flushWrites()
			return res, err
		}
	}
	for _, g := range groups {
		if err := r.bindGroup(ctx, g, moves[g.ID], opts); err != nil {
			r.flushWrites()
			return res, err
		}
	}
	r.flushWrites()
	res.Changed = (anyMove || len(fixes) > 0) && !opts.DryRun

	if opts.Persist {
		if err := r.persist(groups, opts.DryRun); err != nil {
			return res, err
		}
	}
	if opts.DryRun {
		for _, g := range groups {
			res.Groups = append(res.Groups, GroupState{ID: g.ID, Viable: true, VFIODev: host.HostPath(b.Root, host.VFIODev(b.Root, g.ID))})
		}
		return res, nil
	}
	if err := r.verifyBound(ctx, groups); err != nil {
		return res, err
	}
	recordBaselines(b.Root, groups, moves, res)
	return res, nil
}

// recordBaselines stores each moved function's health baseline (BAR sizes, AER counts, link
// width) as vgpu-host takes it: the handback check compares with it. The files are written
// together (host.RecordBaselines: one sync of their directory for the bind, not one per
// function). A baseline that cannot be written is a warning; the bind itself is done.
func recordBaselines(root host.Root, groups []*host.Group, moves map[int][]host.GroupMember, res *Result) {
	var addrs []host.Address
	for _, g := range groups { // in the order the groups were named, as the result lists them
		for _, m := range moves[g.ID] {
			addrs = append(addrs, m.Address)
		}
	}
	for _, err := range host.RecordBaselines(root, addrs, time.Now()) {
		res.Warnings = append(res.Warnings, err.Error())
	}
}

// bindPlan is what a bind of some groups would do and what refuses it, decided before any
// write.
type bindPlan struct {
	devices  []DriverChange
	moves    map[int][]host.GroupMember // by group: the functions that move to vfio-pci
	fixes    []host.Address             // on vfio-pci for vgpu-host, override to set again
	refusals []Refusal
	warnings []string
}

// moves reports whether a bind moves member m of its group to vfio-pci: every endpoint not on
// vfio-pci already (bridges stay on their driver).
func moves(m host.GroupMember) bool { return !m.IsBridge && m.Driver != DriverName }

// startHolderSearch starts the search of every process's open files for the device nodes of
// any function (host.DeviceNodeFamilies), before the groups are read: it is the longest of the
// host reads a bind's checks make, and does not need to know the functions to start
// (readHostChecks picks out each function's holders).
func startHolderSearch(root host.Root) *future.Value[[]host.Holder] {
	fams := host.DeviceNodeFamilies(root)
	return future.Go(func() []host.Holder { return host.Holders(root, fams) })
}

// startHostChecks starts reading, in the background, the host facts that the safety checks of
// a bind of groups need (readHostChecks, with held the search startHolderSearch started):
// none when no member moves. They are facts about the whole host (mounts, routes, every
// process's open files, the interrupt chips), read while the caller takes the bind lock and
// reads the ledger (#32). Reading them before the lock is held loses nothing: the lock orders
// vgpu-host's own runs, and no run of vgpu-host opens a function's device nodes or mounts its
// disks; a host process can do that at any moment before the unbind's write, lock or no lock.
func startHostChecks(root host.Root, groups []*host.Group, held *future.Value[[]host.Holder]) *future.Value[hostChecks] {
	ms := map[int][]host.GroupMember{}
	for _, g := range groups {
		for _, m := range g.Members {
			if moves(m) {
				ms[g.ID] = append(ms[g.ID], m)
			}
		}
	}
	if len(ms) == 0 {
		return future.Ready(hostChecks{})
	}
	return future.Go(func() hostChecks { return readHostChecks(root, ms, held.Wait) })
}

// preflight decides, for every member of groups, whether it moves, and runs every safety check
// a move needs: boot VGA, host-critical classes, mounts and routes, held device nodes, and
// interrupt remapping, on the host facts hc reads (startHostChecks of the same groups). It
// reads the host and writes nothing.
func preflight(root host.Root, groups []*host.Group, l *Bindings, hc *future.Value[hostChecks]) bindPlan {
	p := bindPlan{moves: map[int][]host.GroupMember{}}
	for _, g := range groups {
		for _, m := range g.Members {
			c := DriverChange{Address: m.Address, Group: g.ID, From: m.Driver, To: m.Driver}
			switch {
			case m.IsBridge:
				c.Note = "bridge stays on " + orNone(m.Driver)
			case !moves(m):
				c.Note = "already bound"
				if _, ours := l.Lookup(m.Address); ours && m.DriverOverride != DriverName {
					// An interrupted unbind cleared the override but did not get to move the
					// function: set it again so a re-probe keeps the function on vfio-pci.
					c.Note = "already bound; driver_override set again"
					p.fixes = append(p.fixes, m.Address)
				}
			default:
				c.To, c.Changed = DriverName, true
				p.moves[g.ID] = append(p.moves[g.ID], m)
			}
			p.devices = append(p.devices, c)
		}
	}
	// The quarantine records are vgpu-host's own state, read here; what the moves' checks read
	// from the whole host (mounts, routes, every process's open files, interrupt remapping)
	// was read once for the call, not once per group or function, meanwhile.
	var quarantined [][]Refusal
	for _, g := range groups {
		quarantined = append(quarantined, quarantineRefusals(root, g))
	}
	facts := hc.Wait()
	for i, g := range groups {
		p.refusals = append(p.refusals, quarantined[i]...)
		p.refusals = append(p.refusals, bindRefusals(root, g, p.moves[g.ID], facts)...)
	}
	if len(p.moves) > 0 {
		if facts.intRemap != nil {
			p.refusals = append(p.refusals, *facts.intRemap)
		}
		if facts.intRemapWarning != "" {
			p.warnings = append(p.warnings, facts.intRemapWarning)
		}
	}
	return p
}

// Preflight returns every safety check that would refuse a bind of the IOMMU groups of addrs,
// without changing anything (no lock, no write): what `plan` shows before `apply` binds. An
// address that does not exist, or a host without IOMMU, is the error.
func (b *Binder) Preflight(addrs []host.Address) ([]Refusal, error) {
	groups, err := groupsOf(b.Root, addrs)
	if err != nil {
		return nil, err
	}
	held, resume := b.pauseNVIDIA(groups, startHolderSearch(b.Root))
	defer resume()
	hc := startHostChecks(b.Root, groups, held)
	defer hc.Wait() // no goroutine of the call outlives it
	l, err := LoadLedger(b.Root)
	if err != nil {
		return nil, err
	}
	return preflight(b.Root, groups, l, hc).refusals, nil
}

// ensureVFIOLoaded loads vfio-pci when ROOT/sys/bus/pci/drivers/vfio-pci is missing.
func (r *run) ensureVFIOLoaded(ctx context.Context) error {
	dir := r.root.PCIDriver(DriverName)
	if host.DriverLoaded(r.root, DriverName) {
		return nil
	}
	r.step(&HostOp{Op: OpModprobe, Value: DriverName})
	if r.dry {
		return nil
	}
	if r.b.Modules == nil {
		return fmt.Errorf("vfio-pci is not loaded (%s is missing) and no module loader is set: run modprobe vfio-pci: %w", dir, host.ErrUnsupported)
	}
	ctx, cancel := context.WithTimeout(ctx, r.b.timeout())
	defer cancel()
	if err := r.b.Modules.Load(ctx, DriverName); err != nil {
		return fmt.Errorf("load vfio-pci for the bind (%s is missing): %w", dir, err)
	}
	if err := host.WaitFor(ctx, r.b.timeout(), func() (bool, error) { return host.DriverLoaded(r.root, DriverName), nil }); err != nil {
		return fmt.Errorf("vfio-pci loaded but %s did not appear: %w", dir, err)
	}
	return nil
}

// bindGroup moves members of g to vfio-pci and reverts the group when one fails. The original
// state of every function to move is recorded in the ledger first, in one write for the group:
// a crash later leaves entries of functions not yet moved, which unbind drops as "already
// restored" and a later bind keeps.
func (r *run) bindGroup(ctx context.Context, g *host.Group, moves []host.GroupMember, opts BindOptions) error {
	var fresh []host.Address
	for _, m := range moves {
		if _, ok := r.ledger.Lookup(m.Address); !ok {
			// A leftover entry (a run that crashed after recording) already holds the true
			// original; only a new function gets a new entry.
			r.ledger.Devices[m.Address.String()] = Binding{Address: m.Address, Group: g.ID, Driver: m.Driver,
				Module: host.DriverModule(r.root, m.Driver), Override: m.DriverOverride, Owner: opts.Owner, BoundAt: time.Now().UTC()}
			fresh = append(fresh, m.Address)
		}
	}
	if len(fresh) > 0 {
		if err := r.saveLedger(); err != nil {
			for _, a := range fresh {
				delete(r.ledger.Devices, a.String())
			}
			return fmt.Errorf("bind IOMMU group %d: record the original drivers before moving them: %w (nothing was moved)", g.ID, err)
		}
	}
	rv := revert.New()
	reached := map[host.Address]bool{}
	for _, m := range moves {
		reached[m.Address] = true
		err := r.bindOne(ctx, m)
		rv.Add(r.undoBind(ctx, g, m)) // a function that failed may be half-moved: undo it too
		if err != nil {
			return r.revertGroup(g, fresh, reached, rv, r.explain(err, m, g))
		}
	}
	rv.Success()
	return nil
}

// bindOne: override, unbind, probe, wait for the driver link. m's override is as read under
// the bind lock (the group's read), so it is not read again before the write; its driver is
// (the unbind must name the driver it is on now), and after the unbind it has none, so the
// probe is written without a look (the raw sequence's writes, one readlink more).
func (r *run) bindOne(ctx context.Context, m host.GroupMember) error {
	t := r.b.timeout()
	a := m.Address
	r.touched[a] = true
	if err := setDriverOverrideFrom(ctx, r.root, r.w, t, a, m.DriverOverride, DriverName); err != nil {
		return err
	}
	if err := Unbind(ctx, r.root, r.w, t, a); err != nil {
		return err
	}
	if err := probe(ctx, r.root, r.w, t, a); err != nil {
		return err
	}
	if r.dry {
		return nil
	}
	if err := WaitDriver(ctx, r.root, t, a, DriverName); err != nil {
		return fmt.Errorf("%w (is %s's override taken? check dmesg for vfio-pci errors)", err, a)
	}
	r.confirmed[a] = DriverName
	return nil
}

// explain adds the processes holding a device to a write that timed out.
func (r *run) explain(err error, m host.GroupMember, g *host.Group) error {
	if !errors.Is(err, host.ErrWriteTimeout) {
		return err
	}
	hs := host.Holders(r.root, host.DeviceNodes(r.root, m.Address, m.Driver, g.ID))
	held := "no holder found in /proc/*/fd (a kernel user such as a console or an in-kernel client may hold it)"
	if len(hs) > 0 {
		var parts []string
		for _, h := range hs {
			parts = append(parts, h.String())
		}
		held = "held by: " + strings.Join(parts, "; ")
	}
	return fmt.Errorf("%w: %w; %s", err, host.ErrBusy, held)
}

// undoBind returns the undo of moving m: put it back on its original driver and forget its
// ledger entry (which stays when it cannot be put back, so unbind can finish the job).
func (r *run) undoBind(ctx context.Context, g *host.Group, m host.GroupMember) func() error {
	return func() error {
		if err := r.restoreOne(ctx, entryFor(m, g.ID), false); err != nil {
			return fmt.Errorf("revert %s: %w", m.Address, err)
		}
		delete(r.ledger.Devices, m.Address.String())
		return nil
	}
}

// revertGroup undoes what bindGroup moved (rv, newest first) and drops the ledger entries this
// run recorded for functions it never reached. Entries left by an earlier crashed run stay, as
// they still hold the true original. cause is returned, joined with anything that could not be
// put back.
func (r *run) revertGroup(g *host.Group, fresh []host.Address, reached map[host.Address]bool, rv *revert.Reverter, cause error) error {
	if r.dry {
		return cause
	}
	errs := []error{rv.Fail()}
	for _, a := range fresh {
		if !reached[a] {
			delete(r.ledger.Devices, a.String())
		}
	}
	if err := r.saveLedger(); err != nil {
		errs = append(errs, err)
	}
	msg := fmt.Errorf("bind IOMMU group %d: %w; the functions already moved were put back", g.ID, cause)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w, but not all: %w (they stay in the ledger %s; run vgpu-host unbind)", msg, err, LedgerPath(r.root))
	}
	return msg
}

func entryFor(m host.GroupMember, group int) Binding {
	return Binding{Address: m.Address, Group: group, Driver: m.Driver, Override: m.DriverOverride}
}

// restoreOne puts e back: driver_override as it was, off vfio-pci, re-probed to its original
// driver (or left driverless). native restores a device with no ledger entry to whatever
// driver the kernel picks.
//
// An original driver that is no longer loaded is loaded first (its recorded module), before
// any write, so a function whose driver cannot come back stays on vfio-pci and in the ledger
// rather than being left driverless. An original override that would keep the original driver
// from binding (set by an admin while that driver was bound) is written back after the probe,
// which is the only order that restores both.
func (r *run) restoreOne(ctx context.Context, e Binding, native bool) error {
	t := r.b.timeout()
	a := e.Address
	r.touched[a] = true
	delete(r.confirmed, a)
	if !native && e.Driver != "" {
		if err := r.ensureDriverLoaded(ctx, e); err != nil {
			return err
		}
	}
	first, late := e.Override, false
	if !native && e.Driver != "" && e.Override != "" && e.Override != e.Driver {
		first, late = "", true
	}
	if err := SetDriverOverride(ctx, r.root, r.w, t, a, first); err != nil {
		return err
	}
	finish := func() error {
		if late {
			if err := SetDriverOverride(ctx, r.root, r.w, t, a, e.Override); err != nil {
				return err
			}
		}
		if !r.dry {
			r.confirmed[a] = e.Driver
		}
		return nil
	}
	cur, err := host.Driver(r.root, a)
	if err != nil {
		return err
	}
	if !native && cur == e.Driver {
		return finish() // never moved (a revert of a function whose unbind failed), or already back
	}
	if cur != "" {
		if err := unbindFrom(ctx, r.root, r.w, t, a, cur); err != nil { // cur was read just now
			return r.explainUnbind(err, e)
		}
	}
	if e.Driver == "" && !native {
		if r.dry {
			return nil
		}
		if err := WaitDriver(ctx, r.root, t, a, ""); err != nil {
			return err
		}
		r.confirmed[a] = ""
		return nil
	}
	// Unbound just now (or found driverless): no driver to look for before the probe.
	if err := probe(ctx, r.root, r.w, t, a); err != nil {
		return err
	}
	if r.dry {
		return finish()
	}
	if native {
		return nil
	}
	if err := waitRestored(ctx, r.root, t, a, e.Driver); err != nil {
		return err
	}
	return finish()
}

// waitRestored waits until a has a driver again and checks that it is driver: a wrong driver
// (two loaded drivers claim the device) is reported at once, not after the whole timeout.
func waitRestored(ctx context.Context, root host.Root, timeout time.Duration, a host.Address, driver string) error {
	var got string
	err := host.WaitFor(ctx, timeout, func() (bool, error) {
		d, err := host.Driver(root, a)
		got = d
		return d != "", err
	})
	if err != nil {
		return fmt.Errorf("wait for %s to be on %s (%s is no driver; see dmesg for %s probe errors): %w", a, driver, root.PCIDevice(a, "driver"), driver, err)
	}
	if got != driver {
		return fmt.Errorf("restore %s: the kernel bound %s, not the recorded %s (both drivers claim it); move it with: echo %s > %s; echo %s > %s",
			a, got, driver, a, host.HostPath(root, root.PCIDriver(got, "unbind")), a, host.HostPath(root, root.PCIDriver(driver, "bind")))
	}
	return nil
}

// ensureDriverLoaded loads e's original driver module when its driver directory is missing
// (unloaded since the bind), before the function leaves vfio-pci.
func (r *run) ensureDriverLoaded(ctx context.Context, e Binding) error {
	dir := r.root.PCIDriver(e.Driver)
	if host.DriverLoaded(r.root, e.Driver) {
		return nil
	}
	mod := orModule(e)
	r.step(&HostOp{Op: OpModprobe, Value: mod})
	if r.dry {
		return nil
	}
	fail := func(err error) error {
		return fmt.Errorf("restore %s to %s: the driver is not loaded (%s is missing) and loading module %s failed: %w; load it (modprobe %s) and run vgpu-host unbind %s again (the device stays on vfio-pci and in the ledger until then)",
			e.Address, e.Driver, host.HostPath(r.root, dir), mod, err, mod, e.Address)
	}
	if r.b.Modules == nil {
		return fail(fmt.Errorf("no module loader: %w", host.ErrUnsupported))
	}
	lctx, cancel := context.WithTimeout(ctx, r.b.timeout())
	defer cancel()
	if err := r.b.Modules.Load(lctx, mod); err != nil {
		return fail(err)
	}
	if err := host.WaitFor(ctx, r.b.timeout(), func() (bool, error) { return host.DriverLoaded(r.root, e.Driver), nil }); err != nil {
		return fail(fmt.Errorf("module loaded but %s did not appear: %w", host.HostPath(r.root, dir), err))
	}
	return nil
}

func orModule(e Binding) string {
	if e.Module != "" {
		return e.Module
	}
	return e.Driver
}

// verifyBound checks that each group is viable and its /dev/vfio/N exists, and fills Groups.
func (r *run) verifyBound(ctx context.Context, groups []*host.Group) error {
	var errs []error
	for _, g := range groups {
		now, err := r.groupAfter(g)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		st := GroupState{ID: g.ID, Viable: now.Viable}
		if !st.Viable {
			var bad []string
			for _, m := range now.Endpoints() {
				if m.Driver != "" && m.Driver != DriverName {
					bad = append(bad, m.Address.String()+" on "+m.Driver)
				}
			}
			errs = append(errs, fmt.Errorf("IOMMU group %d after bind: %w: %s", g.ID, ErrGroupNotViable, strings.Join(bad, ", ")))
		}
		if len(now.Endpoints()) == 0 {
			// Only bridges (ADDR named a root port): nothing for vfio-pci, no /dev/vfio/N.
			r.res.Groups = append(r.res.Groups, st)
			continue
		}
		dev := host.VFIODev(r.root, g.ID)
		err = host.WaitFor(ctx, r.b.timeout(), func() (bool, error) { return host.VFIODevExists(r.root, g.ID), nil })
		if err != nil {
			errs = append(errs, fmt.Errorf("IOMMU group %d is bound but %s did not appear (is devtmpfs mounted on /dev, udev running?): %w", g.ID, host.HostPath(r.root, dev), err))
		} else {
			st.VFIODev = host.HostPath(r.root, dev)
		}
		r.res.Groups = append(r.res.Groups, st)
	}
	return errors.Join(errs...)
}

// groupAfter returns g as this run left it: its members as read before the run, each function
// the run touched on the driver the kernel was seen to give it. When the group's member list
// changed meanwhile (a hot-plug), or a touched function's driver was not confirmed (a failed
// restore), the group is read again instead.
func (r *run) groupAfter(g *host.Group) (host.Group, error) {
	if !host.GroupUnchanged(r.root, g) {
		return host.ReadGroup(r.root, g.ID)
	}
	now := *g
	now.Members = slices.Clone(g.Members)
	for i := range now.Members {
		a := now.Members[i].Address
		if !r.touched[a] {
			continue
		}
		d, ok := r.confirmed[a]
		if !ok {
			return host.ReadGroup(r.root, g.ID)
		}
		now.Members[i].Driver = d
	}
	host.EvaluateGroup(&now)
	return now, nil
}

func addrList(addrs []host.Address) string {
	s := make([]string, len(addrs))
	for i, a := range addrs {
		s[i] = a.String()
	}
	return strings.Join(s, " ")
}
