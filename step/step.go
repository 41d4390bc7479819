// Package step holds the typed steps of a VM's plan: each host or libvirt change apply takes,
// in order, recorded in the ledger's journal before it is taken, and undone (newest first) by
// a failed apply, a converging re-apply or destroy.
//
// A step is a value of one of the types below. It says what it is (Action, Target, Params for
// the journal, Text for people), and how to take and undo itself against an Env that apply
// provides. The journal and `plan -o json` keep one shape for every step:
//
//	{"action": "bind-group", "target": "0000:41:00.0", "params": {"functions": "0000:41:00.0,0000:41:00.1"}, "text": "..."}
//
// Decode turns a journal entry back into its typed step, so an undo never reads a string map.
package step

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/vfio"
	"github.com/vgpu-host/vgpu-host/virt"
)

// Action names a kind of step, as the journal and JSON output spell it.
type Action string

// The actions, in the order apply takes them.
const (
	ActBindGroup     Action = "bind-group"     // bind a GPU's IOMMU group to vfio-pci
	ActCreateMdev    Action = "create-mdev"    // create an mdev instance of a type on a parent
	ActAssignVGPU    Action = "assign-vgpu"    // write a vendor vGPU type to a VF's nvidia/current_vgpu_type
	ActEnsurePool    Action = "ensure-pool"    // define/start the images dir pool (shared; never undone)
	ActCreateOverlay Action = "create-overlay" // qcow2 overlay volume over a base image
	ActCreateBlank   Action = "create-blank"   // empty disk volume of a given size
	ActWriteSeed     Action = "write-seed"     // cloud-init NoCloud seed ISO volume
	ActFetchISO      Action = "fetch-iso"      // an installer ISO downloaded into the pool directory
	ActDefine        Action = "define"         // define the libvirt domain
	ActStart         Action = "start"          // start the domain
)

// HostPrep makes the host changes a VM's devices need. Each method checks the current state
// first, so calling it twice (or undoing something never done) is harmless. vm is the owner
// every record names, so only that VM's release undoes it.
type HostPrep interface {
	// Preflight returns every safety check that refuses binding the IOMMU groups of addrs,
	// changing nothing.
	Preflight(ctx context.Context, addrs []host.Address) ([]vfio.Refusal, error)
	// BindGroup binds the IOMMU groups of addrs to vfio-pci, remembering original drivers.
	// force names the safety checks the user overrode (vfio.CheckBootVGA, ...).
	BindGroup(ctx context.Context, vm string, addrs []host.Address, force []string) error
	// RestoreGroup gives the functions of addrs' groups back to their original drivers.
	RestoreGroup(ctx context.Context, vm string, addrs []host.Address) error
	// CreateMdev creates vm's mdev instance number index (its UUID is uuid) of type typ on parent.
	CreateMdev(ctx context.Context, vm, parent, typ, uuid string, index int) error
	// RemoveMdev removes mdev uuid.
	RemoveMdev(ctx context.Context, vm, uuid string) error
	// AssignVGPU writes vendor vGPU type typ to exactly VF vf (nvidia/current_vgpu_type),
	// recording vm as its owner (instance number index of vm's vendor vGPUs).
	AssignVGPU(ctx context.Context, vm string, vf host.Address, typ string, index int) error
	// ClearVGPU writes 0 to vf's nvidia/current_vgpu_type if vm set it (nothing if it holds
	// no type); a type another owner or tool set is refused (host.ErrRefused).
	ClearVGPU(ctx context.Context, vm string, vf host.Address, typ string) error
}

// Env is what a step is taken in: the VM, the host preparation, the libvirt connection and
// the pool apply uses.
type Env interface {
	// VM is the name of the VM the step is for.
	VM() string
	// Host prepares devices; it errors (host.ErrUnsupported) when none is wired in.
	Host(what string) (HostPrep, error)
	// Conn is the libvirt connection.
	Conn() virt.Conn
	// Pool and PoolDir name the dir pool of overlays and seeds.
	Pool() string
	PoolDir() string
	// SeedISO is the VM's cloud-init seed image.
	SeedISO() ([]byte, error)
	// DomainXML is the domain to define.
	DomainXML() string
	// Forced names the safety checks the user overrode (apply --force=NAME).
	Forced() []string
	// Fetch downloads url to dest unless dest holds it already, verifying checksum as it
	// streams (package fetch says how); it errors (host.ErrUnsupported) when no downloader
	// is wired in.
	Fetch(ctx context.Context, url, checksum, dest string) error
}

// Step is one change of a plan.
type Step interface {
	// Action says which kind of step this is.
	Action() Action
	// Target names what it changes (a PCI address, an mdev UUID, a volume, the domain).
	Target() string
	// Params are what its undo needs besides Target, as the journal records them.
	Params() map[string]string
	// Text says the step in words: "bind the IOMMU group of 0000:41:00.0 to vfio-pci".
	Text() string
	// Do takes the step.
	Do(ctx context.Context, env Env) error
	// Undo reverts it; undoing a step that was never taken (or twice) is harmless.
	Undo(ctx context.Context, env Env) error
}

// Decode returns the typed step a journal entry (or a plan's JSON) records. The journal is a
// file on disk that a full disk or a hand edit may have damaged, so every field is checked: a
// number that does not parse, or a field the step cannot be taken or undone without, is refused
// naming the step, the field and what it holds, wrapping host.ErrInvalid. Only create-mdev's
// index may be missing (journals written before typed steps lack it; it reads as 0).
func Decode(action, target string, params map[string]string) (Step, error) {
	f := fields{action: action, target: target, params: params}
	switch Action(action) {
	case ActBindGroup:
		fs, err := splitAddrs(f.params["functions"])
		if err != nil || len(fs) == 0 {
			return nil, f.bad("functions", "want PCI addresses joined by commas")
		}
		return BindGroup{Functions: fs}, nil
	case ActCreateMdev:
		if target == "" {
			return nil, f.bad("target", "want the instance's UUID")
		}
		s := CreateMdev{UUID: target, Parent: f.str("parent"), Type: f.str("type"), Index: f.int("index", false)}
		return f.step(s)
	case ActAssignVGPU:
		vf, err := host.ParseAddress(target)
		if err != nil {
			return nil, fmt.Errorf("journal step %s %s: %w: %w", action, target, err, host.ErrInvalid)
		}
		s := AssignVGPU{VF: vf, Type: f.int("type", true), TypeName: f.params["type_name"], Index: f.int("index", true)}
		return f.step(s)
	case ActEnsurePool:
		return EnsurePool{Pool: target, Path: f.params["path"]}, nil
	case ActCreateOverlay, ActWriteSeed, ActCreateBlank:
		// The names the journal gives become paths, so they are input like any other.
		if err := checkVolume(target, f.params["pool"]); err != nil {
			return nil, fmt.Errorf("journal step %s %s: %w", action, target, err)
		}
		switch Action(action) {
		case ActWriteSeed:
			return WriteSeed{Volume: target, Pool: f.params["pool"]}, nil
		case ActCreateBlank:
			s := CreateBlank{Volume: target, Pool: f.params["pool"], Format: f.str("format"), Size: f.uint("size")}
			return f.step(s)
		}
		s := CreateOverlay{Volume: target, Pool: f.params["pool"], Backing: f.str("backing"),
			BackingFormat: f.params["backing_format"], Size: f.uint("size")}
		return f.step(s)
	case ActFetchISO:
		if err := host.CheckComponent("file", target); err != nil {
			return nil, fmt.Errorf("journal step %s %s: %w", action, target, err)
		}
		return FetchISO{File: target, URL: f.params["url"], Checksum: f.params["checksum"]}, nil
	case ActDefine:
		return f.step(Define{VM: target, VirtType: f.params["virt_type"], HotplugSlots: f.int("hotplug_slots", false)})
	case ActStart:
		return Start{VM: target}, nil
	case ActHotplug, ActAttachDevice:
		return decodeHotplug(&f)
	}
	return nil, fmt.Errorf("journal step %q on %s: unknown action: %w", action, target, host.ErrInvalid)
}

// fields reads the params of one journal step, keeping the first field it refuses in err.
type fields struct {
	action, target string
	params         map[string]string
	err            error
}

// bad refuses field key of the step, saying what it holds and what was wanted.
func (f *fields) bad(key, want string) error {
	v, ok := f.params[key]
	if key == "target" {
		v, ok = f.target, true
	}
	held := fmt.Sprintf("%q", v)
	if !ok {
		held = "is missing"
	}
	return fmt.Errorf("journal step %s %s: %s %s: %s: %w", f.action, f.target, key, held, want, host.ErrInvalid)
}

// step is s, or nil and the first refusal.
func (f *fields) step(s Step) (Step, error) {
	if f.err != nil {
		return nil, f.err
	}
	return s, nil
}

// fail keeps the first refusal.
func (f *fields) fail(key, want string) {
	if f.err == nil {
		f.err = f.bad(key, want)
	}
}

// str is field key, which must not be empty.
func (f *fields) str(key string) string {
	v := f.params[key]
	if v == "" {
		f.fail(key, "want a value")
	}
	return v
}

// int is field key as a non-negative integer; an absent field is 0 unless required.
func (f *fields) int(key string, required bool) int {
	v, ok := f.params[key]
	if !ok && !required {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		f.fail(key, "want a non-negative integer")
		return 0
	}
	return n
}

// uint is field key as a byte count.
func (f *fields) uint(key string) uint64 {
	n, err := strconv.ParseUint(f.params[key], 10, 64)
	if err != nil {
		f.fail(key, "want a size in bytes")
	}
	return n
}

// checkVolume validates a volume name and its pool's ("" for the apply's pool).
func checkVolume(volume, pool string) error {
	if err := host.CheckComponent("volume", volume); err != nil {
		return err
	}
	if pool != "" {
		return host.CheckComponent("pool", pool)
	}
	return nil
}

// Planned is a Step as plan's JSON carries it: {"action", "target", "params", "text"}.
type Planned struct {
	Step
}

// Record is how a step is written down: the journal's action, target and params, and the
// text people read. RecordOf reads it from a step once; the plan carries it from then on.
type Record struct {
	Action Action            `json:"action"`
	Target string            `json:"target"`
	Params map[string]string `json:"params,omitempty"`
	Text   string            `json:"text"`
}

// RecordOf returns s written down.
func RecordOf(s Step) Record {
	return Record{Action: s.Action(), Target: s.Target(), Params: s.Params(), Text: s.Text()}
}

// MarshalJSON writes the step's action, target, params and text.
func (p Planned) MarshalJSON() ([]byte, error) {
	return json.Marshal(RecordOf(p.Step))
}

// UnmarshalJSON reads what MarshalJSON wrote back into the typed step.
func (p *Planned) UnmarshalJSON(b []byte) error {
	var j Record
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	s, err := Decode(string(j.Action), j.Target, j.Params)
	if err != nil {
		return err
	}
	p.Step = s
	return nil
}

// JoinAddrs renders addresses as "A,B,C".
func JoinAddrs(as []host.Address) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}

func splitAddrs(s string) ([]host.Address, error) {
	var out []host.Address
	for _, f := range strings.Split(s, ",") {
		if f == "" {
			continue
		}
		a, err := host.ParseAddress(f)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}
