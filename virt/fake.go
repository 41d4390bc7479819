package virt

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"libvirt.org/go/libvirtxml"
)

// Fake is an in-memory Conn for unit tests. It parses domain XML with libvirtxml (so a
// domain without a name is refused, as libvirt would), keeps volumes per pool, and can be
// told to fail a method (Fail) or answer QMP (QMPFunc). It is safe for concurrent use.
type Fake struct {
	mu    sync.Mutex
	types []string
	doms  map[string]*fakeDomain
	pools map[string]string // name -> path
	vols  map[string]map[string]*FakeVolume
	fail  map[string]error
	calls []string
	// holdDetach: guests ignore live detach requests (fakehotplug.go).
	holdDetach bool
	// detachWait: how long a live DetachDevice of a held device blocks, as libvirt's own
	// wait for the guest does (fakehotplug.go).
	detachWait time.Duration
	QMPFunc    func(name, xml, command string) (string, error)
	peers      map[string]*Fake // fake_migrate.go: the targets Migrate reaches, by URI
}

type fakeDomain struct {
	xml   string
	state State
	// live is the running guest's XML once a device was hotplugged (fakehotplug.go); empty
	// means the same as xml.
	live string
}

// FakeVolume is a volume held by a Fake.
type FakeVolume struct {
	Volume
	Data []byte
}

var _ Conn = (*Fake)(nil)

// NewFake returns an empty Fake offering the given virt types (default ["qemu"]).
func NewFake(virtTypes ...string) *Fake {
	if len(virtTypes) == 0 {
		virtTypes = []string{"qemu"}
	}
	return &Fake{
		types: virtTypes,
		doms:  map[string]*fakeDomain{},
		pools: map[string]string{},
		vols:  map[string]map[string]*FakeVolume{},
		fail:  map[string]error{},
	}
}

// Fail makes every later call of method (e.g. "Define", "Start") return err; nil clears it.
func (f *Fake) Fail(method string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		delete(f.fail, method)
		return
	}
	f.fail[method] = err
}

// Calls returns the methods called so far, in order, as "Method arg".
func (f *Fake) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

// AddForeignDomain defines a domain as if another tool had (for "devices held elsewhere" tests).
func (f *Fake) AddForeignDomain(name, xml string, running bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := StateShutoff
	if running {
		st = StateRunning
	}
	f.doms[name] = &fakeDomain{xml: xml, state: st}
}

// Volumes returns the names of the volumes in pool, sorted.
func (f *Fake) Volumes(pool string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for n := range f.vols[pool] {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Volume returns a volume of pool, or nil.
func (f *Fake) Volume(pool, name string) *FakeVolume {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.vols[pool][name]
}

// Domains returns the names of defined domains, sorted.
func (f *Fake) Domains() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for n := range f.doms {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// SetState sets a domain's state (e.g. to simulate a guest powering itself off).
func (f *Fake) SetState(name string, s State) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if d := f.doms[name]; d != nil {
		d.state = s
	}
}

// enter records a call and returns the injected failure, if any. f.mu must be held.
func (f *Fake) enter(method, arg string) error {
	f.calls = append(f.calls, method+" "+arg)
	if err := f.fail[method]; err != nil {
		return fmt.Errorf("%s %s: %w", method, arg, err)
	}
	return nil
}

// URI returns "fake:///".
func (f *Fake) URI() string { return "fake:///" }

// Close does nothing.
func (f *Fake) Close() error { return nil }

// VirtTypes returns the types given to NewFake.
func (f *Fake) VirtTypes(context.Context) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("VirtTypes", ""); err != nil {
		return nil, err
	}
	return append([]string(nil), f.types...), nil
}

// Define stores the XML under the domain's name.
func (f *Fake) Define(_ context.Context, xml string) (string, error) {
	var d libvirtxml.Domain
	if err := d.Unmarshal(xml); err != nil {
		return "", fmt.Errorf("define domain: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("Define", d.Name); err != nil {
		return "", err
	}
	if d.Name == "" {
		return "", fmt.Errorf("define domain: missing name")
	}
	if old := f.doms[d.Name]; old != nil {
		old.xml = xml
		return d.Name, nil
	}
	f.doms[d.Name] = &fakeDomain{xml: xml, state: StateShutoff}
	return d.Name, nil
}

func (f *Fake) dom(name string) (*fakeDomain, error) {
	d := f.doms[name]
	if d == nil {
		return nil, fmt.Errorf("look up domain %s: %w", name, ErrNoDomain)
	}
	return d, nil
}

// Start marks the domain running.
func (f *Fake) Start(_ context.Context, name string) error {
	return f.setState("Start", name, StateRunning)
}

// Shutdown marks the domain shut off (the fake guest obeys at once).
func (f *Fake) Shutdown(_ context.Context, name string) error {
	return f.setState("Shutdown", name, StateShutoff)
}

// Destroy marks the domain shut off.
func (f *Fake) Destroy(_ context.Context, name string) error {
	return f.setState("Destroy", name, StateShutoff)
}

// setState is Start, Shutdown and Destroy: the fake's domains change state at once.
func (f *Fake) setState(method, name string, st State) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter(method, name); err != nil {
		return err
	}
	d, err := f.dom(name)
	if err != nil {
		return err
	}
	if d.state != st {
		d.state, d.live = st, "" // a new boot runs the persistent definition
	}
	return nil
}

// Undefine forgets a stopped domain (libvirt keeps a running one as transient; the fake refuses).
func (f *Fake) Undefine(_ context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("Undefine", name); err != nil {
		return err
	}
	d, err := f.dom(name)
	if err != nil {
		return err
	}
	if d.state == StateRunning {
		return fmt.Errorf("undefine domain %s: fake refuses to undefine a running domain", name)
	}
	delete(f.doms, name)
	return nil
}

// State returns the domain's state.
func (f *Fake) State(_ context.Context, name string) (State, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, err := f.dom(name)
	if err != nil {
		return "", err
	}
	return d.state, nil
}

// DomainXML returns the XML given to Define.
func (f *Fake) DomainXML(_ context.Context, name string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, err := f.dom(name)
	if err != nil {
		return "", err
	}
	return d.xml, nil
}

// ListDomainXMLs returns every domain's XML.
func (f *Fake) ListDomainXMLs(context.Context) (map[string]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("ListDomainXMLs", ""); err != nil {
		return nil, err
	}
	out := make(map[string]string, len(f.doms))
	for n, d := range f.doms {
		out[n] = d.xml
	}
	return out, nil
}

// QMP calls QMPFunc for a running domain.
func (f *Fake) QMP(_ context.Context, name, command string) (string, error) {
	f.mu.Lock()
	d, err := f.dom(name)
	if err == nil && d.state != StateRunning {
		err = fmt.Errorf("QMP to domain %s: domain is not running", name)
	}
	var xml string
	if d != nil {
		xml = d.xml
	}
	fn := f.QMPFunc
	f.mu.Unlock()
	if err != nil {
		return "", err
	}
	if fn == nil {
		return "", fmt.Errorf("QMP to domain %s: fake has no QMPFunc", name)
	}
	return fn(name, xml, command)
}

// EnsureDirPool records the pool.
func (f *Fake) EnsureDirPool(_ context.Context, name, path string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("EnsureDirPool", name); err != nil {
		return err
	}
	f.pools[name] = path
	if f.vols[name] == nil {
		f.vols[name] = map[string]*FakeVolume{}
	}
	return nil
}

func (f *Fake) pool(name string) (map[string]*FakeVolume, error) {
	p, ok := f.vols[name]
	if !ok {
		return nil, fmt.Errorf("look up storage pool %s: %w", name, ErrNoPool)
	}
	return p, nil
}

// CreateVolume stores v; an existing name is an error, as in libvirt.
func (f *Fake) CreateVolume(_ context.Context, pool string, v Volume) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("CreateVolume", v.Name); err != nil {
		return err
	}
	p, err := f.pool(pool)
	if err != nil {
		return err
	}
	if p[v.Name] != nil {
		return fmt.Errorf("create volume %s in pool %s: %w", v.Name, pool, ErrVolumeExists)
	}
	p[v.Name] = &FakeVolume{Volume: v}
	return nil
}

// UploadVolume stores data as a raw volume.
func (f *Fake) UploadVolume(_ context.Context, pool, name string, data []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("UploadVolume", name); err != nil {
		return err
	}
	p, err := f.pool(pool)
	if err != nil {
		return err
	}
	p[name] = &FakeVolume{Volume: Volume{Name: name, Format: "raw", Capacity: uint64(len(data))}, Data: append([]byte(nil), data...)}
	return nil
}

// VolumePath returns POOLPATH/NAME.
func (f *Fake) VolumePath(_ context.Context, pool, name string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, err := f.pool(pool)
	if err != nil {
		return "", err
	}
	if p[name] == nil {
		return "", fmt.Errorf("look up volume %s in pool %s: %w", name, pool, ErrNoVolume)
	}
	return f.pools[pool] + "/" + name, nil
}

// DeleteVolume removes a volume.
func (f *Fake) DeleteVolume(_ context.Context, pool, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("DeleteVolume", name); err != nil {
		return err
	}
	p, err := f.pool(pool)
	if err != nil {
		return err
	}
	if p[name] == nil {
		return fmt.Errorf("delete volume %s from pool %s: %w", name, pool, ErrNoVolume)
	}
	delete(p, name)
	return nil
}
