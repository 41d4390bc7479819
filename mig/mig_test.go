package mig

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
)

// NVIDIA's MIG user guide lists these names for the A100-SXM4-80GB (81920 MiB) and the
// H100-SXM5-80GB; the memory sizes are what NVML reports for them.
func TestProfileNameAsNVIDIA(t *testing.T) {
	const a100_80 = 81920 << 20
	const a100_40 = 40960 << 20
	const h200 = 150754820096
	const h100 = 85520809984
	for _, tc := range []struct {
		index    int
		mib, dev uint64
		want     string
	}{
		{Profile1Slice, 9728, a100_80, "1g.10gb"},
		{Profile1SliceRev1, 9728, a100_80, "1g.10gb+me"},
		{Profile1SliceRev2, 19968, a100_80, "1g.20gb"},
		{Profile2Slice, 19968, a100_80, "2g.20gb"},
		{Profile3Slice, 40192, a100_80, "3g.40gb"},
		{Profile4Slice, 40192, a100_80, "4g.40gb"},
		{Profile7Slice, 80384, a100_80, "7g.80gb"},
		{Profile1Slice, 4864, a100_40, "1g.5gb"},
		{Profile3Slice, 19968, a100_40, "3g.20gb"},
		{Profile1SliceNoME, 9728, a100_80, "1g.10gb-me"},
		{Profile1SliceAllME, 9728, a100_80, "1g.10gb+me.all"},
		{Profile2SliceGfx, 19968, a100_80, "2g.20gb+gfx"},
		// A real H200 (../shared/fixtures/nvidia-h200: memory_total and MemorySizeMB as NVML
		// reported them, names as nvidia-smi mig -lgip printed them).
		{Profile1Slice, 16384, h200, "1g.18gb"},
		{Profile1SliceRev1, 16384, h200, "1g.18gb+me"},
		{Profile1SliceRev2, 33280, h200, "1g.35gb"},
		{Profile2Slice, 33280, h200, "2g.35gb"},
		{Profile3Slice, 71424, h200, "3g.71gb"},
		{Profile4Slice, 71424, h200, "4g.71gb"},
		{Profile7Slice, 143360, h200, "7g.141gb"},
		// A real H100 80GB HBM3 (testdata/nvidia-h100: memory_total and MemorySizeMB as NVML
		// reported them, names as nvidia-smi mig -lgip printed them).
		{Profile1Slice, 9984, h100, "1g.10gb"},
		{Profile1SliceRev1, 9984, h100, "1g.10gb+me"},
		{Profile1SliceRev2, 20096, h100, "1g.20gb"},
		{Profile2Slice, 20096, h100, "2g.20gb"},
		{Profile3Slice, 40448, h100, "3g.40gb"},
		{Profile4Slice, 40448, h100, "4g.40gb"},
		{Profile7Slice, 81152, h100, "7g.80gb"},
	} {
		got, err := ProfileName(tc.index, tc.mib, tc.dev)
		if err != nil || got != tc.want {
			t.Errorf("ProfileName(%d, %d MiB) = %q, %v; want %q", tc.index, tc.mib, got, err, tc.want)
		}
	}
	if _, err := ProfileName(99, 1, 1); err == nil {
		t.Error("unknown profile index named")
	}
}

// ParseProfile, the one parser of profile names, takes what NVIDIA's tools and documents
// print, and LookupProfile finds a GPU's profile by it: by name or by the profile ID.
func TestParseAndLookupProfile(t *testing.T) {
	for in, want := range map[string]string{
		"3g.40gb": "3g.40gb", "MIG 3g.40gb": "3g.40gb", " mig 1g.10gb ": "1g.10gb", "1C.1G.10GB": "1g.10gb",
		"1g.18gb+me": "1g.18gb+me", "1g.10gb+me.all": "1g.10gb+me.all", "2g.20gb-me": "2g.20gb-me",
		"2g.20gb+gfx": "2g.20gb+gfx", "7g.141gb": "7g.141gb", "9": "#9", "MIG 0": "#0",
	} {
		r, err := ParseProfile(in)
		got := r.Name
		if r.Name == "" {
			got = fmt.Sprintf("#%d", r.ID)
		}
		if err != nil || got != want {
			t.Errorf("ParseProfile(%q) = %+v, %v; want %s", in, r, err, want)
		}
	}
	for _, bad := range []string{"", "3g", "3g.40", "9g.40gb", "2c.1g.10gb", "-1", "1g.10gb+", "A100-3-40C"} {
		if r, err := ParseProfile(bad); !errors.Is(err, host.ErrInvalid) {
			t.Errorf("ParseProfile(%q) = %+v, %v; want an error wrapping ErrInvalid", bad, r, err)
		}
	}
	g := a100()
	for in, want := range map[string]string{"9": "3g.40gb", "MIG 3g.40gb": "3g.40gb", "0": "7g.80gb", "19": "1g.10gb", "1c.1g.10gb": "1g.10gb"} {
		if p, err := g.LookupProfile(in); err != nil || p.Name != want {
			t.Errorf("LookupProfile(%q) = %s, %v; want %s", in, p.Name, err, want)
		}
	}
	for _, bad := range []string{"4", "1g.5gb", "MIG x"} {
		if _, err := g.LookupProfile(bad); !errors.Is(err, host.ErrNotFound) {
			t.Errorf("LookupProfile(%q): %v; want not found", bad, err)
		}
	}
	// Plan takes the same names and IDs, and plans in canonical names.
	c, err := Plan(State{GPUs: []GPU{g}}, map[string][]string{g.Address: {"MIG 4g.40gb", "9"}})
	if err != nil || len(c.Steps) != 2 || c.Steps[0].Profile != "4g.40gb" || c.Steps[1].Profile != "3g.40gb" {
		t.Errorf("plan MIG 4g.40gb, 9: %+v, %v", c, err)
	}
}

// a100 is an A100-SXM4-80GB with MIG on, its profiles and placements as NVML lists them.
func a100() GPU {
	pl := func(size int, starts ...int) []Placement {
		var out []Placement
		for _, s := range starts {
			out = append(out, Placement{s, size})
		}
		return out
	}
	return GPU{Address: "0000:41:00.0", Capable: true, Enabled: true, Pending: true, ComputeSlices: 7, MemorySlices: 8, Profiles: []Profile{
		{Name: "1g.10gb", ID: 19, Index: Profile1Slice, ComputeSlices: 1, MemorySlices: 1, Max: 7, Placements: pl(1, 0, 1, 2, 3, 4, 5, 6)},
		{Name: "2g.20gb", ID: 14, Index: Profile2Slice, ComputeSlices: 2, MemorySlices: 2, Max: 3, Placements: pl(2, 0, 2, 4)},
		{Name: "3g.40gb", ID: 9, Index: Profile3Slice, ComputeSlices: 3, MemorySlices: 4, Max: 2, Placements: pl(4, 0, 4)},
		{Name: "4g.40gb", ID: 5, Index: Profile4Slice, ComputeSlices: 4, MemorySlices: 4, Max: 1, Placements: pl(4, 0)},
		{Name: "7g.80gb", ID: 0, Index: Profile7Slice, ComputeSlices: 7, MemorySlices: 8, Max: 1, Placements: pl(8, 0)},
	}}
}

func TestFit(t *testing.T) {
	g := a100()
	// Needs backtracking: biggest-first lowest-first puts 3g at 0-3, then 2g at 4-5, and the
	// two 1g find only slice 6; the search moves the 3g to 4-7.
	pls, err := Fit(g, []string{"1g.10gb", "2g.20gb", "1g.10gb", "3g.40gb"})
	if err != nil {
		t.Fatal(err)
	}
	var used uint64
	for i, p := range pls {
		if used&p.mask() != 0 {
			t.Fatalf("placement %d (%v) overlaps: %v", i, p, pls)
		}
		used |= p.mask()
	}
	if pls[3] != (Placement{4, 4}) {
		t.Errorf("3g.40gb at %v, want 4-7", pls[3])
	}
	// Kept instances count: a 4g.40gb at 0-3 leaves room for one 3g.40gb only.
	g.Instances = []Instance{{ID: 1, Profile: "4g.40gb", Placement: Placement{0, 4}}}
	if _, err := Fit(g, []string{"3g.40gb", "3g.40gb"}); err == nil || !errors.Is(err, host.ErrBusy) ||
		!strings.Contains(err.Error(), "3g.40gb needs slices 0-3 or 4-7; 4g.40gb holds 0-3, 3g.40gb holds 4-7") {
		t.Errorf("Fit 2× 3g.40gb next to a 4g.40gb: %v", err)
	}
	if _, err := FitWith(g, nil, []string{"3g.40gb", "3g.40gb"}); err != nil {
		t.Errorf("without keeping the 4g.40gb: %v", err)
	}
	if _, err := Fit(g, []string{"1g.10gb", "1g.10gb", "1g.10gb"}); err != nil {
		t.Errorf("3× 1g.10gb beside a 4g.40gb: %v", err)
	}
	if _, err := Fit(g, []string{"1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb"}); err == nil {
		t.Error("4× 1g.10gb fit beside a 4g.40gb (slice 7 takes none)")
	}
	if _, err := Fit(g, []string{"1g.5gb"}); !errors.Is(err, host.ErrNotFound) || !strings.Contains(err.Error(), "did you mean 1g.10gb") {
		t.Errorf("unknown profile: %v", err)
	}
	if p, err := g.LookupProfile("1C.1G.10GB"); err != nil || p.Name != "1g.10gb" {
		t.Errorf("LookupProfile with a c. prefix: %v %v", p, err)
	}
}

func TestPlanKeepsWhatStillFits(t *testing.T) {
	g := a100()
	// Two 3g.40gb; wanted: one 3g.40gb, a 2g.20gb and two 1g.10gb. Keeping the 3g at 4-7 leaves
	// 0-3 for 2g + 1g + 1g; keeping the one at 0-3 leaves 4-7, where the second 1g finds no
	// slice (7 takes none). Plan must keep the one that works and destroy the other.
	g.Instances = []Instance{{ID: 1, Profile: "3g.40gb", Placement: Placement{0, 4}}, {ID: 2, Profile: "3g.40gb", Placement: Placement{4, 4}}}
	c, err := Plan(State{GPUs: []GPU{g}}, map[string][]string{"41:00.0": {"3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Kept) != 1 || c.Kept[0].ID != 2 {
		t.Fatalf("kept %v, want instance 2 (3g.40gb at 4-7)", c.Kept)
	}
	var ops []string
	for _, s := range c.Steps {
		ops = append(ops, s.String())
	}
	if len(c.Steps) != 4 || c.Steps[0].Op != OpDestroy || c.Steps[0].Instance != 1 {
		t.Errorf("steps: %s", strings.Join(ops, "; "))
	}
	if _, err := Plan(State{GPUs: []GPU{g}}, map[string][]string{"0000:99:00.0": {"1g.10gb"}}); !errors.Is(err, host.ErrNotFound) {
		t.Errorf("unknown GPU: %v", err)
	}
	if _, err := Plan(State{GPUs: []GPU{g}}, map[string][]string{"0000:41:00.0": {"1g.10gb"}, "41:00.0": {}}); !errors.Is(err, host.ErrInvalid) {
		t.Errorf("one GPU named twice: %v", err)
	}
}

// The documented geometry agrees with what NVML (go-nvml's A100 mock, mig/nvmlmig's tests)
// reports: same placements for the same shapes.
func TestDocumentedGPU(t *testing.T) {
	g, err := DocumentedGPU("0000:41:00.0", 7, []string{"1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", "1g.10gb+me"})
	if err != nil {
		t.Fatal(err)
	}
	want := a100()
	for _, wp := range want.Profiles {
		p, err := g.LookupProfile(wp.Name)
		if err != nil || p.Max != wp.Max || len(p.Placements) != len(wp.Placements) {
			t.Errorf("%s: %+v, %v; want %+v", wp.Name, p, err, wp)
			continue
		}
		for i := range p.Placements {
			if p.Placements[i] != wp.Placements[i] {
				t.Errorf("%s placement %d: %v, want %v", wp.Name, i, p.Placements[i], wp.Placements[i])
			}
		}
	}
	if p, _ := g.LookupProfile("1g.20gb"); len(p.Placements) != 4 || p.Placements[3] != (Placement{6, 2}) {
		t.Errorf("1g.20gb placements %v, want 0, 2, 4, 6 (two slices each)", p.Placements)
	}
	if n, _ := Capacity(g, "3g.40gb", nil); n != 2 {
		t.Errorf("3g.40gb capacity %d, want 2", n)
	}
	if n, err := Capacity(g, "3g.40gb", []string{"4g.40gb", "3g.40gb"}); n != 0 || err == nil {
		t.Errorf("3g.40gb capacity beside 4g + 3g: %d, %v; want 0 with a reason", n, err)
	}
	if n, _ := Capacity(g, "1g.10gb", []string{"3g.40gb"}); n != 4 {
		t.Errorf("1g.10gb capacity beside a 3g.40gb: %d, want 4", n)
	}
}
