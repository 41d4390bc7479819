package mdev

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/mig"
	"github.com/vgpu-host/vgpu-host/vgpu"
)

// Request asks Place for Count instances of Profile.
type Request struct {
	// Profile is a type ID or name (MatchType): "A100-4C", "nvidia-471", "mbochs-small", "1160".
	Profile string `json:"profile"`
	// Count is the number of instances (default 1).
	Count int `json:"count"`
	// NUMA is the preferred NUMA node; -1 for no preference.
	NUMA int `json:"numa_node"`
	// Backend limits placement to one backend ("" for either).
	Backend string `json:"backend,omitempty"`
}

// Assignment is one parent's share of a placement.
type Assignment struct {
	Parent   string `json:"parent"`
	Backend  string `json:"backend"`
	Type     string `json:"type"`
	TypeName string `json:"type_name"`
	Count    int    `json:"count"`
	NUMA     int    `json:"numa_node"`
	// Free is how many instances of the type the parent could host before this placement.
	Free int `json:"free"`
}

// Placement is where Place put the instances. CreatePlacement creates them.
type Placement struct {
	Request     Request      `json:"request"`
	Assignments []Assignment `json:"assignments"`
	// Notes explain compromises (a NUMA preference that could not be met in full).
	Notes []string `json:"notes,omitempty"`
}

// Place chooses parents for req among parents (from Manager.Parents) by best fit: while
// instances remain, the parent with the fewest free slots that still fits all of them wins
// (keeping big holes for big requests and limiting fragmentation); when none fits all, the
// parent with the most free slots takes as many as it can. A MIG-backed type
// (vgpu.MIGBacking: "A100D-3-40C" runs on a 3g.40gb GPU instance) counts as free only as many
// times as its GPU instances fit on the GPU's fixed slices (migCap). Parents on the requested NUMA node
// are used before any other. Availability already encodes "one vGPU type per physical GPU at a
// time": a parent running another type reports 0 available for this one.
//
// A refusal names every parent and why it cannot help, e.g.
//
//	no parent can host 2× A100-20C: 0000:41:00.0 has 1 free, 0000:81:00.0 runs A100-4C
//
// wrapped in host.ErrBusy (parents exist but are full) or host.ErrNotFound (no parent offers
// the profile at all).
func Place(req Request, parents []Parent) (Placement, error) {
	return PlaceWithMIG(req, parents, nil)
}

// PlaceWithMIG is Place with the host's MIG state as NVML reports it (mig/remote), when the
// caller could read it: MIG-backed types on a GPU it lists are then counted exactly (its free
// GPU instances of the type's profile, plus those that still fit beside all its GPU instances)
// instead of by NVIDIA's documented geometry.
func PlaceWithMIG(req Request, parents []Parent, st *mig.State) (Placement, error) {
	if req.Count == 0 {
		req.Count = 1
	}
	if req.Count < 0 || strings.TrimSpace(req.Profile) == "" {
		return Placement{}, fmt.Errorf("place vGPU: %w: need a profile and a positive count", host.ErrInvalid)
	}
	cands, reasons, offered, err := candidates(req, parents, st)
	if err != nil {
		return Placement{}, err
	}
	refuse := func(sentinel error) error {
		if len(reasons) == 0 {
			reasons = []string{"the host has no vGPU parent"}
		}
		return fmt.Errorf("no parent can host %d× %s: %s: %w", req.Count, req.Profile, strings.Join(reasons, ", "), sentinel)
	}
	if !offered {
		return Placement{}, refuse(host.ErrNotFound)
	}
	// One type per parent here (the profile's), so adding the parents' counts is right; a
	// parent's counts for different types are alternatives (host.MdevParent.Capacity).
	total := 0
	for _, c := range cands {
		total += c.t.Available
	}
	if total < req.Count {
		return Placement{}, refuse(host.ErrBusy)
	}
	pl := Placement{Request: req}
	near, far := cands, []cand(nil)
	if req.NUMA >= 0 {
		near = nil
		for _, c := range cands {
			if c.p.NUMA == req.NUMA {
				near = append(near, c)
			} else {
				far = append(far, c)
			}
		}
	}
	left := pl.fill(near, req.Count)
	if left > 0 && req.NUMA >= 0 {
		pl.Notes = append(pl.Notes, fmt.Sprintf("NUMA node %d could host %d of %d; the rest go to other nodes", req.NUMA, req.Count-left, req.Count))
	}
	pl.fill(far, left)
	return pl, nil
}

// cand is a parent that offers the requested type, with the type.
type cand struct {
	p Parent
	t Type
}

// candidates finds the parents that offer req's profile and have room, and says for every
// parent why it can or cannot help; offered is false when no parent offers the profile at all.
func candidates(req Request, parents []Parent, st *mig.State) (cands []cand, reasons []string, offered bool, err error) {
	for _, p := range parents {
		if req.Backend != "" && p.Backend != req.Backend {
			continue
		}
		t, err := LookupType(p, req.Profile)
		if errors.Is(err, host.ErrInvalid) {
			return nil, nil, false, fmt.Errorf("place vGPU: %w", err)
		}
		if err != nil {
			reasons = append(reasons, fmt.Sprintf("%s does not offer it", p.Name))
			continue
		}
		offered = true
		migWhy := ""
		if n, why, ok := migCap(p, t, st); ok && n < t.Available {
			t.Available, migWhy = n, why // MIG-backed: fixed slices limit it below the driver's count
		}
		if t.Available > 0 {
			cands = append(cands, cand{p, t})
			if migWhy != "" {
				reasons = append(reasons, fmt.Sprintf("%s has %d free (%s)", p.Name, t.Available, migWhy))
			} else {
				reasons = append(reasons, fmt.Sprintf("%s has %d free", p.Name, t.Available))
			}
			continue
		}
		if migWhy != "" {
			reasons = append(reasons, fmt.Sprintf("%s has 0 free (%s)", p.Name, migWhy))
			continue
		}
		var others []string
		for _, id := range p.Running {
			if id != t.ID {
				others = append(others, typeDisplay(p, id))
			}
		}
		if len(others) > 0 {
			reasons = append(reasons, fmt.Sprintf("%s runs %s", p.Name, strings.Join(others, ", ")))
		} else {
			reasons = append(reasons, fmt.Sprintf("%s is full (0 free)", p.Name))
		}
	}
	return cands, reasons, offered, nil
}

// fill places left instances on pool by best fit: while instances remain, the parent with the
// fewest free slots that still fits all of them wins; when none fits all, the roomiest takes
// what it can. It returns how many it could not place.
func (pl *Placement) fill(pool []cand, left int) int {
	sort.SliceStable(pool, func(i, j int) bool { return pool[i].p.Name < pool[j].p.Name })
	free := map[string]int{}
	for _, c := range pool {
		free[c.p.Name] = c.t.Available
	}
	for left > 0 {
		best := -1
		for i, c := range pool {
			f := free[c.p.Name]
			if f >= left && (best < 0 || f < free[pool[best].p.Name]) {
				best = i
			}
		}
		if best < 0 { // nothing fits all: the roomiest parent takes what it can
			for i, c := range pool {
				f := free[c.p.Name]
				if f > 0 && (best < 0 || f > free[pool[best].p.Name]) {
					best = i
				}
			}
		}
		if best < 0 {
			return left
		}
		c := pool[best]
		n := min(free[c.p.Name], left)
		free[c.p.Name] -= n
		left -= n
		pl.Assignments = append(pl.Assignments, Assignment{Parent: c.p.Name, Backend: c.p.Backend, Type: c.t.ID, TypeName: c.t.Name,
			Count: n, NUMA: c.p.NUMA, Free: c.t.Available})
	}
	return 0
}

// typeDisplay names a running type for a message: its short name when the parent lists it.
func typeDisplay(p Parent, id string) string {
	for _, t := range p.Types {
		if t.ID == id && t.Name != "" {
			return vgpu.ShortName(t.Name)
		}
	}
	return id
}
