package mig

import (
	"fmt"
	"sort"
	"strings"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/vgpu"
)

// Where names the GPU for messages: its address, and its name when known.
func (g GPU) Where() string {
	if g.Name != "" {
		return fmt.Sprintf("GPU %s (%s)", g.Address, g.Name)
	}
	return "GPU " + g.Address
}

// LookupProfile returns the profile of g that name names, by ParseProfile's rules: a name as
// NVIDIA prints it ("3g.40gb", "MIG 1g.18gb", "1c.1g.5gb", any case) or the profile ID
// nvidia-smi prints ("9"). An unknown name is an error wrapping host.ErrNotFound with a
// did-you-mean listing g's profiles.
func (g GPU) LookupProfile(name string) (Profile, error) {
	ref, perr := ParseProfile(name)
	for _, p := range g.Profiles {
		switch {
		case perr != nil:
		case ref.Name == "" && p.ID == ref.ID:
			return p, nil
		case ref.Name != "" && normName(p.Name) == ref.Name:
			return p, nil
		}
	}
	if len(g.Profiles) == 0 {
		why := "it offers no MIG profiles"
		switch {
		case !g.Capable:
			why = "it does not support MIG"
		case !g.Enabled:
			why = fmt.Sprintf("NVML lists no MIG profiles for it while MIG mode is off; turn it on first (nvidia-smi -i %d -mig 1), then plan again", g.Index)
		}
		return Profile{}, fmt.Errorf("MIG profile %q on %s: %w: %s", name, g.Where(), host.ErrNotFound, why)
	}
	offered := make([]vgpu.Profile, 0, len(g.Profiles))
	for _, p := range g.Profiles {
		offered = append(offered, vgpu.Profile{ID: p.Name})
	}
	return Profile{}, fmt.Errorf("MIG profile %q on %s: %w (%s)", name, g.Where(), host.ErrNotFound, vgpu.DidYouMean(offered, name))
}

// End is the first slice after the placement.
func (p Placement) End() int { return p.Start + p.Size }

// String renders the slices a placement occupies: "4-7", or "3" for one slice.
func (p Placement) String() string {
	if p.Size <= 1 {
		return fmt.Sprint(p.Start)
	}
	return fmt.Sprintf("%d-%d", p.Start, p.End()-1)
}

func (p Placement) mask() uint64 {
	if p.Size <= 0 || p.Start < 0 || p.End() > 64 {
		return 0
	}
	return ((uint64(1) << p.Size) - 1) << p.Start
}

// Fit reports whether the profiles named by want fit on g next to the instances g holds now,
// and where: the placement of want[i] is the i-th result. See FitWith.
func Fit(g GPU, want []string) ([]Placement, error) { return FitWith(g, g.Instances, want) }

// FitWith reports whether the profiles named by want fit on g next to the instances keep (the
// GPU's other instances are taken as gone), and where each would go. Profiles occupy fixed
// slices (the GPU's possible placements for each profile, as NVML lists them), so the search
// is exact: every assignment of want to free placements is tried, biggest profiles first,
// lowest placement first, as NVML itself places instances. The placement of want[i] is the
// i-th result.
//
// A refusal wraps host.ErrBusy and names the GPU, the profile that does not fit, the slices
// it could use and what holds them, e.g.
//
//	GPU 0000:01:00.0: 3g.20gb does not fit: 3g.20gb needs slices 0-3 or 4-7; 4g.20gb holds 0-3, 3g.20gb holds 4-7
//
// An unknown profile wraps host.ErrNotFound (with a did-you-mean).
func FitWith(g GPU, keep []Instance, want []string) ([]Placement, error) {
	profs := make([]Profile, len(want))
	for i, w := range want {
		p, err := g.LookupProfile(w)
		if err != nil {
			return nil, err
		}
		profs[i] = p
	}
	// Per-profile limits first: the clearest reason ("at most 7").
	count := map[string]int{}
	for _, in := range keep {
		count[normName(in.Profile)]++
	}
	for _, p := range profs {
		count[normName(p.Name)]++
	}
	for _, p := range profs {
		if p.Max > 0 && count[normName(p.Name)] > p.Max {
			return nil, fmt.Errorf("%s: %d× %s do not fit: it holds at most %d%s: %w",
				g.Where(), count[normName(p.Name)], p.Name, p.Max, keptNote(keep, p.Name), host.ErrBusy)
		}
		count[normName(p.Name)] = -1 << 30 // report each profile once
	}
	var used uint64
	var holders []holder
	for _, in := range keep {
		used |= in.Placement.mask()
		holders = append(holders, holder{in.Profile, in.Placement})
	}
	// Biggest first (memory slices, then compute slices: a 1g.35gb takes two memory slices);
	// ties keep the caller's order (stable), so the result is deterministic.
	order := make([]int, len(profs))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool {
		pa, pb := profs[order[a]], profs[order[b]]
		if pa.MemorySlices != pb.MemorySlices {
			return pa.MemorySlices > pb.MemorySlices
		}
		return pa.ComputeSlices > pb.ComputeSlices
	})
	out := make([]Placement, len(profs))
	if s := search(profs, order, 0, used, out); s {
		return out, nil
	}
	// Explain: the shortest prefix (in search order) that does not fit, and the arrangement of
	// the one before it that the search would have tried first.
	for k := 1; k <= len(order); k++ {
		part := make([]Placement, len(profs))
		if search(profs, order[:k], 0, used, part) {
			continue
		}
		bad := profs[order[k-1]]
		hs := append([]holder(nil), holders...)
		prev := make([]Placement, len(profs))
		search(profs, order[:k-1], 0, used, prev)
		for _, i := range order[:k-1] {
			hs = append(hs, holder{profs[i].Name, prev[i]})
		}
		return nil, fmt.Errorf("%s: %s does not fit: %s needs slices %s; %s: %w",
			g.Where(), bad.Name, bad.Name, placementsText(bad.Placements), holdersText(hs, bad.Placements), host.ErrBusy)
	}
	return nil, fmt.Errorf("%s: the profiles do not fit: %w", g.Where(), host.ErrBusy) // not reached
}

// search places profs[order[i:]] on the slices not in used, writing each one's placement to
// out[order[i]], and reports whether it could.
func search(profs []Profile, order []int, i int, used uint64, out []Placement) bool {
	if i == len(order) {
		return true
	}
	p := profs[order[i]]
	for _, pl := range p.Placements {
		m := pl.mask()
		if m == 0 || used&m != 0 {
			continue
		}
		out[order[i]] = pl
		if search(profs, order, i+1, used|m, out) {
			return true
		}
	}
	return false
}

// holder is something occupying slices, for messages.
type holder struct {
	profile string
	at      Placement
}

func placementsText(pls []Placement) string {
	if len(pls) == 0 {
		return "that the GPU does not offer (no placements)"
	}
	var s []string
	for _, p := range pls {
		s = append(s, p.String())
	}
	if len(s) == 1 {
		return s[0]
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

// holdersText says what holds the slices of pls: "4g.20gb holds 0-3, 3g.20gb holds 4-7".
func holdersText(hs []holder, pls []Placement) string {
	var want uint64
	for _, p := range pls {
		want |= p.mask()
	}
	sort.SliceStable(hs, func(i, j int) bool { return hs[i].at.Start < hs[j].at.Start })
	var s []string
	for _, h := range hs {
		if h.at.mask()&want != 0 {
			s = append(s, fmt.Sprintf("%s holds %s", h.profile, h.at))
		}
	}
	if len(s) == 0 {
		return "none of them is free"
	}
	return strings.Join(s, ", ")
}

func keptNote(keep []Instance, profile string) string {
	n := 0
	for _, in := range keep {
		if normName(in.Profile) == normName(profile) {
			n++
		}
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d exist already)", n)
}

// FreePlacements lists, for profile p of g, the placements free now (not overlapping an
// instance of g).
func FreePlacements(g GPU, p Profile) []Placement {
	var used uint64
	for _, in := range g.Instances {
		used |= in.Placement.mask()
	}
	out := []Placement{}
	for _, pl := range p.Placements {
		if m := pl.mask(); m != 0 && used&m == 0 {
			out = append(out, pl)
		}
	}
	return out
}
