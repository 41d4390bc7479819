// Package drift notices when libvirt and vgpu-host's allocation ledger disagree: a domain
// undefined outside vgpu-host (`virsh undefine`) while the ledger still gives it devices, or a
// device the ledger gives a VM that its domain no longer has (`virsh detach-device`). It also
// holds the agent's one warm libvirt connection (Conn), which reopens itself when libvirtd
// restarts.
//
// How it notices: libvirt's domain lifecycle events (virConnectDomainEventRegisterAny, streamed
// from the cgo helper over its pipe: virt.EventSource) trigger a comparison at once; a poll of
// the domain list (ListDomainXMLs) every 5 s is the safety net, and every 250 ms when the
// connection gives no events. With events a drift is seen within a second (milliseconds);
// by polling alone within about one poll and one comparison (up to 1.4 s measured under load).
//
// Policy (docs/metrics.md, "Drift"): a VM whose domain is gone has its allocation released
// only when none of its devices is held by a running process (a QEMU that outlived its
// definition, a tool with /dev/vfio/N open: host.Holders); otherwise it is kept and reported
// until that changes. A detached device is reported and kept: the VM still exists and may get
// it back. Releasing is the agent's job (Watcher.Release, run through its mutation queue);
// the watcher only decides.
package drift

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/ledger"
	"github.com/vgpu-host/vgpu-host/virt"
)

// Drift kinds.
const (
	KindDomainUndefined = "domain-undefined"
	KindDeviceDetached  = "device-detached"
)

// Actions the policy takes.
const (
	ActionRelease = "release" // the domain is gone and nothing holds its devices
	ActionKeep    = "keep"    // kept and reported (held devices, or a detached device)
)

// DefaultInterval is how often the watcher compares the ledger with libvirt when it gets no
// domain events; DefaultEventInterval when it does (the poll is then a safety net for what an
// event stream can miss: events dropped, a reconnect in between).
const (
	DefaultInterval      = 250 * time.Millisecond
	DefaultEventInterval = 5 * time.Second
)

// Drift is one disagreement between the ledger and libvirt.
type Drift struct {
	VM   string `json:"vm"`
	Kind string `json:"kind"`
	// Devices are the ledger's claims concerned: all of the VM's for an undefined domain, the
	// detached ones otherwise ("pci:0000:01:00.0", "mdev:UUID").
	Devices []string `json:"devices"`
	// Holders are processes holding one of the devices open (why it is kept).
	Holders []host.Holder `json:"holders,omitempty"`
	// Action is what the policy decided: release or keep.
	Action string `json:"action"`
	// Reason says why, in words.
	Reason string    `json:"reason"`
	Since  time.Time `json:"since"`
}

// Recorder gets drift as it is seen and resolved (agent/metrics.Metrics implements it).
type Recorder interface {
	Drift(vm, kind string)
	ResolveDrift(vm, kind string)
}

// Watcher compares the ledger with libvirt's domains.
type Watcher struct {
	// Conn is the libvirt connection (the agent's warm Conn).
	Conn virt.Conn
	// Ledger is the allocation ledger.
	Ledger *ledger.Ledger
	// Root is the host, for the holders of a VM's devices.
	Root host.Root
	// Interval between checks without domain events (0: DefaultInterval), EventInterval with
	// them (0: DefaultEventInterval).
	Interval      time.Duration
	EventInterval time.Duration
	// Metrics, when set, gets every drift and its resolution.
	Metrics Recorder
	// Release, when set, is called for a drift the policy releases (the agent destroys the VM
	// through its queue, which undoes what apply did). Without it drift is only reported.
	Release func(ctx context.Context, d Drift) error
	// Log gets one line per drift seen, resolved or released (nil: discarded).
	Log *slog.Logger

	mu      sync.Mutex
	current map[[2]string]Drift
}

// Drifts returns the current drifts, sorted by VM and kind (for the agent's status).
func (w *Watcher) Drifts() []Drift {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]Drift, 0, len(w.current))
	for _, d := range w.current {
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].VM != out[j].VM {
			return out[i].VM < out[j].VM
		}
		return out[i].Kind < out[j].Kind
	})
	return out
}

// Run checks until ctx ends: at once whenever libvirt reports a domain lifecycle event (when
// Conn is a virt.EventSource: the agent's Conn over the helper is), and every Interval besides
// (every EventInterval while events flow: the poll is then only a safety net). A check that
// fails (libvirtd down) is logged once per error text and retried; drift already known stays
// current; a check that fails because libvirt is unreachable is not logged here (Conn logs
// the connection going down and coming back, once each). A lost event stream is subscribed
// again at the next tick.
func (w *Watcher) Run(ctx context.Context) error {
	iv := w.Interval
	if iv <= 0 {
		iv = DefaultInterval
	}
	eiv := w.EventInterval
	if eiv <= 0 {
		eiv = DefaultEventInterval
	}
	var events <-chan virt.DomainEvent
	subscribe := func() {
		src, ok := w.Conn.(virt.EventSource)
		if !ok {
			return
		}
		ch, err := src.DomainEvents(ctx)
		if err != nil {
			w.log().Debug("drift: no domain events; polling", "error", err.Error())
			return
		}
		events = ch
		w.log().Info("drift: following libvirt domain events", "uri", w.Conn.URI())
	}
	subscribe()
	var lastErr string
	next := time.Now()
	for {
		if _, err := w.Check(ctx); err != nil {
			switch {
			case errors.Is(err, ErrNotConnected) || errors.Is(err, virt.ErrConnection):
				// libvirt is down: Conn logs that once, and once when it is back. The
				// error's text changes every tick ("next attempt in 140ms"), so
				// comparing texts logged a line per tick on a host without libvirt.
			case err.Error() != lastErr:
				w.log().Warn("drift: check failed", "error", err.Error())
			}
			lastErr = err.Error()
		} else {
			lastErr = ""
		}
		wait := iv
		if events != nil {
			wait = eiv
		}
		next = next.Add(wait)
		if d := time.Until(next); d < 0 {
			next = time.Now()
		}
		timer := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-timer.C:
			if events == nil {
				subscribe()
			}
		case e, ok := <-events:
			timer.Stop()
			if !ok {
				events = nil
				break
			}
			w.log().Debug("drift: domain event", "domain", e.Domain, "event", e.Event)
			drain(events)
			next = time.Now()
		}
	}
}

// drain takes the events already queued: one check covers them all.
func drain(ch <-chan virt.DomainEvent) {
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		default:
			return
		}
	}
}

func (w *Watcher) log() *slog.Logger {
	if w.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return w.Log
}

// Check compares once and returns the drifts found now. New drift is logged and recorded;
// drift that is gone is resolved; drift the policy releases is handed to Release.
func (w *Watcher) Check(ctx context.Context) ([]Drift, error) {
	book, err := w.Ledger.Read()
	if book == nil {
		return nil, fmt.Errorf("drift: %w", err)
	}
	doms, err := w.Conn.ListDomainXMLs(ctx)
	if err != nil {
		return nil, fmt.Errorf("drift: list libvirt domains: %w", err)
	}
	found := Compare(book, doms, w.Conn.URI())
	for i := range found {
		w.decide(&found[i])
	}
	w.update(ctx, found)
	return found, nil
}

// Compare finds the drifts between book and the domains (name → XML) of the libvirt
// connection uri. Only VMs whose apply finished (phase applied) on that connection are
// judged: an apply or destroy in flight owns its VM.
func Compare(book *ledger.Book, doms map[string]string, uri string) []Drift {
	var out []Drift
	for _, name := range book.Names() {
		vm := book.VM(name)
		if vm.Phase != ledger.PhaseApplied || len(vm.Claims) == 0 || (vm.URI != "" && uri != "" && vm.URI != uri) {
			continue
		}
		x, ok := doms[name]
		if !ok {
			out = append(out, Drift{VM: name, Kind: KindDomainUndefined, Devices: claimKeys(vm.Claims)})
			continue
		}
		hd, ok := virt.DomainHostdevs(x)
		if !ok {
			continue // XML libvirt gave us that does not parse: no judgement
		}
		has := map[string]bool{}
		for _, a := range hd.PCI {
			has[a.String()] = true
		}
		for _, u := range hd.Mdevs {
			has[u] = true
		}
		var missing []ledger.Claim
		for _, c := range vm.Claims {
			if !has[strings.ToLower(c.ID)] {
				missing = append(missing, c)
			}
		}
		if len(missing) > 0 {
			out = append(out, Drift{VM: name, Kind: KindDeviceDetached, Devices: claimKeys(missing)})
		}
	}
	return out
}

func claimKeys(cs []ledger.Claim) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Key()
	}
	return out
}

// decide applies the policy to d.
func (w *Watcher) decide(d *Drift) {
	if d.Kind != KindDomainUndefined {
		d.Action, d.Reason = ActionKeep, "the domain still exists: the device may be attached again; destroy the VM to release it"
		return
	}
	d.Holders = host.Holders(w.Root, devicePaths(w.Root, d.Devices))
	if len(d.Holders) > 0 {
		hs := make([]string, len(d.Holders))
		for i, h := range d.Holders {
			hs[i] = h.String()
		}
		d.Action, d.Reason = ActionKeep, "the domain is gone but its devices are in use: "+strings.Join(hs, "; ")
		return
	}
	d.Action, d.Reason = ActionRelease, "the domain is gone and no process holds its devices"
}

// devicePaths are the device nodes through which a process can hold the claimed devices:
// a PCI function's nodes (host.DeviceNodes: its vfio group, DRM, sound, nvidia nodes) and an
// mdev instance's vfio group.
func devicePaths(root host.Root, keys []string) []string {
	var out []string
	for _, k := range keys {
		kind, id, _ := strings.Cut(k, ":")
		switch ledger.ClaimKind(kind) {
		case ledger.KindPCI, ledger.KindVendorVGPU:
			a, err := host.ParseAddress(id)
			if err != nil {
				continue
			}
			drv, _ := host.Driver(root, a)
			g, err := host.IOMMUGroupID(root, a)
			if err != nil {
				g = -1
			}
			out = append(out, host.DeviceNodes(root, a, drv, g)...)
			out = append(out, host.VFIOCdevs(root, a)...)
		case ledger.KindMdev:
			if mi, _, err := host.ReadMdevInstance(root, id); err == nil && mi.IOMMUGroup >= 0 {
				out = append(out, host.HostPath(root, host.VFIODev(root, mi.IOMMUGroup)))
			}
		}
	}
	return out
}

// update records what changed since the last check.
func (w *Watcher) update(ctx context.Context, found []Drift) {
	w.mu.Lock()
	if w.current == nil {
		w.current = map[[2]string]Drift{}
	}
	now := map[[2]string]bool{}
	var fresh, release []Drift
	for _, d := range found {
		k := [2]string{d.VM, d.Kind}
		now[k] = true
		old, seen := w.current[k]
		if seen {
			d.Since = old.Since
		} else {
			d.Since = time.Now()
			fresh = append(fresh, d)
		}
		w.current[k] = d
		if d.Action == ActionRelease && (!seen || old.Action != ActionRelease) {
			release = append(release, d)
		}
	}
	var gone []Drift
	for k, d := range w.current {
		if !now[k] {
			gone = append(gone, d)
			delete(w.current, k)
		}
	}
	// Metrics change under the lock, with current: whoever sees a drift in Drifts (the
	// agent's /v1/drift) finds it in /metrics too.
	if w.Metrics != nil {
		for _, d := range fresh {
			w.Metrics.Drift(d.VM, d.Kind)
		}
		for _, d := range gone {
			w.Metrics.ResolveDrift(d.VM, d.Kind)
		}
	}
	w.mu.Unlock()

	log := w.log()
	for _, d := range fresh {
		log.WarnContext(ctx, "drift", "vm", d.VM, "kind", d.Kind, "devices", strings.Join(d.Devices, ","), "action", d.Action, "reason", d.Reason)
	}
	for _, d := range gone {
		log.InfoContext(ctx, "drift resolved", "vm", d.VM, "kind", d.Kind)
	}
	if w.Release == nil {
		return
	}
	for _, d := range release {
		if err := w.Release(ctx, d); err != nil {
			log.WarnContext(ctx, "drift: release failed; kept", "vm", d.VM, "error", err.Error())
			continue
		}
		log.InfoContext(ctx, "drift: allocation released", "vm", d.VM, "devices", strings.Join(d.Devices, ","))
	}
}
