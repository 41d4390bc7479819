package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"libvirt.org/go/libvirtxml"

	"github.com/vgpu-host/vgpu-host/domains"
	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/ledger"
	"github.com/vgpu-host/vgpu-host/step"
	"github.com/vgpu-host/vgpu-host/vfio"
	"github.com/vgpu-host/vgpu-host/vgpu"
	"github.com/vgpu-host/vgpu-host/virt"
)

// Hotplug: attach a GPU, a vGPU or a virtio-gpu to a VM apply made, running or stopped, and
// detach it again (docs/hotplug.md). An attach is one group in the VM's journal:
//
//	hotplug DEVICE        (claims; "started" until the attach finished)
//	bind-group / create-mdev / assign-vgpu ...   (the host steps apply would take for it)
//	attach-device DEVICE  (one per device XML: the GPU, each companion)
//
// so destroy undoes it with the rest of the VM, detach undoes exactly that group, and an
// attach killed half-way (a "started" mark) is undone by the next attach, detach or destroy
// of the VM.

// DeviceVirtio is the device name of a hotplugged virtio-gpu.
const DeviceVirtio = "virtio-gpu"

// AttachRequest says what Attach gives VM: exactly one of GPU (a PCI address: the GPU and its
// companions, as passthrough), Profile (a vGPU type: an mdev or vendor-VFIO instance) and
// Virtio.
type AttachRequest struct {
	VM      string
	GPU     string
	Profile string
	Virtio  bool
	// Config attaches to the persistent definition only, even when the VM runs (the next
	// boot); a stopped VM always gets config only.
	Config bool
	// DryRun resolves and checks everything and changes nothing.
	DryRun bool
}

// HotplugResult reports what Attach or Detach did (or, DryRun, would do).
type HotplugResult struct {
	VM     string `json:"vm"`
	Device string `json:"device"`
	// Changed is false when the device was attached (detached) already.
	Changed bool   `json:"changed"`
	DryRun  bool   `json:"dry_run,omitempty"`
	Note    string `json:"note,omitempty"`
	// Scope is where the device was attached or detached: "live+config" or "config".
	Scope string     `json:"scope,omitempty"`
	State virt.State `json:"state"`
	// Steps are the journal steps taken (undone, for detach), in order; Planned has them
	// with their params for a dry run.
	Steps   []string       `json:"steps"`
	Planned []step.Planned `json:"planned,omitempty"`
	// DeviceXML is each device as libvirt gets it.
	DeviceXML []string       `json:"device_xml,omitempty"`
	Claims    []ledger.Claim `json:"claims"`
	// Converged lists the steps of an interrupted attach undone first.
	Converged []string `json:"converged,omitempty"`
}

// hotplugEnv is the step environment of a hotplug: it bounds the wait for a guest to release
// a device (step.AttachDevice's undo asks for DetachTimeout).
type hotplugEnv struct {
	step.Env
	timeout time.Duration
}

// DetachTimeout bounds the wait for the guest.
func (e hotplugEnv) DetachTimeout() time.Duration { return e.timeout }

// group is one attach in the journal: its mark and the steps after it.
type group struct {
	mark  ledger.JournalStep
	hp    step.Hotplug
	steps []ledger.JournalStep // after the mark, oldest first
}

// groups finds the attaches in journal j: each hotplug mark with the steps after it up to
// the last attach-device step of its device (for a finished one) or up to the next mark.
func groups(j []ledger.JournalStep) ([]group, error) {
	var out []group
	for i, s := range j {
		if s.Action != string(step.ActHotplug) {
			continue
		}
		st, err := step.Decode(s.Action, s.Target, s.Params)
		if err != nil {
			return nil, fmt.Errorf("journal step %d: %w: %w", s.N, err, ErrDamagedJournal)
		}
		g := group{mark: s, hp: st.(step.Hotplug)}
		end := len(j)
		for k := i + 1; k < len(j); k++ {
			if j[k].Action == string(step.ActHotplug) {
				end = k
				break
			}
		}
		if s.Status != ledger.StepStarted {
			last := i
			for k := i + 1; k < end; k++ {
				if j[k].Action == string(step.ActAttachDevice) && j[k].Target == s.Target {
					last = k
				}
			}
			end = last + 1
		}
		g.steps = j[i+1 : end]
		out = append(out, g)
	}
	return out, nil
}

// claims are the claims g's attach took.
func (g group) claims() []ledger.Claim {
	var out []ledger.Claim
	for _, k := range g.hp.Claims {
		kind, id, _ := strings.Cut(k, ":") // Decode checked the shape
		out = append(out, ledger.Claim{Kind: ledger.ClaimKind(kind), ID: id})
	}
	return out
}

// live returns the steps of g not undone.
func (g group) live() []ledger.JournalStep {
	var out []ledger.JournalStep
	for _, s := range g.steps {
		if s.Status != ledger.StepUndone {
			out = append(out, s)
		}
	}
	return out
}

// undoGroup undoes g's live steps newest first, then marks its mark undone and releases its
// claims, in one ledger write.
func (l *Lifecycle) undoGroup(ctx context.Context, name string, g group, timeout time.Duration) ([]string, error) {
	var undone []string
	live := g.live()
	for i := len(live) - 1; i >= 0; i-- {
		if err := l.undoIn(ctx, name, live[i], timeout); err != nil {
			return undone, err
		}
		undone = append(undone, live[i].Action+" "+live[i].Target)
	}
	err := l.o.Ledger.Update(func(b *ledger.Book) error {
		e := b.VM(name)
		if e == nil {
			return nil
		}
		e.Mark(g.mark.N, ledger.StepUndone)
		if cs := g.claims(); len(cs) > 0 {
			b.Release(name, cs...) // with none, Release would drop all
		}
		return nil
	})
	return undone, err
}

// undoIn is undo with the hotplug's wait bound.
func (l *Lifecycle) undoIn(ctx context.Context, name string, s ledger.JournalStep, timeout time.Duration) error {
	return l.undoWith(ctx, name, s, hotplugEnv{Env: l.env(name, nil, nil), timeout: timeout})
}

// convergeHotplug undoes every attach of name that a crash left half-done, waiting up to
// timeout for the guest to release each device the attach had given it.
func (l *Lifecycle) convergeHotplug(ctx context.Context, name string, timeout time.Duration) ([]string, error) {
	var j []ledger.JournalStep
	if err := l.o.Ledger.View(func(b *ledger.Book) error {
		if e := b.VM(name); e != nil {
			j = e.Live()
		}
		return nil
	}); err != nil {
		return nil, err
	}
	gs, err := groups(j)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, g := range gs {
		if g.mark.Status != ledger.StepStarted {
			continue
		}
		l.progress("%s: undoing the interrupted attach of %s", name, g.mark.Target)
		u, err := l.undoGroup(ctx, name, g, timeout)
		out = append(out, u...)
		if err != nil {
			return out, fmt.Errorf("converge the interrupted attach of %s: %w", g.mark.Target, err)
		}
	}
	return out, nil
}

// appliedEntry returns name's ledger entry, which must be applied.
func (l *Lifecycle) appliedEntry(name string) (*ledger.VM, error) {
	var e *ledger.VM
	if err := l.o.Ledger.View(func(b *ledger.Book) error { e = b.VM(name); return nil }); err != nil {
		return nil, err
	}
	if e == nil {
		return nil, fmt.Errorf("VM %s is not in the ledger %s (vgpu-host apply did not create it): %w", name, l.o.Ledger.Path(), host.ErrNotFound)
	}
	if e.Phase != ledger.PhaseApplied {
		return nil, fmt.Errorf("VM %s is %s (an interrupted apply or destroy): run vgpu-host apply or destroy for it first: %w", name, e.Phase, host.ErrBusy)
	}
	return e, nil
}

// domainFacts are what a hotplug needs to know of the domain.
type domainFacts struct {
	running  bool
	state    virt.State
	machine  string
	virtType string
	// persistent and live are the domain's XML (live is the persistent XML when stopped).
	persistent, live string
}

func (l *Lifecycle) domainFacts(ctx context.Context, name string) (domainFacts, error) {
	var f domainFacts
	st, err := l.o.Conn.State(ctx, name)
	if err != nil {
		return f, fmt.Errorf("domain %s: %w", name, err)
	}
	f.state = st
	f.running = st == virt.StateRunning || st == virt.StatePaused
	if f.persistent, err = l.o.Conn.DomainXML(ctx, name); err != nil {
		return f, err
	}
	f.live = f.persistent
	if f.running {
		if f.live, err = l.o.Conn.LiveDomainXML(ctx, name); err != nil {
			return f, err
		}
	}
	var d libvirtxml.Domain
	if err := d.Unmarshal(f.persistent); err != nil {
		return f, fmt.Errorf("domain %s: %w", name, err)
	}
	f.virtType = d.Type
	if d.OS != nil && d.OS.Type != nil {
		f.machine = d.OS.Type.Machine
	}
	return f, nil
}

// attachPlan is what an attach would do.
type attachPlan struct {
	device string
	claims []ledger.Claim
	steps  []step.Step // the hotplug mark first, the attach-device steps last
	xmls   []string
	scope  virt.DeviceScope
}

// Attach gives a VM that apply made one more device: resolved, checked and prepared on the
// host as apply would, claimed in the ledger, then attached by libvirt to the running guest
// and its definition (the definition only when it is stopped, or with Config). Attaching a
// GPU the VM holds already, or a second virtio-gpu, changes nothing and says so. It holds the
// VM's lock throughout.
func (l *Lifecycle) Attach(ctx context.Context, req AttachRequest) (*HotplugResult, error) {
	name := req.VM
	res := &HotplugResult{VM: name, Steps: []string{}, Claims: []ledger.Claim{}, DryRun: req.DryRun}
	n := 0
	for _, b := range []bool{req.GPU != "", req.Profile != "", req.Virtio} {
		if b {
			n++
		}
	}
	if n != 1 {
		return res, fmt.Errorf("attach %s: give exactly one of a GPU address, a vGPU profile or virtio: %w", name, host.ErrInvalid)
	}
	unlock, err := l.o.Ledger.LockVM(name)
	if err != nil {
		return res, fmt.Errorf("attach %s: %w", name, err)
	}
	defer unlock()
	l.checked = map[string][]vfio.Refusal{}
	if !req.DryRun {
		if res.Converged, err = l.convergeHotplug(ctx, name, l.o.DetachTimeout); err != nil {
			return res, fmt.Errorf("attach %s: %w", name, err)
		}
	}
	e, err := l.appliedEntry(name)
	if err != nil {
		return res, fmt.Errorf("attach %s: %w", name, err)
	}
	f, err := l.domainFacts(ctx, name)
	if err != nil {
		return res, fmt.Errorf("attach %s: %w", name, err)
	}
	res.State = f.state
	if done := l.alreadyAttached(e, req); done != "" {
		res.Device, res.Note = done, "already attached: nothing to do"
		return res, nil
	}
	inv, err := l.o.Scan(l.o.Root)
	if err != nil {
		return res, fmt.Errorf("attach %s: scan host: %w", name, err)
	}
	fp, fm, err := l.foreign(ctx, func(string) bool { return false })
	if err != nil {
		return res, fmt.Errorf("attach %s: %w", name, err)
	}
	var p *attachPlan
	decide := func(b *ledger.Book) error {
		// Domains the ledger knows hold what the ledger says; only the others count as foreign.
		for a, d := range fp {
			if b.VM(d) != nil {
				delete(fp, a)
			}
		}
		for u, d := range fm {
			if b.VM(d) != nil {
				delete(fm, u)
			}
		}
		var err error
		p, err = l.planAttach(ctx, req, f, b, inv, fp, fm)
		return err
	}
	if req.DryRun {
		if err := l.o.Ledger.View(decide); err != nil {
			return res, fmt.Errorf("attach %s: %w", name, err)
		}
		l.fillResult(res, p)
		for _, s := range p.steps {
			res.Planned = append(res.Planned, step.Planned{Step: s})
		}
		return res, nil
	}
	markN := 0
	if err := l.o.Ledger.Update(func(b *ledger.Book) error {
		if err := decide(b); err != nil {
			return err
		}
		if err := b.Claim(name, p.claims...); err != nil {
			return err
		}
		s0 := p.steps[0]
		markN = b.Entry(name).Record(string(s0.Action()), s0.Target(), s0.Params())
		return nil
	}); err != nil {
		return res, fmt.Errorf("attach %s: %w", name, err)
	}
	l.fillResult(res, p)
	if err := l.takeHotplug(ctx, name, p, markN, res); err != nil {
		return res, err
	}
	res.Changed = true
	res.State, _ = l.o.Conn.State(ctx, name)
	return res, nil
}

func (l *Lifecycle) fillResult(res *HotplugResult, p *attachPlan) {
	res.Device, res.Claims, res.DeviceXML, res.Scope = p.device, p.claims, p.xmls, p.scope.String()
	if res.Claims == nil {
		res.Claims = []ledger.Claim{}
	}
}

// takeHotplug takes the plan's steps after the mark (journal number markN), each recorded
// before it is taken; a failure undoes the group. The last write marks the mark done.
func (l *Lifecycle) takeHotplug(ctx context.Context, name string, p *attachPlan, markN int, res *HotplugResult) error {
	env := hotplugEnv{Env: l.env(name, nil, nil), timeout: l.o.DetachTimeout}
	pending := 0 // a step taken, not yet marked done (the mark stays started until the end)
	fail := func(cause error) error {
		if pending > 0 {
			_ = l.o.Ledger.Update(func(b *ledger.Book) error { b.Entry(name).Mark(pending, ledger.StepDone); return nil })
		}
		var j []ledger.JournalStep
		_ = l.o.Ledger.View(func(b *ledger.Book) error {
			if e := b.VM(name); e != nil {
				j = e.Live()
			}
			return nil
		})
		gs, err := groups(j)
		if err != nil {
			return fmt.Errorf("%w; undo also failed (run vgpu-host detach %s %s): %w", cause, name, p.device, err)
		}
		for _, g := range gs {
			if g.mark.N == markN {
				if _, err := l.undoGroup(ctx, name, g, l.o.DetachTimeout); err != nil {
					return fmt.Errorf("%w; undo also failed (run vgpu-host detach %s %s): %w", cause, name, p.device, err)
				}
			}
		}
		return cause
	}
	res.Steps = append(res.Steps, p.steps[0].Text())
	for _, ps := range p.steps[1:] {
		n := 0
		if err := l.o.Ledger.Update(func(b *ledger.Book) error {
			e := b.Entry(name)
			if pending > 0 {
				e.Mark(pending, ledger.StepDone)
			}
			n = e.Record(string(ps.Action()), ps.Target(), ps.Params())
			return nil
		}); err != nil {
			return fail(fmt.Errorf("attach %s: record %s: %w", name, ps.Text(), err))
		}
		pending = 0
		if err := l.take(ctx, name, ps, step.RecordOf(ps), env, n); err != nil {
			if errors.Is(err, virt.ErrDeviceNotHotpluggable) {
				err = fmt.Errorf("%w: %w", err, host.ErrUnsupported)
			}
			return fail(fmt.Errorf("attach %s: %s: %w", name, ps.Text(), err))
		}
		pending = n
		res.Steps = append(res.Steps, ps.Text())
	}
	return l.o.Ledger.Settle(func(b *ledger.Book) error {
		e := b.Entry(name)
		if pending > 0 {
			e.Mark(pending, ledger.StepDone)
		}
		e.Mark(markN, ledger.StepDone)
		return nil
	})
}

// alreadyAttached names the device when req asks for what the VM has: a GPU address it holds
// (from apply or an attach), or a virtio-gpu an earlier attach gave it.
func (l *Lifecycle) alreadyAttached(e *ledger.VM, req AttachRequest) string {
	if req.GPU != "" {
		if a, err := host.ParseAddress(req.GPU); err == nil {
			if slices.ContainsFunc(e.Claims, func(c ledger.Claim) bool { return c.Kind == ledger.KindPCI && c.ID == a.String() }) {
				return a.String()
			}
		}
	}
	if req.Virtio {
		gs, _ := groups(e.Live())
		for _, g := range gs {
			if g.mark.Target == DeviceVirtio && g.mark.Status == ledger.StepDone {
				return DeviceVirtio
			}
		}
	}
	return ""
}

// planAttach resolves req against the host and the book as apply resolves a gpus[] entry,
// runs apply's safety checks, and lays out the steps and the device XML.
func (l *Lifecycle) planAttach(ctx context.Context, req AttachRequest, f domainFacts, book *ledger.Book, inv *host.Inventory, fp map[host.Address]string, fm map[string]string) (*attachPlan, error) {
	name := req.VM
	q35 := domains.IsQ35(f.machine)
	machine := "pc"
	if q35 {
		machine = "q35"
	}
	p := &attachPlan{scope: virt.DeviceConfig}
	if f.running && !req.Config {
		p.scope |= virt.DeviceLive
	}
	var g domains.GPU
	e := book.VM(name)
	mdevs, vendors := 0, 0
	for _, c := range e.Claims {
		switch c.Kind {
		case ledger.KindMdev:
			mdevs++
		case ledger.KindVendorVGPU:
			vendors++
		}
	}
	switch {
	case req.Virtio:
		if p.scope&virt.DeviceLive != 0 {
			return nil, fmt.Errorf("VM %s is running and libvirt cannot hotplug a video device (virtio-gpu) into a running guest: "+
				"add --config to attach it to the definition for the next boot, or stop the VM first: %w", name, host.ErrUnsupported)
		}
		g.VirtioGPU = &domains.VirtioGPU{}
	case req.GPU != "":
		a, err := host.ParseAddress(req.GPU)
		if err != nil {
			return nil, fmt.Errorf("--gpu %q: %w: %w", req.GPU, err, host.ErrInvalid)
		}
		g.Passthrough = &domains.Passthrough{Address: a.String()}
	default:
		// The lowest instance number whose UUID nobody holds (the spec's instances hold
		// theirs): numbers of detached instances are reused.
		mdevs = 0
		for {
			u := vgpu.InstanceUUID(name, mdevs)
			if book.Holder(ledger.Claim{Kind: ledger.KindMdev, ID: u}) == "" {
				break
			}
			mdevs++
		}
		g.VGPU = &domains.VGPU{Profile: req.Profile}
	}
	vm := &domains.VM{APIVersion: domains.APIVersion, Kind: domains.Kind, Metadata: domains.Metadata{Name: name},
		Spec: domains.Spec{VCPUs: 1, Machine: machine, VirtType: f.virtType, GPUs: []domains.GPU{g}}}
	if g.VGPU != nil && strings.TrimSpace(req.Profile) != "" {
		// The resolver numbers the VM's instances from 0; name this one's UUID.
		g.VGPU.UUIDs = []string{vgpu.InstanceUUID(name, mdevs)}
		g.VGPU.Count = 1
	}
	vt := f.virtType
	if vt != "kvm" && vt != "qemu" {
		vt = ""
	}
	alloc, err := domains.Resolve(vm, inv, domains.ResolveOptions{VirtType: vt, InUse: inUse(book, "", fp)})
	if err != nil {
		if errors.Is(err, host.ErrBusy) {
			if held := pinnedHolders(vm, book.Holder, fp); held != "" {
				return nil, fmt.Errorf("%w (%s)", err, held)
			}
		}
		return nil, err
	}
	p.claims = alloc.Claims()
	if err := checkClaims(p.claims, name, book.Holder, fm); err != nil {
		return nil, err
	}
	for _, c := range p.claims {
		if h := book.Holder(c); h != "" {
			return nil, fmt.Errorf("%s %s is allocated to VM %q already: %w", c.Kind, c.ID, h, host.ErrBusy)
		}
	}
	num := &domains.Numbering{Owned: func(c ledger.Claim) bool { return book.Holder(c) == name }}
	num.From(mdevs, vendors)
	hostSteps, _, err := alloc.HostSteps(num)
	if err != nil {
		return nil, err
	}
	plan := &VMPlan{VM: name, Alloc: alloc, Claims: p.claims}
	plan.add(hostSteps...)
	if err := l.preflight(ctx, plan); err != nil {
		return nil, err
	}
	if err := plan.Refused(); err != nil {
		return nil, err
	}
	hds, videos, err := domains.HotplugDevices(vm, alloc)
	if err != nil {
		return nil, err
	}
	switch {
	case len(alloc.GPUs) == 1 && len(alloc.GPUs[0].Slots) > 0:
		p.device = alloc.GPUs[0].Slots[0].Functions[0].String()
	case len(alloc.GPUs) == 1 && len(alloc.GPUs[0].Mdevs) > 0:
		p.device = strings.ToLower(alloc.GPUs[0].Mdevs[0].UUID)
	default:
		p.device = DeviceVirtio
	}
	if len(hds) > 0 && p.scope&virt.DeviceLive != 0 {
		if !q35 {
			return nil, fmt.Errorf("VM %s runs machine %s: vgpu-host hotplugs devices into empty PCIe root ports, which only q35 has; "+
				"attach it with --config (the next boot) or to the stopped VM: %w", name, f.machine, host.ErrUnsupported)
		}
		free, err := virt.FreeRootPorts(f.live)
		if err != nil {
			return nil, err
		}
		if len(free) < len(hds) {
			return nil, fmt.Errorf("VM %s has %d free PCIe root ports and %s needs %d (one per function): give its spec hotplugSlots: N "+
				"and apply it again (the ports exist from its next boot), or attach with --config: %w", name, len(free), p.device, len(hds), host.ErrBusy)
		}
		for i := range hds {
			dom, bus, slot, fn := uint(0), free[i], uint(0), uint(0)
			hds[i].Address = &libvirtxml.DomainAddress{PCI: &libvirtxml.DomainAddressPCI{Domain: &dom, Bus: &bus, Slot: &slot, Function: &fn}}
		}
	}
	keys := make([]string, len(p.claims))
	for i, c := range p.claims {
		keys[i] = c.Key()
	}
	p.steps = append(p.steps, step.Hotplug{VM: name, Device: p.device, Claims: keys})
	p.steps = append(p.steps, hostSteps...)
	for _, h := range hds {
		x, err := h.Marshal()
		if err != nil {
			return nil, fmt.Errorf("device XML: %w", err)
		}
		p.xmls = append(p.xmls, x)
		p.steps = append(p.steps, step.AttachDevice{VM: name, Device: p.device, XML: x, Scope: p.scope})
	}
	for _, v := range videos {
		x, err := v.Marshal()
		if err != nil {
			return nil, fmt.Errorf("device XML: %w", err)
		}
		before, err := virt.CountDevice(f.persistent, "video:"+v.Model.Type)
		if err != nil {
			return nil, err
		}
		p.xmls = append(p.xmls, x)
		p.steps = append(p.steps, step.AttachDevice{VM: name, Device: p.device, XML: x, Scope: p.scope, Before: before})
	}
	return p, nil
}

// Detach removes a device an attach gave VM: libvirt detaches it (from the running guest,
// waiting up to timeout for the guest to release it, and from the definition), then the host
// steps of its attach are undone and its claims released, as destroy would for it. A device
// detached already says so; one the VM's spec gave it (apply) is refused: change the spec.
func (l *Lifecycle) Detach(ctx context.Context, name, device string, timeout time.Duration) (*HotplugResult, error) {
	res := &HotplugResult{VM: name, Device: device, Steps: []string{}, Claims: []ledger.Claim{}}
	if a, err := host.ParseAddress(device); err == nil {
		device = a.String()
	} else {
		device = strings.ToLower(device)
	}
	res.Device = device
	unlock, err := l.o.Ledger.LockVM(name)
	if err != nil {
		return res, fmt.Errorf("detach %s: %w", name, err)
	}
	defer unlock()
	if res.Converged, err = l.convergeHotplug(ctx, name, timeout); err != nil {
		return res, fmt.Errorf("detach %s: %w", name, err)
	}
	e, err := l.appliedEntry(name)
	if err != nil {
		return res, fmt.Errorf("detach %s: %w", name, err)
	}
	if st, err := l.o.Conn.State(ctx, name); err == nil {
		res.State = st
	}
	all, err := groups(e.Journal)
	if err != nil {
		return res, fmt.Errorf("detach %s: %w", name, err)
	}
	var g *group
	detached := false
	var attached []string
	for i := range all {
		if all[i].mark.Status == ledger.StepDone {
			attached = append(attached, all[i].mark.Target)
			if all[i].mark.Target == device {
				g = &all[i]
			}
		} else if all[i].mark.Target == device {
			detached = true
		}
	}
	if g == nil {
		if slices.ContainsFunc(e.Claims, func(c ledger.Claim) bool { return c.ID == device }) {
			return res, fmt.Errorf("detach %s: %s came with the VM's spec (apply), not with vgpu-host attach: remove it from spec.gpus and apply again: %w", name, device, host.ErrUnsupported)
		}
		if detached {
			res.Note = "not attached (detached already): nothing to do"
			return res, nil
		}
		list := "none"
		if len(attached) > 0 {
			list = strings.Join(attached, ", ")
		}
		return res, fmt.Errorf("detach %s: no device %s was attached to it (attached: %s): %w", name, device, list, host.ErrNotFound)
	}
	res.Claims = g.claims()
	if res.Claims == nil {
		res.Claims = []ledger.Claim{}
	}
	for _, s := range g.steps {
		if s.Action == string(step.ActAttachDevice) {
			res.DeviceXML = append(res.DeviceXML, s.Params["xml"])
		}
	}
	undone, err := l.undoGroup(ctx, name, *g, timeout)
	res.Steps = append(res.Steps, undone...)
	if err != nil {
		return res, fmt.Errorf("detach %s: %w", name, err)
	}
	res.Changed = true
	res.State, _ = l.o.Conn.State(ctx, name)
	return res, nil
}
