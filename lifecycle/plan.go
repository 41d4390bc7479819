// Package lifecycle is vgpu-host's main job: from a VM spec to a running libvirt domain with
// its GPU, and back to a clean host. It composes the domains package (resolve + build), the
// host preparation (vfio binding, mdev instances; behind HostPrep), the allocation ledger and
// libvirt (behind virt.Conn).
//
// Every change is a journal step recorded in the ledger before it is taken, so an apply that
// dies at any point (kill -9) is converged by the next apply or destroy of the same VM: it
// undoes every step the journal lists as started or done, newest first, each undo safe to
// repeat, and then applies afresh. A failed apply undoes what it did the same way.
package lifecycle

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"libvirt.org/go/libvirtxml"

	"github.com/vgpu-host/vgpu-host/cloudinit"
	"github.com/vgpu-host/vgpu-host/domains"
	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/ledger"
	"github.com/vgpu-host/vgpu-host/step"
	"github.com/vgpu-host/vgpu-host/vfio"
	"github.com/vgpu-host/vgpu-host/virt"
)

// DefaultPool is the libvirt dir pool that holds overlays and seeds, at ROOT/var/lib/vgpu-host/images.
const DefaultPool = "vgpu-host"

// PoolName is the storage pool for root: DefaultPool on a real host, and a name unique to
// the root elsewhere ("vgpu-host-1a2b3c4d"), since pool names are global to libvirtd.
func PoolName(root host.Root) string {
	if root.IsReal() {
		return DefaultPool
	}
	s := sha256.Sum256([]byte(root.Dir()))
	return DefaultPool + "-" + hex.EncodeToString(s[:4])
}

// HostPrep makes the host changes a VM's devices need (step.HostPrep; SysfsPrep is the real one).
type HostPrep = step.HostPrep

// Options configure a Lifecycle.
type Options struct {
	Root   host.Root
	Conn   virt.Conn
	Ledger *ledger.Ledger
	// Host prepares devices; nil refuses allocations that need host changes.
	Host HostPrep
	// Scan reads the inventory (default host.Scan).
	Scan func(host.Root) (*host.Inventory, error)
	// VirtType forces kvm or qemu; empty asks libvirt's domain capabilities (best first).
	VirtType string
	// NoStart defines without starting.
	NoStart bool
	// Force names the safety checks apply may go past (vfio.CheckBootVGA, vfio.CheckHeld, ...):
	// each overrides its own refusal only.
	Force []string
	// Pool names the dir pool for overlays and seeds (default DefaultPool) at PoolDir
	// (default ROOT/var/lib/vgpu-host/images).
	Pool    string
	PoolDir string
	// Customize, when set, edits each built domain before it is defined (tests use it for
	// direct kernel boot and a serial log file).
	Customize func(vm *domains.VM, d *libvirtxml.Domain) error
	// CheckFiles checks that the spec's files exist and the QEMU user can read them
	// (CheckSpecFiles) under a fake --host-root too; on the real root plan always does.
	CheckFiles bool
	// Progress receives one line per step taken; nil is quiet.
	Progress io.Writer
	// Fetch downloads url to dest unless dest holds it already, verifying checksum while it
	// streams and reporting to progress (nil: quiet): the fetch-iso step. vgpu-host runs
	// vgpu-host-agent for it (internal/clitree/fetch_light.go); nil refuses such a step.
	Fetch func(ctx context.Context, url, checksum, dest string, progress io.Writer) error
	// CrashAt makes apply stop dead (Crash) at the N-th step it takes (1-based), after the
	// step is taken but before it is marked done; CrashBefore stops before taking it.
	CrashAt     int
	CrashBefore bool
	// Crash ends the process (os.Exit(137) in the CLI); tests pass runtime.Goexit.
	Crash func()
	// LateDefineGrace is how long teardown watches for the domain of a define an apply died
	// in (awaitLateDefine; 0: DefaultLateDefineGrace). Tests shorten it.
	LateDefineGrace time.Duration
	// DetachTimeout bounds how long undoing an attach-device step waits for the guest to
	// release the device (destroy, a failed attach; 0: step.DetachTimeout); detach's
	// --timeout is its own.
	DetachTimeout time.Duration
	// ReadKey reads a public key file a spec names (spec.cloudInit.sshAuthorizedKeys), at
	// most limit bytes; nil reads it from the filesystem. The agent passes the contents its
	// caller sent: it opens no path a caller names.
	ReadKey func(path string, limit int64) ([]byte, error)
}

// MaxKeyFileSize bounds a public key file a spec names.
const MaxKeyFileSize = 64 << 10

// Lifecycle runs plan, apply, destroy, status and verify.
type Lifecycle struct {
	o     Options
	taken int // steps taken by this process (for CrashAt)
	// checked holds the preflight refusals of each group read in this call (apply resolves
	// again after converging or tearing down; the binder checks again when it binds).
	checked map[string][]vfio.Refusal
}

// New returns a Lifecycle.
func New(o Options) *Lifecycle {
	if o.Scan == nil {
		o.Scan = host.Scan
	}
	if o.Pool == "" {
		o.Pool = PoolName(o.Root)
	}
	if o.PoolDir == "" {
		o.PoolDir = o.Root.StateDir("images")
	}
	if o.Ledger == nil {
		o.Ledger = ledger.Open(o.Root)
	}
	if o.LateDefineGrace == 0 {
		o.LateDefineGrace = DefaultLateDefineGrace
	}
	if o.DetachTimeout == 0 {
		o.DetachTimeout = step.DetachTimeout
	}
	return &Lifecycle{o: o, checked: map[string][]vfio.Refusal{}}
}

// VMPlan is what apply would do for one VM.
type VMPlan struct {
	VM       string              `json:"vm"`
	SpecHash string              `json:"spec_hash"`
	VirtType string              `json:"virt_type"`
	Alloc    *domains.Allocation `json:"allocation"`
	Claims   []ledger.Claim      `json:"claims"`
	Steps    []step.Planned      `json:"steps"`
	// Fallback says, per gpus[] entry that fell back to virtio-gpu, why.
	Fallback []string `json:"fallback,omitempty"`
	// Refusals are the safety checks that refuse this plan (boot VGA, host-critical group
	// members, held device nodes, missing interrupt remapping), found before anything changes;
	// Forced are those the options override. apply refuses while one is not forced.
	Refusals []vfio.Refusal `json:"refusals"`
	Forced   []string       `json:"forced,omitempty"`
	// MMIO64 predicts whether the guest firmware's 64-bit MMIO window holds the domain's
	// 64-bit BARs (nil when they are small); a window too small refuses (check mmio64).
	MMIO64 *domains.MMIOFit `json:"mmio64,omitempty"`
	XML    string           `json:"-"`
	// records are Steps written down (step.RecordOf), read once when planned: the journal
	// and the output take them from here.
	records []step.Record
}

// record returns step i of the plan written down.
func (p *VMPlan) record(i int) step.Record {
	for len(p.records) < len(p.Steps) { // each step written down once
		p.records = append(p.records, step.RecordOf(p.Steps[len(p.records)].Step))
	}
	return p.records[i]
}

// starts reports whether the plan starts the domain.
func (p *VMPlan) starts() bool {
	for i := range p.Steps {
		if p.record(i).Action == step.ActStart {
			return true
		}
	}
	return false
}

// specHash identifies a spec and the choices that shape its domain.
func specHash(vm *domains.VM, virtType string, customized bool) string {
	b, _ := json.Marshal(struct {
		VM         *domains.VM
		VirtType   string
		Customized bool
	}{vm, virtType, customized})
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:8])
}

func (l *Lifecycle) virtType(ctx context.Context, vm *domains.VM) (string, error) {
	if l.o.VirtType != "" {
		return l.o.VirtType, nil
	}
	if vm.Spec.VirtType == "kvm" || vm.Spec.VirtType == "qemu" {
		return vm.Spec.VirtType, nil
	}
	types, err := l.o.Conn.VirtTypes(ctx)
	if err != nil {
		return "", err
	}
	return types[0], nil
}

// foreign returns the PCI functions and mdev UUIDs held by domains the ledger does not know
// (known reports the VMs it does).
func (l *Lifecycle) foreign(ctx context.Context, known func(name string) bool) (pci map[host.Address]string, mdev map[string]string, err error) {
	all, err := l.o.Conn.ListDomainXMLs(ctx)
	if err != nil {
		return nil, nil, err
	}
	pci, mdev = map[host.Address]string{}, map[string]string{}
	for name, x := range all {
		// A domain without a <hostdev> element holds no PCI function or mdev (DomainHostdevs
		// reads nothing else): neither known nor the XML parser is asked about it.
		if !strings.Contains(x, "<hostdev") || known(name) {
			continue
		}
		hd, ok := virt.DomainHostdevs(x)
		if !ok {
			continue
		}
		for _, a := range hd.PCI {
			pci[a] = name
		}
		for _, u := range hd.Mdevs {
			mdev[u] = name
		}
	}
	return pci, mdev, nil
}

func inUse(book *ledger.Book, vm string, foreign map[host.Address]string) []host.Address {
	var out []host.Address
	for _, h := range book.AllClaims() {
		if h.VM != vm && (h.Kind == ledger.KindPCI || h.Kind == ledger.KindVendorVGPU) {
			if a, err := host.ParseAddress(h.ID); err == nil {
				out = append(out, a)
			}
		}
	}
	for a := range foreign {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// holders names the VMs other than vm that hold PCI functions or vendor vGPU VFs in the
// ledger, and the domains vgpu-host did not create that hold PCI functions: "VMs a, b and
// domains c (not created by vgpu-host)", at most five names of each.
func holders(book *ledger.Book, vm string, foreign map[host.Address]string) string {
	var vms, doms []string
	for _, h := range book.AllClaims() {
		if h.VM != vm && (h.Kind == ledger.KindPCI || h.Kind == ledger.KindVendorVGPU) && !slices.Contains(vms, h.VM) {
			vms = append(vms, h.VM)
		}
	}
	slices.Sort(vms)
	for _, d := range foreign {
		if !slices.Contains(doms, d) {
			doms = append(doms, d)
		}
	}
	slices.Sort(doms)
	list := func(names []string) string {
		if len(names) > 5 {
			return strings.Join(names[:5], ", ") + fmt.Sprintf(" and %d more", len(names)-5)
		}
		return strings.Join(names, ", ")
	}
	var parts []string
	if len(vms) > 0 {
		parts = append(parts, "VMs "+list(vms))
	}
	if len(doms) > 0 {
		parts = append(parts, "domains "+list(doms)+" (not created by vgpu-host)")
	}
	if len(parts) == 0 {
		return "other VMs"
	}
	return strings.Join(parts, " and ")
}

// pinnedHolders says who holds the GPUs vm's spec names by address: `0000:41:00.0 is
// allocated to VM "b"`, or "" when nobody else does.
func pinnedHolders(vm *domains.VM, holder func(ledger.Claim) string, foreign map[host.Address]string) string {
	var out []string
	for _, g := range vm.Spec.GPUs {
		if g.Passthrough == nil || g.Passthrough.Address == "" {
			continue
		}
		a, err := host.ParseAddress(g.Passthrough.Address)
		if err != nil {
			continue
		}
		if h := holder(ledger.Claim{Kind: ledger.KindPCI, ID: a.String()}); h != "" && h != vm.Metadata.Name {
			out = append(out, fmt.Sprintf("%s is allocated to VM %q", a, h))
		} else if d := foreign[a]; d != "" {
			out = append(out, fmt.Sprintf("%s is used by domain %q, which vgpu-host did not create", a, d))
		}
	}
	return strings.Join(out, "; ")
}

// buildOpts are the domain builder options: overlays and seeds live in the pool directory.
func (l *Lifecycle) buildOpts() domains.BuildOptions {
	return domains.BuildOptions{ImagesDir: l.o.PoolDir}
}

// resolve resolves vm (domain type vt) against inv and the book, and lists the steps. It asks
// libvirt nothing, so apply can call it while it holds the ledger's lock.
func (l *Lifecycle) resolve(ctx context.Context, vm *domains.VM, vt string, inv *host.Inventory, book *ledger.Book, foreignPCI map[host.Address]string, foreignMdev map[string]string) (*VMPlan, error) {
	name := vm.Metadata.Name
	var siblings map[int][]int
	if vm.Spec.CPU.Pin != nil && vm.Spec.CPU.Pin.Auto {
		// Without the host's SMT siblings (a fake root without them) every CPU is a core.
		siblings, _ = host.ThreadSiblings(l.o.Root)
	}
	holder := func(c ledger.Claim) string { return book.Holder(c) }
	var customize func(d *libvirtxml.Domain) error
	if l.o.Customize != nil {
		customize = func(d *libvirtxml.Domain) error { return l.o.Customize(vm, d) }
	}
	prep, err := domains.Prepare(vm, inv, domains.PrepareOptions{
		Resolve: domains.ResolveOptions{VirtType: vt, InUse: inUse(book, name, foreignPCI), ThreadSiblings: siblings,
			HostDevices: true, Root: l.o.Root, ImagesDir: l.o.PoolDir},
		Build:        l.buildOpts(),
		Owned:        func(c ledger.Claim) bool { return holder(c) == name },
		Customize:    customize,
		PhysAddrBits: host.PhysAddrBits(l.o.Root),
	})
	var held *domains.HeldError
	var deviceErr *domains.HostDeviceError
	switch {
	case err == nil:
	case errors.As(err, &deviceErr):
		return nil, err
	case errors.As(err, &held) && len(book.AllClaims())+len(foreignPCI) > 0:
		// Devices exist but others hold them: say busy, not absent, and who holds them.
		return nil, fmt.Errorf("%s; the others are allocated to %s (vgpu-host status lists them): %w",
			strings.TrimSuffix(err.Error(), ": "+host.ErrNotFound.Error()), holders(book, name, foreignPCI), host.ErrBusy)
	case errors.Is(err, host.ErrNotFound) && len(book.AllClaims())+len(foreignPCI) > 0:
		return nil, fmt.Errorf("%w (devices held by other VMs are skipped): %w", err, host.ErrBusy)
	case errors.Is(err, host.ErrBusy):
		if held := pinnedHolders(vm, holder, foreignPCI); held != "" {
			return nil, fmt.Errorf("%w (%s)", err, held)
		}
		return nil, err
	default:
		return nil, err
	}
	alloc := prep.Alloc
	p := &VMPlan{VM: name, VirtType: vt, Alloc: alloc, Claims: prep.Claims, XML: prep.XML}
	p.SpecHash = specHash(vm, vt, l.o.Customize != nil)
	if err := checkClaims(p.Claims, name, holder, foreignMdev); err != nil {
		return nil, err
	}
	for _, g := range alloc.GPUs {
		if g.FellBack {
			p.Fallback = append(p.Fallback, fmt.Sprintf("gpus[%d]: no physical GPU or vGPU free, attached virtio-gpu instead (%s)", g.Index, g.Reason))
		}
	}
	p.add(prep.HostSteps...)
	if err := l.preflight(ctx, p); err != nil {
		return nil, err
	}
	if l.o.Root.IsReal() || l.o.CheckFiles {
		if err := CheckSpecFiles(specFiles(vm, alloc.Disks), QEMUUsers); err != nil {
			return nil, err
		}
	}
	storage, err := l.storageSteps(vm, alloc)
	if err != nil {
		return nil, err
	}
	p.add(storage...)
	l.predictMMIO(p, prep.MMIO)
	p.add(step.Define{VM: name, VirtType: vt, HotplugSlots: vm.Spec.HotplugSlots})
	if !l.o.NoStart {
		p.add(step.Start{VM: name})
	}
	return p, nil
}

// preflight runs the binder's safety checks for every group the plan binds, and for every
// passthrough slot libvirt will bind itself (managed: true), before anything changes.
func (l *Lifecycle) preflight(ctx context.Context, p *VMPlan) error {
	if l.o.Host == nil {
		return nil
	}
	var groups [][]host.Address
	for _, s := range p.Steps {
		if b, ok := s.Step.(step.BindGroup); ok {
			groups = append(groups, b.Functions)
		}
	}
	for _, g := range p.Alloc.GPUs {
		if g.Managed {
			for _, s := range g.Slots {
				groups = append(groups, s.Functions)
			}
		}
	}
	for _, fs := range groups {
		key := step.JoinAddrs(fs)
		rs, ok := l.checked[key]
		if !ok {
			var err error
			if rs, err = l.o.Host.Preflight(ctx, fs); err != nil {
				return err
			}
			l.checked[key] = rs
		}
		for _, r := range rs {
			if slices.Contains(l.o.Force, r.Check) {
				if !slices.Contains(p.Forced, r.Check) {
					p.Forced = append(p.Forced, r.Check)
				}
			}
			p.Refusals = append(p.Refusals, r)
		}
	}
	return nil
}

// Refused returns the error apply gives for the plan's refusals that are not forced: busy
// (host.ErrBusy, exit 5) when processes hold the devices and nothing else refuses, refused
// (host.ErrRefused, exit 4) otherwise; nil when there are none.
func (p *VMPlan) Refused() error {
	var rs []vfio.Refusal
	for _, r := range p.Refusals {
		if !slices.Contains(p.Forced, r.Check) {
			rs = append(rs, r)
		}
	}
	if len(rs) == 0 {
		return nil
	}
	return vfio.RefusalError(p.VM, rs)
}

// add appends steps to the plan.
func (p *VMPlan) add(ss ...step.Step) {
	for _, s := range ss {
		p.Steps = append(p.Steps, step.Planned{Step: s})
	}
}

// checkClaims refuses claims another VM holds in the ledger, or mdevs a domain vgpu-host did
// not create uses.
func checkClaims(claims []ledger.Claim, name string, holder func(ledger.Claim) string, foreignMdev map[string]string) error {
	for _, c := range claims {
		if c.Kind == ledger.KindMdev {
			if h := foreignMdev[c.ID]; h != "" {
				return fmt.Errorf("mdev %s is used by domain %q, which vgpu-host did not create: %w", c.ID, h, host.ErrBusy)
			}
		}
		if h := holder(c); h != "" && h != name {
			return fmt.Errorf("%s %s is allocated to VM %q: %w", c.Kind, c.ID, h, host.ErrBusy)
		}
	}
	return nil
}

// storageSteps lists the pool, overlay and seed steps of vm's disks and cloud-init.
func (l *Lifecycle) storageSteps(vm *domains.VM, alloc *domains.Allocation) ([]step.Step, error) {
	var out []step.Step
	files, seed := alloc.Disks, alloc.SeedISO
	needPool := seed != ""
	for _, f := range files {
		needPool = needPool || f.Create || f.URL != ""
	}
	if needPool {
		out = append(out, step.EnsurePool{Pool: l.o.Pool, Path: l.o.PoolDir})
	}
	fetched := map[string]bool{}
	for _, f := range files {
		if f.URL != "" && !fetched[f.Path] {
			fetched[f.Path] = true
			out = append(out, step.FetchISO{File: filepath.Base(f.Path), URL: f.URL, Checksum: f.Checksum})
		}
		if !f.Create {
			continue
		}
		if !step.InPool(f.Path, l.o.PoolDir) {
			return nil, fmt.Errorf("disk overlay %s: vgpu-host creates overlays in its pool directory %s only; drop spec.disks[].overlay: %w", f.Path, l.o.PoolDir, host.ErrInvalid)
		}
		if f.Backing == "" {
			out = append(out, step.CreateBlank{Volume: filepath.Base(f.Path), Pool: l.o.Pool, Format: f.Format, Size: f.Size, Path: f.Path})
			continue
		}
		out = append(out, step.CreateOverlay{Volume: filepath.Base(f.Path), Pool: l.o.Pool, Backing: f.Backing, BackingFormat: f.BackingFormat, Size: f.Size, Path: f.Path})
	}
	if seed != "" {
		if _, err := l.seedOf(vm); err != nil {
			return nil, fmt.Errorf("cloud-init seed of %s: %w", vm.Metadata.Name, err)
		}
		out = append(out, step.WriteSeed{Volume: filepath.Base(seed), Pool: l.o.Pool, Path: seed})
	}
	return out, nil
}

// predictMMIO records whether the guest's 64-bit MMIO window will hold the domain's BARs, and
// refuses the plan (check mmio64, forceable) when it will not: the guest would boot without
// mapping the device.
func (l *Lifecycle) predictMMIO(p *VMPlan, f *domains.MMIOFit) {
	p.MMIO64 = f
	if f == nil || f.Fits {
		return
	}
	if slices.Contains(l.o.Force, vfio.CheckMMIO64) && !slices.Contains(p.Forced, vfio.CheckMMIO64) {
		p.Forced = append(p.Forced, vfio.CheckMMIO64)
	}
	p.Refusals = append(p.Refusals, vfio.Refusal{Check: vfio.CheckMMIO64, Reason: "64-bit MMIO window: " + f.Reason})
}

// Plan returns what Apply would do for each spec, changing nothing.
func (l *Lifecycle) Plan(ctx context.Context, vms []*domains.VM) ([]*VMPlan, error) {
	l.checked = map[string][]vfio.Refusal{}
	inv, err := l.o.Scan(l.o.Root)
	if err != nil {
		return nil, fmt.Errorf("scan host: %w", err)
	}
	book, err := l.o.Ledger.Read()
	if err != nil {
		return nil, err
	}
	fp, fm, err := l.foreign(ctx, func(name string) bool { return book.VM(name) != nil })
	if err != nil {
		return nil, err
	}
	var out []*VMPlan
	for _, vm := range vms {
		vt, err := l.virtType(ctx, vm)
		if err != nil {
			return out, fmt.Errorf("plan %s: %w", vm.Metadata.Name, err)
		}
		p, err := l.resolve(ctx, vm, vt, inv, book, fp, fm)
		if err != nil {
			return out, fmt.Errorf("plan %s: %w", vm.Metadata.Name, err)
		}
		// Plans for several specs see each other's claims, as the applies would.
		for _, c := range p.Claims {
			_ = book.Claim(vm.Metadata.Name, c)
		}
		out = append(out, p)
	}
	return out, nil
}

// seedOf returns the NoCloud seed of vm, with meta-data defaulted to its name and the
// sshAuthorizedKeys (lines, or files read now) added to user-data. Plan calls it too, so a
// missing or wrong key file is found before anything changes.
func (l *Lifecycle) seedOf(vm *domains.VM) (cloudinit.Seed, error) {
	readKey := l.o.ReadKey
	if readKey == nil {
		readKey = host.ReadRegularFileLimit
	}
	ci := vm.Spec.CloudInit
	s := cloudinit.Seed{UserData: ci.UserData, MetaData: ci.MetaData, NetworkConfig: ci.NetworkConfig}
	if s.MetaData == "" {
		s.MetaData = fmt.Sprintf("instance-id: %s\nlocal-hostname: %s\n", vm.Metadata.Name, vm.Metadata.Name)
	}
	var keys []string
	for i, k := range ci.SSHAuthorizedKeys {
		if cloudinit.IsPublicKey(k) {
			keys = append(keys, k)
			continue
		}
		field := fmt.Sprintf("spec.cloudInit.sshAuthorizedKeys[%d]", i)
		data, err := readKey(k, MaxKeyFileSize)
		switch {
		case errors.Is(err, os.ErrNotExist):
			return s, fmt.Errorf("%s: %s does not exist: %w", field, k, host.ErrNotFound)
		case errors.Is(err, host.ErrTooLarge), errors.Is(err, host.ErrNotRegular):
			return s, fmt.Errorf("%s: %w (not a public key file): %w", field, err, host.ErrInvalid)
		case err != nil:
			return s, fmt.Errorf("%s: %w", field, err)
		}
		fk, err := cloudinit.ParseKeys(data, k)
		if err != nil {
			return s, fmt.Errorf("%s: %w: %w", field, err, host.ErrInvalid)
		}
		keys = append(keys, fk...)
	}
	var err error
	if s.UserData, err = cloudinit.AddSSHKeys(s.UserData, keys); err != nil {
		return s, fmt.Errorf("spec.cloudInit: %w: %w", err, host.ErrInvalid)
	}
	if s.UserData == "" {
		s.UserData = "#cloud-config\n"
	}
	return s, nil
}
