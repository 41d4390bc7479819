package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"libvirt.org/go/libvirtxml"

	"github.com/vgpu-host/vgpu-host/domains"
	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/internal/lazy"
	"github.com/vgpu-host/vgpu-host/ledger"
	"github.com/vgpu-host/vgpu-host/step"
	"github.com/vgpu-host/vgpu-host/vgpu"
	"github.com/vgpu-host/vgpu-host/virt"
)

// MigrationTarget reaches the target host's vgpu-host: its Lifecycle.Incoming, in this process
// (tests) or through `vgpu-host migrate-target` (internal/clitree/migrate.go).
type MigrationTarget interface {
	Incoming(ctx context.Context, req IncomingRequest) (*IncomingReply, error)
}

// MigrateOptions configure Migrate.
type MigrateOptions struct {
	// Target is the target host's vgpu-host.
	Target MigrationTarget
	// DestURI is the target's libvirt URI as this host's libvirtd reaches it; MigrateURI where
	// the migration stream goes (virt.MigrateOptions).
	DestURI, MigrateURI string
	// CopyStorage copies the disks to the target (libvirt's copy-storage-all); SharedStorage
	// says they are on storage both hosts share. A VM with writable host disks needs one.
	CopyStorage, SharedStorage bool
	// DryRun asks the target for its plan and says what both hosts would do; nothing changes.
	DryRun bool
}

// MigrateResult reports a migration (or, DryRun, what it would do).
type MigrateResult struct {
	VM     string `json:"vm"`
	From   string `json:"from"`
	To     string `json:"to"`
	DryRun bool   `json:"dry_run,omitempty"`
	// Devices are the VM's host devices, with the target's instead of each.
	Devices []MigratingDevice `json:"devices"`
	// SourceSteps and TargetSteps are what each host does (or did), in order.
	SourceSteps []string `json:"source_steps"`
	TargetSteps []string `json:"target_steps"`
	// Released are the source's claims it gave back.
	Released []ledger.Claim `json:"released,omitempty"`
	// Kept are the volumes apply created on the source that stay there (the target runs on
	// shared storage, or on its copy).
	Kept []string `json:"kept,omitempty"`
}

// migrationDrivers says, for the driver of an mdev type (its ID's prefix) whether the kernel
// driver implements VFIO migration (the VFIO_DEVICE_FEATURE_MIGRATION feature), and since when.
var migrationDrivers = lazy.Value[map[string]string]{New: func() map[string]string {
	return map[string]string{
		"mtty":   "Linux 6.7 (and QEMU 8.1) on both hosts",
		"nvidia": "NVIDIA vGPU software with migration enabled on both hosts",
	}
}}

// noMigrationDrivers are mdev drivers known to have no VFIO migration.
var noMigrationDrivers = []string{"mbochs", "mdpy", "i915"}

// pciMigrationDrivers are the VFIO variant drivers of whole PCI functions that implement VFIO
// migration. vgpu-host binds passthrough functions to vfio-pci, which does not.
var pciMigrationDrivers = []string{"mlx5_vfio_pci", "hisi_acc_vfio_pci", "pds_vfio_pci", "qat_vfio_pci", "virtio_vfio_pci"}

// mdevDriverOf is the driver part of an mdev type ID: "mtty" of "mtty-2", "i915" of
// "i915-GVTg_V5_4".
func mdevDriverOf(typ string) string {
	d, _, _ := strings.Cut(typ, "-")
	return d
}

// Migrate moves the running VM name to the target host, live: the target reserves and prepares
// an equivalent device for each of the VM's host devices, the domain XML is rewritten for them,
// libvirt migrates it (persistent there, undefined here), the target records it as its VM, and
// this host undoes its host steps and forgets it. Any failure before libvirt's migration ends
// leaves the VM running here with both ledgers as they were (the target's reservation rolled
// back). It holds the VM's lock, as apply does.
func (l *Lifecycle) Migrate(ctx context.Context, name string, o MigrateOptions) (*MigrateResult, error) {
	unlock, err := l.o.Ledger.LockVM(name)
	if err != nil {
		return nil, fmt.Errorf("migrate %s: %w", name, err)
	}
	defer unlock()
	res := &MigrateResult{VM: name, From: l.o.Conn.URI(), To: o.DestURI, DryRun: o.DryRun,
		Devices: []MigratingDevice{}, SourceSteps: []string{}, TargetSteps: []string{}}
	if o.Target == nil {
		return res, fmt.Errorf("migrate %s: no target vgpu-host: %w", name, host.ErrInvalid)
	}
	if err := (virt.MigrateOptions{DestURI: o.DestURI}).Check(); err != nil {
		return res, fmt.Errorf("migrate %s: %w", name, err)
	}
	src, err := l.migrationSource(ctx, name, o)
	if errors.Is(err, errGoneHere) && !o.DryRun {
		return res, l.finishInterrupted(ctx, name, o, res, err)
	}
	if err != nil {
		return res, err
	}
	req := IncomingRequest{Op: OpPlan, VM: name, Devices: src.devices, VirtType: src.live.Type}
	if o.DryRun {
		rep, err := o.Target.Incoming(ctx, req)
		if err != nil {
			return res, fmt.Errorf("migrate %s: target plan: %w", name, err)
		}
		res.Devices, res.TargetSteps = append(res.Devices, rep.Devices...), append([]string{"reserve " + claimsText(rep.Claims) + " in the ledger (phase incoming)"}, rep.Steps...)
		res.TargetSteps = append(res.TargetSteps, "record domain "+name+" as this host's VM (phase applied)")
		res.SourceSteps = src.steps(o, rep.Devices)
		return res, nil
	}
	req.Op = OpPrepare
	rep, err := o.Target.Incoming(ctx, req)
	if err != nil {
		return res, fmt.Errorf("migrate %s: target prepare: %w (nothing changed here; the VM runs on %s)", name, err, res.From)
	}
	res.Devices = append(res.Devices, rep.Devices...)
	res.TargetSteps = append(res.TargetSteps, rep.Steps...)
	vo := virt.MigrateOptions{DestURI: o.DestURI, MigrateURI: o.MigrateURI, CopyStorage: o.CopyStorage}
	if vo.DestXML, err = rewriteXML(src.live, rep.Devices); err == nil {
		vo.PersistXML, err = rewriteXML(src.persistent, rep.Devices)
	}
	if err == nil {
		l.progress("%s: migrating live to %s", name, o.DestURI)
		err = l.o.Conn.Migrate(ctx, name, vo)
	}
	if err != nil {
		return res, l.migrationFailed(ctx, name, o, res, err)
	}
	res.SourceSteps = append(res.SourceSteps, "migrate domain "+name+" live to "+o.DestURI+" (persistent there, undefined here)")
	var errs []error
	crep, cerr := o.Target.Incoming(ctx, IncomingRequest{Op: OpCommit, VM: name})
	if cerr != nil {
		errs = append(errs, fmt.Errorf("migrate %s: the VM runs on %s, but its ledger there could not record it: %w; run `vgpu-host migrate-target commit %s` there", name, o.DestURI, cerr, name))
	} else {
		res.TargetSteps = append(res.TargetSteps, crep.Steps...)
	}
	if err := l.releaseMigrated(ctx, name, res); err != nil {
		errs = append(errs, fmt.Errorf("migrate %s: the VM runs on %s; releasing its devices here: %w; run `vgpu-host destroy %s` here to finish", name, o.DestURI, err, name))
	}
	return res, errors.Join(errs...)
}

// errGoneHere: the ledger has the VM but libvirt here has no such domain.
var errGoneHere = errors.New("the ledger has the VM, but this host's libvirt has no such domain")

// finishInterrupted finishes a migration whose source process died after libvirt moved the
// domain (kill -9 during the libvirt call): the target commits (it refuses unless the domain
// runs there), then this host releases the VM as after a migration. When the target has no
// such domain either, the VM is on neither host, and this says so without changing anything.
func (l *Lifecycle) finishInterrupted(ctx context.Context, name string, o MigrateOptions, res *MigrateResult, gone error) error {
	crep, err := o.Target.Incoming(ctx, IncomingRequest{Op: OpCommit, VM: name})
	if err != nil {
		return fmt.Errorf("%w; nor does the target take it as migrated (%w): if it runs nowhere, vgpu-host destroy %s here releases its devices", gone, err, name)
	}
	l.progress("%s: finishing an interrupted migration: the VM runs on %s", name, o.DestURI)
	res.SourceSteps = append(res.SourceSteps, "found domain "+name+" gone here and running on "+o.DestURI+" (an interrupted migration)")
	res.TargetSteps = append(res.TargetSteps, crep.Steps...)
	return l.releaseMigrated(ctx, name, res)
}

// migrationFailed rolls the target back after a failed libvirt migration and says where the VM
// is: libvirt's failure leaves it running here.
func (l *Lifecycle) migrationFailed(ctx context.Context, name string, o MigrateOptions, res *MigrateResult, cause error) error {
	cause = fmt.Errorf("migrate %s: %w", name, cause)
	arep, aerr := o.Target.Incoming(context.WithoutCancel(ctx), IncomingRequest{Op: OpAbort, VM: name})
	if aerr != nil {
		cause = fmt.Errorf("%w; rolling the target back failed too: %w (run `vgpu-host migrate-target abort %s` there)", cause, aerr, name)
	} else {
		for _, s := range arep.Steps {
			res.TargetSteps = append(res.TargetSteps, "undid "+s)
		}
	}
	if st, err := l.o.Conn.State(context.WithoutCancel(ctx), name); err == nil {
		return fmt.Errorf("%w (the VM is %s on %s, its devices and ledger unchanged)", cause, st, res.From)
	}
	return cause
}

// source is what Migrate read on the source: the domain's live and persistent XML, and its
// devices.
type source struct {
	live, persistent *libvirtxml.Domain
	devices          []MigratingDevice
	journal          []ledger.JournalStep
}

// migrationSource reads the VM on this host and refuses, before anything changes, what cannot
// migrate: a VM not applied or not running, a PCI function whose driver has no VFIO migration,
// an mdev whose driver has none, virgl 3D, host disks without --copy-storage.
func (l *Lifecycle) migrationSource(ctx context.Context, name string, o MigrateOptions) (*source, error) {
	var e *ledger.VM
	if err := l.o.Ledger.View(func(b *ledger.Book) error { e = b.VM(name); return nil }); err != nil {
		return nil, err
	}
	if e == nil {
		return nil, fmt.Errorf("migrate %s: not in the ledger %s (vgpu-host did not create it): %w", name, l.o.Ledger.Path(), host.ErrNotFound)
	}
	if e.Phase != ledger.PhaseApplied {
		return nil, fmt.Errorf("migrate %s: its ledger entry is %s, not applied: run vgpu-host apply or destroy first: %w", name, e.Phase, host.ErrBusy)
	}
	st, err := l.o.Conn.State(ctx, name)
	if virt.IsNotFound(err) {
		return nil, fmt.Errorf("migrate %s: %w: %w", name, errGoneHere, err)
	}
	if err != nil {
		return nil, fmt.Errorf("migrate %s: %w", name, err)
	}
	if st != virt.StateRunning {
		return nil, fmt.Errorf("migrate %s: the domain is %s: live migration moves a running VM (apply its spec on the target instead): %w", name, st, host.ErrInvalid)
	}
	src := &source{journal: e.Live()}
	lx, err := l.o.Conn.MigratableXML(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("migrate %s: %w", name, err)
	}
	px, err := l.o.Conn.DomainXML(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("migrate %s: %w", name, err)
	}
	src.live, src.persistent = &libvirtxml.Domain{}, &libvirtxml.Domain{}
	if err := src.live.Unmarshal(lx); err != nil {
		return nil, fmt.Errorf("migrate %s: live domain XML: %w", name, err)
	}
	if err := src.persistent.Unmarshal(px); err != nil {
		return nil, fmt.Errorf("migrate %s: domain XML: %w", name, err)
	}
	if err := refuseUnmigratable(name, src.live, o); err != nil {
		return nil, err
	}
	for _, c := range e.Claims {
		switch c.Kind {
		case vgpu.ClaimMdev:
			drv := mdevDriverOf(c.Detail)
			if _, ok := migrationDrivers.Get()[drv]; !ok {
				why := "its driver is not known to implement VFIO migration"
				if slices.Contains(noMigrationDrivers, drv) {
					why = "its driver has no VFIO migration"
				}
				return nil, fmt.Errorf("migrate %s: mdev %s (type %s, driver %s): %s (migratable: %s): %w",
					name, c.ID, c.Detail, drv, why, strings.Join(sortedKeys(migrationDrivers.Get()), ", "), host.ErrUnsupported)
			}
			src.devices = append(src.devices, MigratingDevice{Kind: c.Kind, Type: c.Detail, Source: c.ID})
		case vgpu.ClaimVendorVGPU:
			src.devices = append(src.devices, MigratingDevice{Kind: c.Kind, Type: vendorTypeOf(c.Detail), Source: c.ID})
		default: // a passthrough function: refused, naming its driver
			inv, err := l.o.Scan(l.o.Root)
			if err != nil {
				return nil, fmt.Errorf("migrate %s: scan host: %w", name, err)
			}
			drv := "unknown"
			for _, d := range inv.Devices {
				if d.Address.String() == c.ID && d.Driver != "" {
					drv = d.Driver
				}
			}
			return nil, fmt.Errorf("migrate %s: PCI function %s (%s) is bound to %s, which has no VFIO migration "+
				"(variant drivers with it: %s; vgpu-host binds passthrough to vfio-pci): stop the VM and apply its spec on the target instead: %w",
				name, c.ID, c.Detail, drv, strings.Join(pciMigrationDrivers, ", "), host.ErrUnsupported)
		}
	}
	for _, d := range src.devices {
		if !hasHostdev(src.live, d) {
			return nil, fmt.Errorf("migrate %s: the ledger gives it %s %s, but its running domain has no such host device: %w", name, d.Kind, d.Source, host.ErrInvalid)
		}
	}
	return src, nil
}

// refuseUnmigratable refuses virgl 3D (its GL state lives in the host's GPU driver) and
// writable host disks without --copy-storage or --shared-storage.
func refuseUnmigratable(name string, d *libvirtxml.Domain, o MigrateOptions) error {
	if d.Devices == nil {
		return nil
	}
	for _, v := range d.Devices.Videos {
		if v.Model.Accel != nil && v.Model.Accel.Accel3D == "yes" {
			return fmt.Errorf("migrate %s: its %s video has virgl 3D (accel3d): QEMU cannot migrate GL state; use 2D virtio-gpu (spec virtioGpu.virgl: false): %w", name, v.Model.Type, host.ErrUnsupported)
		}
	}
	for _, g := range d.Devices.Graphics {
		if (g.Spice != nil && g.Spice.GL != nil && g.Spice.GL.Enable == "yes") || (g.EGLHeadless != nil) {
			return fmt.Errorf("migrate %s: its graphics use OpenGL (gl enable='yes' or egl-headless, virgl): QEMU cannot migrate GL state: %w", name, host.ErrUnsupported)
		}
	}
	if o.CopyStorage || o.SharedStorage {
		return nil
	}
	for _, disk := range d.Devices.Disks {
		if disk.ReadOnly != nil || disk.Source == nil {
			continue
		}
		var path string
		switch {
		case disk.Source.File != nil:
			path = disk.Source.File.File
		case disk.Source.Block != nil:
			path = disk.Source.Block.Dev
		case disk.Source.Volume != nil:
			path = disk.Source.Volume.Pool + "/" + disk.Source.Volume.Volume
		default:
			continue
		}
		return fmt.Errorf("migrate %s: disk %s is a host disk: use --copy-storage to copy it to the target while the VM runs, or --shared-storage if both hosts see it at the same path: %w", name, path, host.ErrInvalid)
	}
	return nil
}

// hasHostdev reports whether the domain has d's source device.
func hasHostdev(dom *libvirtxml.Domain, d MigratingDevice) bool {
	found := false
	eachHostdev(dom, func(uuid *string, pci *libvirtxml.DomainAddressPCI) {
		switch {
		case uuid != nil && d.Kind == vgpu.ClaimMdev:
			found = found || strings.EqualFold(*uuid, d.Source)
		case pci != nil && d.Kind == vgpu.ClaimVendorVGPU:
			found = found || pciString(pci) == d.Source
		}
	})
	return found
}

// eachHostdev calls fn with each mdev hostdev's UUID or PCI hostdev's source address.
func eachHostdev(dom *libvirtxml.Domain, fn func(uuid *string, pci *libvirtxml.DomainAddressPCI)) {
	if dom.Devices == nil {
		return
	}
	for i := range dom.Devices.Hostdevs {
		h := &dom.Devices.Hostdevs[i]
		switch {
		case h.SubsysMDev != nil && h.SubsysMDev.Source != nil && h.SubsysMDev.Source.Address != nil:
			fn(&h.SubsysMDev.Source.Address.UUID, nil)
		case h.SubsysPCI != nil && h.SubsysPCI.Source != nil && h.SubsysPCI.Source.Address != nil:
			fn(nil, h.SubsysPCI.Source.Address)
		}
	}
}

// pciString is a libvirtxml PCI address as host.Address writes it; "" when incomplete.
func pciString(a *libvirtxml.DomainAddressPCI) string {
	if a.Domain == nil || a.Bus == nil || a.Slot == nil || a.Function == nil {
		return ""
	}
	return host.Address{Domain: uint32(*a.Domain), Bus: uint8(*a.Bus), Device: uint8(*a.Slot), Function: uint8(*a.Function)}.String()
}

// rewriteXML returns dom's XML with each device's source replaced by its target (a copy: dom
// is left alone). It fails when a device is not in the domain.
func rewriteXML(dom *libvirtxml.Domain, devs []MigratingDevice) (string, error) {
	x, err := domains.Marshal(dom)
	if err != nil {
		return "", err
	}
	var d libvirtxml.Domain
	if err := d.Unmarshal(x); err != nil {
		return "", err
	}
	for _, dv := range devs {
		n := 0
		var perr error
		eachHostdev(&d, func(uuid *string, pci *libvirtxml.DomainAddressPCI) {
			switch {
			case uuid != nil && dv.Kind == vgpu.ClaimMdev && strings.EqualFold(*uuid, dv.Source):
				*uuid = dv.Target
				n++
			case pci != nil && dv.Kind == vgpu.ClaimVendorVGPU && pciString(pci) == dv.Source:
				a, err := host.ParseAddress(dv.Target)
				if err != nil {
					perr = fmt.Errorf("target device %s: %w", dv.Target, err)
					return
				}
				dom, bus, slot, fn := uint(a.Domain), uint(a.Bus), uint(a.Device), uint(a.Function)
				pci.Domain, pci.Bus, pci.Slot, pci.Function = &dom, &bus, &slot, &fn
				n++
			}
		})
		if perr != nil {
			return "", perr
		}
		if n != 1 {
			return "", fmt.Errorf("domain %s: %s %s is in its XML %d times, not once: %w", d.Name, dv.Kind, dv.Source, n, host.ErrInvalid)
		}
	}
	return domains.Marshal(&d)
}

// steps says what this host does in a migration with the target's devices.
func (s *source) steps(o MigrateOptions, devs []MigratingDevice) []string {
	var out []string
	for _, d := range devs {
		out = append(out, fmt.Sprintf("rewrite the domain XML: %s %s -> %s", d.Kind, d.Source, d.Target))
	}
	how := "live, persistent there, undefined here"
	if o.CopyStorage {
		how += ", disks copied"
	}
	out = append(out, fmt.Sprintf("migrate domain %s to %s (%s)", s.live.Name, o.DestURI, how))
	for i := len(s.journal) - 1; i >= 0; i-- {
		if j := s.journal[i]; isHostStep(j.Action) {
			out = append(out, "undo "+j.Action+" "+j.Target)
		}
	}
	return append(out, "forget "+s.live.Name+" (release its claims)")
}

// isHostStep reports whether a journal action changed the host's devices: the steps a
// migrated VM's source undoes. The others are libvirt's (the domain went with the migration)
// or volumes (kept: the target uses them on shared storage, or copied them).
func isHostStep(action string) bool {
	switch step.Action(action) {
	case step.ActBindGroup, step.ActCreateMdev, step.ActAssignVGPU:
		return true
	}
	return false
}

// releaseMigrated is the source's end of a migration that went through: first, in one ledger
// write, the journal's steps that are not host steps are marked undone (the domain left with
// the migration; the volumes stay, and a later destroy here must not delete what the target
// may run on); then the host steps are undone, newest first; then the VM is forgotten.
func (l *Lifecycle) releaseMigrated(ctx context.Context, name string, res *MigrateResult) error {
	var host []ledger.JournalStep
	if err := l.o.Ledger.Update(func(b *ledger.Book) error {
		e := b.VM(name)
		if e == nil {
			return nil
		}
		res.Released = e.Claims
		for _, j := range e.Live() {
			if isHostStep(j.Action) {
				host = append(host, j)
				continue
			}
			e.Mark(j.N, ledger.StepUndone)
			switch step.Action(j.Action) {
			case step.ActCreateOverlay, step.ActCreateBlank, step.ActWriteSeed:
				res.Kept = append(res.Kept, j.Target)
			}
		}
		return nil
	}); err != nil {
		return err
	}
	for i := len(host) - 1; i >= 0; i-- {
		if err := l.undo(ctx, name, host[i]); err != nil {
			return err
		}
		res.SourceSteps = append(res.SourceSteps, "undid "+host[i].Action+" "+host[i].Target)
	}
	res.SourceSteps = append(res.SourceSteps, "forgot "+name+" (released "+claimsText(res.Released)+")")
	return l.o.Ledger.Update(func(b *ledger.Book) error { b.Delete(name); return nil })
}

// claimsText lists claims as "mdev 1234…, vendor-vgpu 0000:41:00.4", or "no devices".
func claimsText(cs []ledger.Claim) string {
	if len(cs) == 0 {
		return "no devices"
	}
	var out []string
	for _, c := range cs {
		out = append(out, string(c.Kind)+" "+c.ID)
	}
	return strings.Join(out, ", ")
}
