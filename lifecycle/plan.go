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
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"libvirt.org/go/libvirtxml"

	"github.com/vgpu-host/vgpu-host/cloudinit"
	"github.com/vgpu-host/vgpu-host/domains"
	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/ledger"
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

// Step actions, in the order apply takes them.
const (
	ActBindGroup     = "bind-group"     // bind a GPU's IOMMU group to vfio-pci
	ActCreateMdev    = "create-mdev"    // create an mdev instance of a type on a parent
	ActAssignVGPU    = "assign-vgpu"    // write a vendor vGPU type to a VF's nvidia/current_vgpu_type
	ActEnsurePool    = "ensure-pool"    // define/start the images dir pool (shared; never undone)
	ActCreateOverlay = "create-overlay" // qcow2 overlay volume over a base image
	ActWriteSeed     = "write-seed"     // cloud-init NoCloud seed ISO volume
	ActDefine        = "define"         // define the libvirt domain
	ActStart         = "start"          // start the domain
)

// HostPrep makes the host changes a VM's devices need. Each method checks the current state
// first, so calling it twice (or undoing something never done) is harmless.
type HostPrep interface {
	// BindGroup binds the IOMMU groups of addrs to vfio-pci, remembering original drivers.
	BindGroup(ctx context.Context, vm string, addrs []host.Address) error
	// RestoreGroup gives the functions of addrs' groups back to their original drivers.
	RestoreGroup(ctx context.Context, vm string, addrs []host.Address) error
	// CreateMdev creates mdev uuid of type typ on parent.
	CreateMdev(ctx context.Context, vm, parent, typ, uuid string) error
	// RemoveMdev removes mdev uuid.
	RemoveMdev(ctx context.Context, vm, uuid string) error
	// AssignVGPU writes vendor vGPU type typ to exactly VF vf (nvidia/current_vgpu_type),
	// recording vm as its owner (instance number index of vm's vendor vGPUs).
	AssignVGPU(ctx context.Context, vm string, vf host.Address, typ string, index int) error
	// ClearVGPU writes 0 to vf's nvidia/current_vgpu_type if vm set it (nothing if it holds
	// no type); a type another owner or tool set is refused (host.ErrRefused).
	ClearVGPU(ctx context.Context, vm string, vf host.Address, typ string) error
}

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
	// Pool names the dir pool for overlays and seeds (default DefaultPool) at PoolDir
	// (default ROOT/var/lib/vgpu-host/images).
	Pool    string
	PoolDir string
	// Customize, when set, edits each built domain before it is defined (tests use it for
	// direct kernel boot and a serial log file).
	Customize func(vm *domains.VM, d *libvirtxml.Domain) error
	// Progress receives one line per step taken; nil is quiet.
	Progress io.Writer
	// CrashAt makes apply stop dead (Crash) at the N-th step it takes (1-based), after the
	// step is taken but before it is marked done; CrashBefore stops before taking it.
	CrashAt     int
	CrashBefore bool
	// Crash ends the process (os.Exit(137) in the CLI); tests pass runtime.Goexit.
	Crash func()
}

// Lifecycle runs plan, apply, destroy, status and verify.
type Lifecycle struct {
	o     Options
	taken int // steps taken by this process (for CrashAt)
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
	return &Lifecycle{o: o}
}

// PlannedStep is one step of a plan.
type PlannedStep struct {
	Action string            `json:"action"`
	Target string            `json:"target"`
	Params map[string]string `json:"params,omitempty"`
	// Text says the step in words: "bind IOMMU group of 0000:41:00.0 to vfio-pci".
	Text string `json:"text"`
}

// Plan is what apply would do for one VM.
type Plan struct {
	VM       string              `json:"vm"`
	SpecHash string              `json:"spec_hash"`
	VirtType string              `json:"virt_type"`
	Alloc    *domains.Allocation `json:"allocation"`
	Claims   []ledger.Claim      `json:"claims"`
	Steps    []PlannedStep       `json:"steps"`
	// Fallback says, per gpus[] entry that fell back to virtio-gpu, why.
	Fallback []string `json:"fallback,omitempty"`
	XML      string   `json:"-"`
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

// foreign returns the PCI functions and mdev UUIDs held by domains the ledger does not know.
func (l *Lifecycle) foreign(ctx context.Context, book *ledger.Book) (pci map[host.Address]string, mdev map[string]string, err error) {
	all, err := l.o.Conn.ListDomainXMLs(ctx)
	if err != nil {
		return nil, nil, err
	}
	pci, mdev = map[host.Address]string{}, map[string]string{}
	for name, x := range all {
		if book != nil && book.VMs[name] != nil {
			continue
		}
		var d libvirtxml.Domain
		if d.Unmarshal(x) != nil || d.Devices == nil {
			continue
		}
		for _, hd := range d.Devices.Hostdevs {
			if s := hd.SubsysPCI; s != nil && s.Source != nil && s.Source.Address != nil {
				a := s.Source.Address
				if a.Domain != nil && a.Bus != nil && a.Slot != nil && a.Function != nil {
					pci[host.Address{Domain: uint32(*a.Domain), Bus: uint8(*a.Bus), Device: uint8(*a.Slot), Function: uint8(*a.Function)}] = name
				}
			}
			if m := hd.SubsysMDev; m != nil && m.Source != nil && m.Source.Address != nil {
				mdev[strings.ToLower(m.Source.Address.UUID)] = name
			}
		}
	}
	return pci, mdev, nil
}

// claimsOf lists the devices an allocation takes.
func claimsOf(a *domains.Allocation) []ledger.Claim {
	var out []ledger.Claim
	for _, g := range a.GPUs {
		if g.Kind == domains.KindVendorVFIO {
			for _, s := range g.Slots {
				detail := strconv.Itoa(s.VGPUType)
				if s.VGPUTypeName != "" {
					detail += " (" + s.VGPUTypeName + ")"
				}
				out = append(out, ledger.Claim{Kind: ledger.KindVendorVGPU, ID: s.Functions[0].String(), Detail: detail})
			}
			continue
		}
		for _, s := range g.Slots {
			for i, f := range s.Functions {
				detail := string(g.Kind)
				if i > 0 {
					detail += " companion"
				}
				out = append(out, ledger.Claim{Kind: ledger.KindPCI, ID: f.String(), Detail: detail})
			}
		}
		for _, m := range g.Mdevs {
			out = append(out, ledger.Claim{Kind: ledger.KindMdev, ID: strings.ToLower(m.UUID), Detail: m.Type})
		}
	}
	return out
}

func inUse(book *ledger.Book, vm string, foreign map[host.Address]string) []host.Address {
	var out []host.Address
	for name, e := range book.VMs {
		if name == vm {
			continue
		}
		for _, c := range e.Claims {
			if c.Kind == ledger.KindPCI || c.Kind == ledger.KindVendorVGPU {
				if a, err := host.ParseAddress(c.ID); err == nil {
					out = append(out, a)
				}
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
	for _, name := range sortedKeys(book.VMs) {
		if name == vm {
			continue
		}
		if slices.ContainsFunc(book.VMs[name].Claims, func(c ledger.Claim) bool {
			return c.Kind == ledger.KindPCI || c.Kind == ledger.KindVendorVGPU
		}) {
			vms = append(vms, name)
		}
	}
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
func pinnedHolders(vm *domains.VM, book *ledger.Book, foreign map[host.Address]string) string {
	var out []string
	for _, g := range vm.Spec.GPUs {
		if g.Passthrough == nil || g.Passthrough.Address == "" {
			continue
		}
		a, err := host.ParseAddress(g.Passthrough.Address)
		if err != nil {
			continue
		}
		if h := book.Holder(ledger.Claim{Kind: ledger.KindPCI, ID: a.String()}); h != "" && h != vm.Metadata.Name {
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

// resolve resolves vm against inv and the book, and lists the steps.
func (l *Lifecycle) resolve(ctx context.Context, vm *domains.VM, inv *host.Inventory, book *ledger.Book, foreignPCI map[host.Address]string, foreignMdev map[string]string) (*Plan, error) {
	name := vm.Metadata.Name
	vt, err := l.virtType(ctx, vm)
	if err != nil {
		return nil, err
	}
	alloc, err := domains.Resolve(vm, inv, domains.ResolveOptions{VirtType: vt, InUse: inUse(book, name, foreignPCI)})
	if err != nil {
		if errors.Is(err, host.ErrNotFound) && len(book.VMs)+len(foreignPCI) > 0 {
			// Devices exist but others hold them: say busy, not absent, and who holds them
			// when the spec would resolve on a host where nobody held anything.
			if _, ferr := domains.Resolve(vm, inv, domains.ResolveOptions{VirtType: vt}); ferr == nil {
				return nil, fmt.Errorf("%s; the others are allocated to %s (vgpu-host status lists them): %w",
					strings.TrimSuffix(err.Error(), ": "+host.ErrNotFound.Error()), holders(book, name, foreignPCI), host.ErrBusy)
			}
			return nil, fmt.Errorf("%w (devices held by other VMs are skipped): %w", err, host.ErrBusy)
		}
		if errors.Is(err, host.ErrBusy) {
			if held := pinnedHolders(vm, book, foreignPCI); held != "" {
				return nil, fmt.Errorf("%w (%s)", err, held)
			}
		}
		return nil, err
	}
	p := &Plan{VM: name, VirtType: vt, Alloc: alloc, Claims: claimsOf(alloc)}
	p.SpecHash = specHash(vm, vt, l.o.Customize != nil)
	for _, c := range p.Claims {
		if c.Kind == ledger.KindMdev {
			if h := foreignMdev[c.ID]; h != "" {
				return nil, fmt.Errorf("mdev %s is used by domain %q, which vgpu-host did not create: %w", c.ID, h, host.ErrBusy)
			}
		}
		if h := book.Holder(c); h != "" && h != name {
			return nil, fmt.Errorf("%s %s is allocated to VM %q: %w", c.Kind, c.ID, h, host.ErrBusy)
		}
	}
	vendorIndex := 0 // the VM's vendor vGPUs, numbered for the mdev state's owner records
	for _, g := range alloc.GPUs {
		if g.FellBack {
			p.Fallback = append(p.Fallback, fmt.Sprintf("gpus[%d]: no physical GPU or vGPU free, attached virtio-gpu instead (%s)", g.Index, g.Reason))
		}
		switch g.Kind {
		case domains.KindPassthrough:
			for _, s := range g.Slots {
				p.Steps = append(p.Steps, PlannedStep{Action: ActBindGroup, Target: s.Functions[0].String(),
					Params: map[string]string{"functions": joinAddrs(s.Functions)},
					Text:   fmt.Sprintf("bind the IOMMU group of %s to vfio-pci", s.Functions[0])})
			}
		case domains.KindMdev:
			for _, m := range g.Mdevs {
				if m.Exists {
					continue
				}
				p.Steps = append(p.Steps, PlannedStep{Action: ActCreateMdev, Target: strings.ToLower(m.UUID),
					Params: map[string]string{"parent": m.Parent, "type": m.Type},
					Text:   fmt.Sprintf("create mdev %s of type %s on %s", m.UUID, m.Type, m.Parent)})
			}
		case domains.KindVendorVFIO:
			for _, s := range g.Slots {
				vf := s.Functions[0]
				if s.VGPUTypeSet {
					if book.Holder(ledger.Claim{Kind: ledger.KindVendorVGPU, ID: vf.String()}) == name {
						continue // this VM's own assignment (its journal clears it at destroy)
					}
					p.Alloc.Notes = append(p.Alloc.Notes, fmt.Sprintf("gpus[%d]: VF %s holds vGPU type %d (%s) already: used as is, and left set at destroy", g.Index, vf, s.VGPUType, s.VGPUTypeName))
					continue
				}
				if s.VGPUType == 0 {
					return nil, fmt.Errorf("gpus[%d]: VF %s has no resolved vGPU type: %w", g.Index, vf, host.ErrInvalid)
				}
				p.Steps = append(p.Steps, PlannedStep{Action: ActAssignVGPU, Target: vf.String(),
					Params: map[string]string{"type": strconv.Itoa(s.VGPUType), "type_name": s.VGPUTypeName, "index": strconv.Itoa(vendorIndex)},
					Text:   fmt.Sprintf("assign vGPU type %d (%s) to VF %s", s.VGPUType, s.VGPUTypeName, vf)})
				vendorIndex++
			}
		}
	}
	files := vm.DiskFiles(l.buildOpts())
	seed := vm.SeedISOPath(l.buildOpts())
	needPool := seed != ""
	for _, f := range files {
		needPool = needPool || f.Create
	}
	if needPool {
		p.Steps = append(p.Steps, PlannedStep{Action: ActEnsurePool, Target: l.o.Pool, Params: map[string]string{"path": l.o.PoolDir},
			Text: fmt.Sprintf("make sure the dir storage pool %s at %s exists", l.o.Pool, l.o.PoolDir)})
	}
	for _, f := range files {
		if !f.Create {
			continue
		}
		if filepath.Dir(f.Path) != filepath.Clean(l.o.PoolDir) {
			return nil, fmt.Errorf("disk overlay %s: vgpu-host creates overlays in its pool directory %s only; drop spec.disks[].overlay: %w", f.Path, l.o.PoolDir, host.ErrInvalid)
		}
		p.Steps = append(p.Steps, PlannedStep{Action: ActCreateOverlay, Target: filepath.Base(f.Path),
			Params: map[string]string{"pool": l.o.Pool, "backing": f.Backing, "backing_format": f.BackingFormat, "size": fmt.Sprint(f.Size)},
			Text:   fmt.Sprintf("create qcow2 overlay %s over %s (%s)", f.Path, f.Backing, f.BackingFormat)})
	}
	if seed != "" {
		p.Steps = append(p.Steps, PlannedStep{Action: ActWriteSeed, Target: filepath.Base(seed), Params: map[string]string{"pool": l.o.Pool},
			Text: fmt.Sprintf("write cloud-init seed %s (label cidata)", seed)})
	}
	d, err := domains.Build(vm, alloc, l.buildOpts())
	if err != nil {
		return nil, err
	}
	if l.o.Customize != nil {
		if err := l.o.Customize(vm, d); err != nil {
			return nil, fmt.Errorf("customize domain %s: %w", name, err)
		}
	}
	if p.XML, err = d.Marshal(); err != nil {
		return nil, fmt.Errorf("marshal domain %s: %w", name, err)
	}
	p.Steps = append(p.Steps, PlannedStep{Action: ActDefine, Target: name, Text: fmt.Sprintf("define domain %s (type %s)", name, vt)})
	if !l.o.NoStart {
		p.Steps = append(p.Steps, PlannedStep{Action: ActStart, Target: name, Text: "start domain " + name})
	}
	return p, nil
}

func joinAddrs(as []host.Address) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}

// Plan returns what Apply would do for each spec, changing nothing.
func (l *Lifecycle) Plan(ctx context.Context, vms []*domains.VM) ([]*Plan, error) {
	inv, err := l.o.Scan(l.o.Root)
	if err != nil {
		return nil, fmt.Errorf("scan host: %w", err)
	}
	book, err := l.o.Ledger.Read()
	if err != nil {
		return nil, err
	}
	fp, fm, err := l.foreign(ctx, book)
	if err != nil {
		return nil, err
	}
	var out []*Plan
	for _, vm := range vms {
		p, err := l.resolve(ctx, vm, inv, book, fp, fm)
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

// seedOf returns the NoCloud seed of vm, with meta-data defaulted to its name.
func seedOf(vm *domains.VM) cloudinit.Seed {
	ci := vm.Spec.CloudInit
	s := cloudinit.Seed{UserData: ci.UserData, MetaData: ci.MetaData, NetworkConfig: ci.NetworkConfig}
	if s.MetaData == "" {
		s.MetaData = fmt.Sprintf("instance-id: %s\nlocal-hostname: %s\n", vm.Metadata.Name, vm.Metadata.Name)
	}
	if s.UserData == "" {
		s.UserData = "#cloud-config\n"
	}
	return s
}
