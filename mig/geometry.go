package mig

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/vgpu-host/vgpu-host/host"
)

// parseName splits a profile name "1g.10gb+me" into its compute slices, memory in GB and
// attribute suffix ("+me", "-me", "+gfx", "+me.all", ""), through ParseProfile.
func parseName(name string) (g, gb int, suffix string, ok bool) {
	r, err := ParseProfile(name)
	if err != nil || r.Name == "" {
		return 0, 0, "", false
	}
	_, digits, attr, _ := profileName(r.Name)
	gb, err = strconv.Atoi(digits)
	if err != nil || gb < 1 {
		return 0, 0, "", false
	}
	return r.ComputeSlices, gb, attr, true
}

// DocumentedGPU is the MIG geometry NVIDIA's MIG user guide documents for a GPU with compute
// compute slices (7: A100, H100, H200; 4: A30) offering the named profiles, for when NVML
// cannot be asked (placement of MIG-backed vGPU types read from sysfs): on a 7-slice GPU the
// placements span 8 memory slices, 1g at 0…6, the double-memory 1g (1g.20gb on an H100-80GB)
// at 0, 2, 4, 6, 2g at 0, 2, 4, 3g at 0 or 4 (four memory slices each), 4g at 0 and 7g over
// all; "+me" profiles exist once per GPU. On a 4-slice A30: 1g at 0…3, 2g at 0 or 2, 4g at 0.
// It has no instances: what exists is NVML's to say.
func DocumentedGPU(address string, compute int, profiles []string) (GPU, error) {
	if compute != 7 && compute != 4 {
		return GPU{}, fmt.Errorf("MIG geometry of a %d-slice GPU: %w: vgpu-host knows 7-slice (A100, H100, H200) and 4-slice (A30) GPUs", compute, host.ErrUnsupported)
	}
	g := GPU{Address: address, Capable: true, Enabled: true, Pending: true, ComputeSlices: compute, MemorySlices: 8}
	if compute == 4 {
		g.MemorySlices = 4
	}
	smallest1g := 0
	for _, name := range profiles {
		if sg, gb, suffix, ok := parseName(name); ok && sg == 1 && suffix == "" && (smallest1g == 0 || gb < smallest1g) {
			smallest1g = gb
		}
	}
	seen := map[string]bool{}
	for _, name := range profiles {
		sg, gb, suffix, ok := parseName(name)
		if !ok {
			return GPU{}, fmt.Errorf("MIG profile %q: %w: not a name like 3g.40gb", name, host.ErrInvalid)
		}
		if seen[normName(name)] {
			continue
		}
		seen[normName(name)] = true
		p := Profile{Name: normName(name), ID: -1, Index: -1, ComputeSlices: sg}
		span, starts := sg, []int{}
		switch {
		case sg == 1 && suffix == "" && gb > smallest1g: // the double-memory 1g (REV2)
			span = 2
		case sg == 3 && compute == 7:
			span = 4
		case sg == 7:
			span = 8
		}
		// An instance spans its compute slices within the first compute memory slices, except the
		// profiles whose memory spans more (3g, 7g, the double-memory 1g), which may reach the end.
		limit := compute
		if span != sg {
			limit = g.MemorySlices
		}
		for s := 0; s+span <= limit; s += span {
			starts = append(starts, s)
		}
		if sg > compute || len(starts) == 0 {
			return GPU{}, fmt.Errorf("MIG profile %q: %w: more slices than a %d-slice GPU has", name, host.ErrInvalid, compute)
		}
		for _, s := range starts {
			p.Placements = append(p.Placements, Placement{Start: s, Size: span})
		}
		p.MemorySlices = span
		p.Max = len(starts)
		if strings.HasPrefix(suffix, "+me") {
			p.Max = 1
		}
		g.Profiles = append(g.Profiles, p)
	}
	SortProfiles(g.Profiles)
	return g, nil
}

// Capacity is how many more instances of profile fit on g next to its instances and the
// profiles in also (instances that exist or are wanted without a known placement), and, when
// not even one more fits, Fit's reason.
func Capacity(g GPU, profile string, also []string) (int, error) {
	n := 0
	var last error
	for {
		want := append(append([]string(nil), also...), profile)
		for i := 0; i < n; i++ {
			want = append(want, profile)
		}
		if _, err := Fit(g, want); err != nil {
			last = err
			break
		}
		n++
		if n > 64 {
			break
		}
	}
	return n, last
}
