package ops

import (
	"context"
	"strconv"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/mdev"
	"github.com/vgpu-host/vgpu-host/mig"
)

// MdevTypesRequest is `mdev types [PARENT]`: the vGPU parents and the types they can create.
type MdevTypesRequest struct {
	// Parent names one parent (PCI address, VF address or virtual parent name); nil: all.
	Parent *string `json:"parent,omitempty"`
}

// Op is "mdev types".
func (MdevTypesRequest) Op() string { return "mdev types" }

// Bool is false: mdev types has no boolean setting.
func (MdevTypesRequest) Bool(string) bool { return false }

// IsSet is false: mdev types has no flag.
func (MdevTypesRequest) IsSet(string) bool { return false }

// MdevTypesResult is what mdev types lists: its JSON is the command's --output json.
type MdevTypesResult []mdev.Parent

// MdevTypes is mdev types: every vGPU parent with its types and instances, or the one named
// (exit 6 when there is none of that name).
func MdevTypes(_ context.Context, env Env, req MdevTypesRequest) (*MdevTypesResult, error) {
	m, _, done := MdevManager(env, 0, false)
	defer done()
	var ps []mdev.Parent
	if req.Parent != nil {
		p, err := m.Parent(*req.Parent)
		if err != nil {
			return nil, err
		}
		ps = []mdev.Parent{p}
	} else {
		var err error
		if ps, err = m.Parents(); err != nil {
			return nil, err
		}
	}
	if ps == nil {
		ps = []mdev.Parent{}
	}
	res := MdevTypesResult(ps)
	return &res, nil
}

// MdevListRequest is `mdev list [PARENT]`: vGPU instances, active and defined.
type MdevListRequest struct {
	// Parent keeps the instances of this parent only; empty: all.
	Parent string `json:"parent,omitempty"`
	// Defined and Active keep only instances with a persistent definition, or only those
	// that exist in the kernel now (--defined, --active).
	Defined bool `json:"defined,omitempty"`
	Active  bool `json:"active,omitempty"`
}

// Op is "mdev list".
func (MdevListRequest) Op() string { return "mdev list" }

// Bool is the request's boolean setting by its flag's name.
func (r MdevListRequest) Bool(name string) bool {
	switch name {
	case "defined":
		return r.Defined
	case "active":
		return r.Active
	}
	return false
}

// IsSet reports whether the request sets the named setting.
func (r MdevListRequest) IsSet(name string) bool { return r.Bool(name) }

// MdevListResult is what mdev list lists: its JSON is the command's --output json.
type MdevListResult []mdev.Instance

// MdevList is mdev list: the instances (active and defined, with their owners), filtered by
// the request. A parent that does not exist now still matches its defined instances by name.
func MdevList(_ context.Context, env Env, req MdevListRequest) (*MdevListResult, error) {
	m, _, done := MdevManager(env, 0, false)
	defer done()
	all, err := m.Instances()
	if err != nil {
		return nil, err
	}
	parent := ""
	if req.Parent != "" {
		p, err := m.Parent(req.Parent)
		if err != nil {
			// A defined instance's parent may be absent now; match it by name.
			parent = req.Parent
			if a, perr := host.ParseAddress(parent); perr == nil {
				parent = a.String()
			}
		} else {
			parent = p.Name
		}
	}
	ins := MdevListResult{}
	for _, in := range all {
		if (req.Defined && !in.Defined) || (req.Active && !in.Active) || (parent != "" && in.Parent != parent) {
			continue
		}
		ins = append(ins, in)
	}
	return &ins, nil
}

// MdevPlaceRequest is `mdev place`: where Count instances of a profile would go. It changes
// nothing.
type MdevPlaceRequest struct {
	// Type is the profile's ID or name.
	Type string `json:"type"`
	// Count is the number of instances (mdev.Place's default, 1, when 0).
	Count int `json:"count,omitempty"`
	// NUMA is the preferred NUMA node; nil: no preference.
	NUMA *int `json:"numa,omitempty"`
}

// Op is "mdev place".
func (MdevPlaceRequest) Op() string { return "mdev place" }

// Bool is false: mdev place has no boolean setting.
func (MdevPlaceRequest) Bool(string) bool { return false }

// IsSet reports whether the request sets the named setting.
func (r MdevPlaceRequest) IsSet(name string) bool {
	switch name {
	case "type":
		return r.Type != ""
	case "count":
		return r.Count != 0
	case "numa":
		return r.NUMA != nil
	}
	return false
}

// MdevPlaceResult is what mdev place chose: its JSON is the command's --output json.
type MdevPlaceResult = mdev.Placement

// MdevPlace is mdev place: the placement best fit and the NUMA preference choose, MIG-backed
// types counted by the host's MIG state when env.PlaceMIG reads one. A NUMA node below 0 is a
// usage error (exit 2); no parent offering the profile exits 6, too few free ones 5.
func MdevPlace(ctx context.Context, env Env, req MdevPlaceRequest) (*MdevPlaceResult, error) {
	m, _, done := MdevManager(env, 0, false)
	defer done()
	numa := -1
	if req.NUMA != nil {
		if numa = *req.NUMA; numa < 0 {
			return nil, Usagef("--numa %q: want a node number", strconv.Itoa(numa))
		}
	}
	ps, err := m.Parents()
	if err != nil {
		return nil, err
	}
	var st *mig.State
	if env.PlaceMIG != nil {
		st = env.PlaceMIG(ctx, ps)
	}
	pl, err := mdev.PlaceWithMIG(mdev.Request{Profile: req.Type, Count: req.Count, NUMA: numa}, ps, st)
	if err != nil {
		return nil, err
	}
	return &pl, nil
}
