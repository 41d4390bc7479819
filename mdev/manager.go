package mdev

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
)

// Backend names, as they appear in Instance.Backend, Parent.Backend and JSON output.
const (
	// BackendMdev is the kernel's mediated-device bus.
	BackendMdev = "mdev"
	// BackendNvidiaVFIO is NVIDIA's vendor-specific VFIO interface on SR-IOV VFs.
	BackendNvidiaVFIO = "nvidia-vfio"
)

// DefaultTimeout bounds each sysfs write and each wait for the kernel's visible answer.
const DefaultTimeout = 10 * time.Second

// Manager creates, lists and removes vGPU instances and SR-IOV VFs on the host under Root.
// The zero value is not usable: use New.
type Manager struct {
	// Root is the host root every path is resolved under.
	Root host.Root
	// W makes every sysfs write (host.SysfsWriter, a host.Recorder for --dry-run, or a test kernel).
	W host.Writer
	// DryRun skips waits for the kernel's answer and every file vgpu-host itself writes
	// (state, mdevctl definitions, persisted VF counts): only W sees the intended writes.
	DryRun bool
	// Timeout bounds each write and each wait; 0 means DefaultTimeout.
	Timeout time.Duration
	// Domains answers which libvirt domains use an instance; nil (or an unreachable libvirtd)
	// skips that check: the kernel (a process holding the instance's /dev/vfio/N) and the
	// allocation ledger decide first.
	Domains DomainUsers
	// Allocated names the VM the allocation ledger gives an instance to ("" for none); nil
	// skips that check.
	Allocated func(in Instance) string
	// Binder binds VFs to vfio-pci by address; nil uses package vfio's verbs on the VF alone.
	Binder VFBinder
}

// New returns a Manager for root that writes through w.
func New(root host.Root, w host.Writer) *Manager {
	return &Manager{Root: root, W: w}
}

// DomainUsers reports the libvirt domains (defined or running) whose configuration uses an
// instance: an mdev hostdev with the instance's UUID, or a PCI hostdev at the VF's address.
// The CLI implements it over libvirt; tests use a map.
type DomainUsers interface {
	DomainsUsing(ctx context.Context, inst Instance) ([]string, error)
}

// VFBinder binds a PCI function to vfio-pci by address (driver_override, unbind, probe, wait).
type VFBinder interface {
	BindVFIO(ctx context.Context, a host.Address) error
}

// Parent is a device that can host vGPU instances, with the types it offers now.
type Parent struct {
	// Name is the parent's device name: a PCI address, or "mbochs" for a virtual parent. For
	// the vendor-VFIO backend it is the physical function's address.
	Name    string        `json:"parent"`
	Address *host.Address `json:"address,omitempty"`
	Backend string        `json:"backend"`
	// Driver is the parent's driver ("nvidia", "i915"; "" for virtual parents).
	Driver string `json:"driver,omitempty"`
	NUMA   int    `json:"numa_node"`
	Types  []Type `json:"types"`
	// Running lists the types that have instances on this parent now (by ID).
	Running []string `json:"running,omitempty"`
}

// Type is one vGPU profile of a parent.
type Type struct {
	// ID is the mdev type directory name ("nvidia-471", "mbochs-small") or the NVIDIA
	// vendor-VFIO type number ("1160").
	ID          string `json:"id"`
	Name        string `json:"name"` // "GRID A100-4C", "NVIDIA L40S-8Q", "small"
	Description string `json:"description,omitempty"`
	DeviceAPI   string `json:"device_api,omitempty"`
	// Available is how many more instances of this type the parent can create now. For the
	// vendor-VFIO backend it is the number of free VFs listing the type: an upper bound, as
	// the driver stops listing it once the GPU is full (Create re-reads per VF).
	Available int `json:"available_instances"`
	// Instances are the existing instances: UUIDs (mdev) or VF addresses (vendor-VFIO).
	Instances []string `json:"instances"`
}

// Instance is one vGPU instance.
type Instance struct {
	Backend  string `json:"backend"`
	Parent   string `json:"parent"`
	Type     string `json:"type"`
	TypeName string `json:"type_name,omitempty"`
	// UUID identifies an mdev instance.
	UUID string `json:"uuid,omitempty"`
	// VF is the virtual function of a vendor-VFIO instance (attach it with managed='no').
	VF *host.Address `json:"vf,omitempty"`
	// Owner is the VM name the instance was created for ("" when created without --name).
	Owner string `json:"owner,omitempty"`
	// Index is the instance's position among its owner's instances.
	Index int `json:"index"`
	// Active is true when the instance exists in the kernel now.
	Active bool `json:"active"`
	// Defined is true when a persistent definition (mdevctl JSON, or the vendor state) brings
	// it back at boot.
	Defined bool `json:"defined"`
	// Start is a defined mdev's start policy, as mdevctl lists it: "auto" (created at boot by
	// `host restore` and by mdevctl) or "manual" (kept, created on request). Empty otherwise.
	Start string `json:"start,omitempty"`
}

// ID returns the instance's identifier: its UUID, or its VF address.
func (i Instance) ID() string {
	if i.VF != nil {
		return i.VF.String()
	}
	return i.UUID
}

// Parents returns every parent of both backends, sorted by name.
func (m *Manager) Parents() ([]Parent, error) {
	ps, err := m.mdevParents()
	if err != nil {
		return nil, err
	}
	vs, err := m.vendorParents()
	if err != nil {
		return nil, err
	}
	ps = append(ps, vs...)
	sort.Slice(ps, func(i, j int) bool { return ps[i].Name < ps[j].Name })
	return ps, nil
}

// Parent returns the named parent (a PCI address, or a virtual parent's name such as "mbochs").
// A VF's address names the vendor-VFIO parent it belongs to.
//
// A name that is an mdev parent itself (not a VF) is read alone (host.MdevParentNamed), not
// with every parent of both backends: a vendor-VFIO parent is a PF without the mdev bus.
func (m *Manager) Parent(name string) (Parent, error) {
	key := name
	vf := false
	if a, err := host.ParseAddress(name); err == nil {
		key = a.String()
		if pf, ok := m.physfn(a); ok {
			key, vf = pf.String(), true
		}
	}
	if !vf {
		if hp, ok := host.MdevParentNamed(m.Root, key); ok {
			return m.mdevParent(hp), nil
		}
	}
	ps, err := m.Parents()
	if err != nil {
		return Parent{}, err
	}
	var names []string
	for _, p := range ps {
		if p.Name == key {
			return p, nil
		}
		names = append(names, p.Name)
	}
	if len(names) == 0 {
		return Parent{}, fmt.Errorf("vGPU parent %s: %w: this host has no mdev parent (%s is empty) and no VF with nvidia/creatable_vgpu_types (load the vGPU host driver, or enable VFs with 'vgpu-host vf enable')",
			name, host.ErrNotFound, m.Root.Sys("class", "mdev_bus"))
	}
	return Parent{}, fmt.Errorf("vGPU parent %s: %w (parents: %s)", name, host.ErrNotFound, strings.Join(names, ", "))
}

// Instances returns every vGPU instance of both backends: active ones from sysfs, plus
// defined-but-inactive ones from mdevctl definitions and the vendor state, with owners from
// the state file. Sorted by parent, then identifier.
func (m *Manager) Instances() ([]Instance, error) {
	st, err := m.readState()
	if err != nil {
		return nil, err
	}
	return m.instances(st)
}

// instances is Instances over a state the caller read.
func (m *Manager) instances(st *state) ([]Instance, error) {
	out, err := m.mdevInstances(st, nil)
	if err != nil {
		return nil, err
	}
	vs, err := m.vendorInstances(st)
	if err != nil {
		return nil, err
	}
	out = append(out, vs...)
	sortInstances(out)
	return out, nil
}

// sortInstances sorts by parent, then identifier (Instances' order).
func sortInstances(out []Instance) {
	sort.Slice(out, func(i, j int) bool {
		if out[i].Parent != out[j].Parent {
			return out[i].Parent < out[j].Parent
		}
		return out[i].ID() < out[j].ID()
	})
}

// instancesOf is instances narrowed to ids (as Remove names them): when every id is an mdev
// UUID only those instances are read, in instances' order; otherwise (a VF address names a
// vendor-VFIO instance) every instance is, and removeFrom picks the named ones.
func (m *Manager) instancesOf(st *state, ids []string) ([]Instance, error) {
	uuids := make([]string, 0, len(ids))
	for _, raw := range ids {
		u, err := ParseUUID(strings.TrimSpace(raw))
		if err != nil {
			return m.instances(st)
		}
		uuids = append(uuids, u)
	}
	out, err := m.mdevInstances(st, uuids)
	if err != nil {
		return nil, err
	}
	sortInstances(out)
	return out, nil
}

func (m *Manager) timeout() time.Duration {
	if m.Timeout > 0 {
		return m.Timeout
	}
	return DefaultTimeout
}

// write makes one sysfs write with the Manager's timeout.
func (m *Manager) write(ctx context.Context, path, value string) error {
	ctx, cancel := context.WithTimeout(ctx, m.timeout())
	defer cancel()
	return m.W.Write(ctx, path, value)
}

// wait polls cond until it holds (skipped in a dry run, where the kernel never answers).
func (m *Manager) wait(ctx context.Context, cond func() (bool, error)) error {
	if m.DryRun {
		return nil
	}
	return host.WaitFor(ctx, m.timeout(), cond)
}

// physfn returns the PF of a VF (host.ReadFunctionLinks).
func (m *Manager) physfn(vf host.Address) (host.Address, bool) {
	l, err := host.ReadFunctionLinks(m.Root, vf)
	if err != nil || l.PhysFn == nil {
		return host.Address{}, false
	}
	return *l.PhysFn, true
}

// driverOf returns the driver bound to a PCI function ("" for none).
func (m *Manager) driverOf(a host.Address) string {
	l, _ := host.ReadFunctionLinks(m.Root, a)
	return l.Driver
}

// errno extracts the kernel's errno from a write error (0 when there is none).
func errno(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return 0
}
