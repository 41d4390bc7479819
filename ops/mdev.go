package ops

import (
	"context"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/mdev"
	"github.com/vgpu-host/vgpu-host/vgpu"
)

// MdevResult is what mdev create or mdev remove did: the instances, and with a dry run the
// report of the writes it would make (its JSON output then).
type MdevResult struct {
	Instances []mdev.Instance
	DryRun    *DryRunReport
}

// Value is the result as --output json prints it.
func (r *MdevResult) Value() any {
	if r.DryRun != nil {
		return r.DryRun
	}
	return r.Instances
}

// MdevCreateRequest is `mdev create`, POST /v1/mdevs.
type MdevCreateRequest struct {
	// Parent is the parent device: PCI address, VF address (vendor-VFIO) or virtual parent
	// name (mbochs); Type the type's ID or name.
	Parent, Type string
	// UUIDs are explicit mdev UUIDs (--uuid).
	UUIDs []string
	// Count is the number of instances (--count), when CountSet: 1, or the number of UUIDs,
	// when not.
	Count    int
	CountSet bool
	// Name is the VM the instances are for (--name): the UUIDs derive from it.
	Name string
	// FirstIndex is the VM's index of the first instance (--first-index).
	FirstIndex int
	// Define, DryRun are --define and --dry-run.
	Define, DryRun bool
	// Timeout bounds each sysfs write and wait (mdev.DefaultTimeout when not positive).
	Timeout time.Duration
}

// Op is "mdev create".
func (MdevCreateRequest) Op() string { return "mdev create" }

// Bool is the request's boolean setting by its flag's name.
func (r MdevCreateRequest) Bool(name string) bool {
	switch name {
	case "define":
		return r.Define
	case "dry-run":
		return r.DryRun
	}
	return false
}

// IsSet reports whether the request sets the named setting.
func (r MdevCreateRequest) IsSet(name string) bool {
	switch name {
	case "count":
		return r.CountSet
	case "uuid":
		return len(r.UUIDs) > 0
	case "name":
		return r.Name != ""
	case "first-index":
		return r.FirstIndex != 0
	case "timeout":
		return r.Timeout != mdev.DefaultTimeout
	}
	return r.Bool(name)
}

// MdevCreate is mdev create: the instances of a type on a parent, all or none, and with
// Define their persistent definitions; with DryRun, the exact writes and nothing changed.
func MdevCreate(ctx context.Context, env Env, req MdevCreateRequest) (*MdevResult, error) {
	if err := req.Check(); err != nil {
		return nil, err
	}
	m, rec, done := MdevManager(env, req.Timeout, req.DryRun)
	defer done()
	ins, err := m.Create(ctx, mdev.CreateRequest{Parent: req.Parent, Profile: req.Type, Count: req.Count, UUIDs: req.UUIDs,
		Owner: req.Name, FirstIndex: req.FirstIndex})
	if err != nil {
		return nil, err
	}
	var files []string
	if req.Define {
		for _, in := range ins {
			if in.Backend != mdev.BackendMdev {
				continue // vendor-VFIO instances persist through the state file
			}
			d, err := m.Define(mdev.Definition{UUID: in.UUID, Parent: in.Parent, Type: in.Type})
			if err != nil {
				return nil, err
			}
			files = append(files, d.Path)
		}
	}
	res := &MdevResult{Instances: ins}
	if rec != nil {
		res.DryRun = DryRun(rec, files, ins)
	}
	return res, nil
}

// Check refuses a request that asks for something mdev create cannot mean (exit 2), before
// anything is read: the CLI checks it before its own settings, as it always has.
func (req MdevCreateRequest) Check() error {
	uuids, count := req.UUIDs, req.Count
	if len(uuids) > 0 && req.CountSet && count != len(uuids) {
		return Usagef("--count %d and %d --uuid disagree", count, len(uuids))
	}
	if len(uuids) > 0 && req.Name != "" {
		return Usagef("--uuid and --name are exclusive: --name derives the UUIDs")
	}
	if req.CountSet && count < 1 {
		return Usagef("--count must be at least 1")
	}
	// --first-index numbers the VM's instances as apply does (vgpu.InstanceUUID): from 0, at
	// most vgpu.MaxInstanceIndex. A negative or huge one derives UUIDs no apply would, and
	// FirstIndex+i overflowed.
	if first := req.FirstIndex; first < 0 || first > vgpu.MaxInstanceIndex || first+max(count, len(uuids), 1)-1 > vgpu.MaxInstanceIndex {
		return Usagef("--first-index %d: a VM's instances are numbered as apply numbers them, 0..%d (a spec has at most 16 gpus[] entries of 16 instances); the first index plus the count must stay in that range",
			first, vgpu.MaxInstanceIndex)
	}
	if n := req.Name; n != "" {
		return host.CheckComponent("--name", n)
	}
	return nil
}

// MdevRemoveRequest is `mdev remove`, DELETE /v1/mdevs/{uuid}.
type MdevRemoveRequest struct {
	// IDs are the instances: mdev UUIDs, or VF addresses of vendor-VFIO instances.
	IDs []string
	// Name removes the instances recorded for this VM when IDs is empty, and refuses other
	// owners' instances (--name).
	Name string
	// Force, Undefine, DryRun and Reset are --force, --undefine, --dry-run and --reset.
	Force, Undefine, DryRun, Reset bool
	// Timeout bounds each sysfs write and wait (mdev.DefaultTimeout when not positive).
	Timeout time.Duration
}

// Op is "mdev remove".
func (MdevRemoveRequest) Op() string { return "mdev remove" }

// Bool is the request's boolean setting by its flag's name.
func (r MdevRemoveRequest) Bool(name string) bool {
	switch name {
	case "force":
		return r.Force
	case "undefine":
		return r.Undefine
	case "dry-run":
		return r.DryRun
	case "reset":
		return r.Reset
	}
	return false
}

// IsSet reports whether the request sets the named setting.
func (r MdevRemoveRequest) IsSet(name string) bool {
	switch name {
	case "name":
		return r.Name != ""
	case "timeout":
		return r.Timeout != mdev.DefaultTimeout
	}
	return r.Bool(name)
}

// MdevRemove is mdev remove: the instances removed (none in use unless Force), their
// functions handed back (HandBack); with DryRun, the exact writes and nothing changed.
func MdevRemove(ctx context.Context, env Env, req MdevRemoveRequest) (*MdevResult, error) {
	if err := req.Check(); err != nil {
		return nil, err
	}
	m, rec, done := MdevManager(env, req.Timeout, req.DryRun)
	defer done()
	opts := mdev.RemoveOptions{Force: req.Force, Undefine: req.Undefine, Owner: req.Name}
	var rm []mdev.Instance
	var err error
	if len(req.IDs) == 0 {
		rm, err = m.RemoveOwner(ctx, opts.Owner, opts)
	} else {
		rm, err = m.Remove(ctx, req.IDs, opts)
	}
	if err != nil {
		return nil, err
	}
	if rm == nil {
		rm = []mdev.Instance{}
	}
	if rec != nil {
		return &MdevResult{Instances: rm, DryRun: DryRun(rec, nil, rm)}, nil
	}
	HandBack(ctx, env, m.W, releasedInstances(rm), "mdev remove", req.Reset)
	return &MdevResult{Instances: rm}, nil
}

// Check refuses a request that names no instance (exit 2).
func (req MdevRemoveRequest) Check() error {
	if len(req.IDs) == 0 && req.Name == "" {
		return Usagef("remove needs instance UUIDs/VF addresses or --name VM")
	}
	return nil
}

// releasedInstances are the PCI functions removed instances leave: each vendor-VFIO instance's
// VF, and each PCI parent of an mdev instance (once, checked but never reset; a virtual parent
// such as mbochs has no function to check).
func releasedInstances(rm []mdev.Instance) []host.Released {
	var rel []host.Released
	seen := map[host.Address]bool{}
	for _, in := range rm {
		r := host.Released{}
		switch {
		case in.VF != nil:
			r.Address = *in.VF
		default:
			p, err := host.ParseAddress(in.Parent)
			if err != nil {
				continue
			}
			r.Address, r.CheckOnly = p, true // its other instances live on
		}
		if !seen[r.Address] {
			seen[r.Address] = true
			rel = append(rel, r)
		}
	}
	return rel
}

// MdevDefineRequest is `mdev define UUID...`: persistent definitions of mdev instances in
// mdevctl's format, for host restore and mdevctl.
type MdevDefineRequest struct {
	// UUIDs are the instances.
	UUIDs []string `json:"uuids"`
	// Parent and Type name the parent and type: needed for an instance that is not active.
	Parent string `json:"parent,omitempty"`
	Type   string `json:"type,omitempty"`
	// Manual keeps the definition without creating it at boot (start=manual; --manual).
	Manual bool `json:"manual,omitempty"`
	// DryRun writes nothing (--dry-run).
	DryRun bool `json:"dry_run,omitempty"`
}

// Op is "mdev define".
func (MdevDefineRequest) Op() string { return "mdev define" }

// Bool is the request's boolean setting by its flag's name.
func (r MdevDefineRequest) Bool(name string) bool {
	switch name {
	case "manual":
		return r.Manual
	case "dry-run":
		return r.DryRun
	}
	return false
}

// IsSet reports whether the request sets the named setting.
func (r MdevDefineRequest) IsSet(name string) bool {
	switch name {
	case "parent":
		return r.Parent != ""
	case "type":
		return r.Type != ""
	}
	return r.Bool(name)
}

// Check refuses a request that names no instance (exit 2).
func (r MdevDefineRequest) Check() error {
	if len(r.UUIDs) == 0 {
		return Usagef("define needs at least one UUID")
	}
	return nil
}

// MdevDefineResult is what mdev define wrote, or with a dry run would write.
type MdevDefineResult struct {
	Definitions []mdev.Definition
	DryRun      bool
}

// Value is the result as --output json prints it: the definitions.
func (r *MdevDefineResult) Value() any { return r.Definitions }

// MdevDefine is mdev define: each instance's definition written (start=auto unless Manual),
// in order; the first that fails stops it.
func MdevDefine(_ context.Context, env Env, req MdevDefineRequest) (*MdevDefineResult, error) {
	if err := req.Check(); err != nil {
		return nil, err
	}
	m, _, done := MdevManager(env, 0, req.DryRun)
	defer done()
	start := "auto"
	if req.Manual {
		start = "manual"
	}
	res := &MdevDefineResult{DryRun: m.DryRun}
	for _, id := range req.UUIDs {
		d, err := m.Define(mdev.Definition{UUID: id, Parent: req.Parent, Type: req.Type, Start: start})
		if err != nil {
			return nil, err
		}
		res.Definitions = append(res.Definitions, d)
	}
	return res, nil
}

// MdevUndefineRequest is `mdev undefine UUID...`: persistent definitions deleted (the active
// instances stay).
type MdevUndefineRequest struct {
	// UUIDs are the instances.
	UUIDs []string `json:"uuids"`
	// DryRun deletes nothing (--dry-run).
	DryRun bool `json:"dry_run,omitempty"`
}

// Op is "mdev undefine".
func (MdevUndefineRequest) Op() string { return "mdev undefine" }

// Bool is the request's boolean setting by its flag's name.
func (r MdevUndefineRequest) Bool(name string) bool { return name == "dry-run" && r.DryRun }

// IsSet reports whether the request sets the named setting.
func (r MdevUndefineRequest) IsSet(name string) bool { return r.Bool(name) }

// Check refuses a request that names no instance (exit 2).
func (r MdevUndefineRequest) Check() error {
	if len(r.UUIDs) == 0 {
		return Usagef("undefine needs at least one UUID")
	}
	return nil
}

// MdevUndefineResult is what mdev undefine deleted, or with a dry run would delete: its JSON
// is the command's --output json.
type MdevUndefineResult struct {
	DryRun  bool     `json:"dry_run"`
	Removed []string `json:"removed"`
}

// MdevUndefine is mdev undefine: each instance's definition files deleted, in order; the
// first that fails stops it.
func MdevUndefine(_ context.Context, env Env, req MdevUndefineRequest) (*MdevUndefineResult, error) {
	if err := req.Check(); err != nil {
		return nil, err
	}
	m, _, done := MdevManager(env, 0, req.DryRun)
	defer done()
	res := &MdevUndefineResult{DryRun: m.DryRun, Removed: []string{}}
	for _, id := range req.UUIDs {
		r, err := m.Undefine(id)
		if err != nil {
			return nil, err
		}
		res.Removed = append(res.Removed, r...)
	}
	return res, nil
}
