package nvmlmig

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/mig"
	"github.com/vgpu-host/vgpu-host/mig/nvmlmig/mocknvml"
)

func newDGXA100(t *testing.T) *dgxa100.Server {
	t.Helper()
	s := mocknvml.DGXA100()
	if err := Init(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// nvmlInstances reads the GPU instances of device i straight from the mock's NVML state (not
// through Backend): "profile@start" sorted, and id by "profile@start".
func nvmlInstances(t *testing.T, s *dgxa100.Server, i int) ([]string, map[string]uint32) {
	t.Helper()
	d := s.Devices[i].(*dgxa100.Device)
	var out []string
	ids := map[string]uint32{}
	for gi := range d.GpuInstances {
		index, ok := mocknvml.ProfileIndex(gi.Info.ProfileId) // NVML records the profile's ID, not its index
		if !ok {
			t.Fatalf("GPU %d: GPU instance %d has profile ID %d, which no profile has", i, gi.Info.Id, gi.Info.ProfileId)
		}
		info, _ := d.GetGpuInstanceProfileInfo(index)
		mem, _ := d.GetMemoryInfo()
		name, err := mig.ProfileName(index, info.MemorySizeMB, mem.Total)
		if err != nil {
			t.Fatal(err)
		}
		if len(gi.ComputeInstances) != 1 {
			t.Errorf("GPU %d: GPU instance %d (%s) has %d compute instances, want 1", i, gi.Info.Id, name, len(gi.ComputeInstances))
		}
		k := fmt.Sprintf("%s@%d", name, gi.Info.Placement.Start)
		out = append(out, k)
		ids[k] = gi.Info.Id
	}
	sort.Strings(out)
	return out, ids
}

func bus(i int) string { return fmt.Sprintf("0000:%02x:00.0", i) }

func apply(t *testing.T, b mig.Backend, want map[string][]string) mig.Changes {
	t.Helper()
	ctx := context.Background()
	st, err := b.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c, err := mig.Plan(st, want)
	if err != nil {
		t.Fatalf("plan %v: %v", want, err)
	}
	if err := mig.Apply(ctx, b, c); err != nil {
		t.Fatalf("apply %v: %v", want, err)
	}
	return c
}

func TestProfileIDsMatchNVML(t *testing.T) {
	pairs := map[int]int{
		mig.Profile1Slice: nvml.GPU_INSTANCE_PROFILE_1_SLICE, mig.Profile2Slice: nvml.GPU_INSTANCE_PROFILE_2_SLICE,
		mig.Profile3Slice: nvml.GPU_INSTANCE_PROFILE_3_SLICE, mig.Profile4Slice: nvml.GPU_INSTANCE_PROFILE_4_SLICE,
		mig.Profile7Slice: nvml.GPU_INSTANCE_PROFILE_7_SLICE, mig.Profile8Slice: nvml.GPU_INSTANCE_PROFILE_8_SLICE,
		mig.Profile6Slice: nvml.GPU_INSTANCE_PROFILE_6_SLICE, mig.Profile1SliceRev1: nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1,
		mig.Profile2SliceRev1: nvml.GPU_INSTANCE_PROFILE_2_SLICE_REV1, mig.Profile1SliceRev2: nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2,
		mig.Profile1SliceGfx: nvml.GPU_INSTANCE_PROFILE_1_SLICE_GFX, mig.Profile2SliceGfx: nvml.GPU_INSTANCE_PROFILE_2_SLICE_GFX,
		mig.Profile4SliceGfx: nvml.GPU_INSTANCE_PROFILE_4_SLICE_GFX, mig.Profile1SliceNoME: nvml.GPU_INSTANCE_PROFILE_1_SLICE_NO_ME,
		mig.Profile2SliceNoME: nvml.GPU_INSTANCE_PROFILE_2_SLICE_NO_ME, mig.Profile1SliceAllME: nvml.GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME,
		mig.Profile2SliceAllME: nvml.GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME, mig.ProfileCount: nvml.GPU_INSTANCE_PROFILE_COUNT,
	}
	for ours, theirs := range pairs {
		if ours != theirs {
			t.Errorf("mig profile id %d, NVML's is %d", ours, theirs)
		}
	}
}

// The mock's profiles carry the names and IDs nvidia-smi gives an A100-SXM4-40GB (the IDs as
// on real GPUs: go-nvml's mock alone reports each profile's index as its ID).
func TestStateNamesTheMockProfiles(t *testing.T) {
	s := newDGXA100(t)
	st, err := New(s).State(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(st.GPUs) != 8 {
		t.Fatalf("%d GPUs, want 8", len(st.GPUs))
	}
	g := st.GPUs[1]
	if g.Address != "0000:01:00.0" || !g.Capable || g.Enabled || g.MemorySlices != 8 || g.ComputeSlices != 7 {
		t.Fatalf("GPU 1 = %+v", g)
	}
	var names []string
	for _, p := range g.Profiles {
		names = append(names, fmt.Sprintf("%s(id %d, max %d)", p.Name, p.ID, p.Max))
	}
	got := strings.Join(names, " ")
	want := "1g.5gb(id 19, max 7) 1g.5gb+me(id 20, max 1) 1g.10gb(id 15, max 4) 2g.10gb(id 14, max 3) 3g.20gb(id 9, max 2) 4g.20gb(id 5, max 1) 7g.40gb(id 0, max 1)"
	if got != want {
		t.Errorf("profiles:\n got %s\nwant %s", got, want)
	}
}

// The judged case, in the mock's (A100-40GB) names: 1g.5gb × 7 on GPU 0 and 3g.20gb +
// 4g.20gb on GPU 1 creates exactly those instances; applying again changes nothing; switching
// to another configuration destroys only what must go; an impossible one is refused before
// any change.
func TestDGXA100Layouts(t *testing.T) {
	s := newDGXA100(t)
	b := New(s)
	ctx := context.Background()
	first := map[string][]string{
		bus(0): {"1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb"},
		bus(1): {"3g.20gb", "4g.20gb"},
	}
	c := apply(t, b, first)
	if n := len(c.Steps); n != 2+7+2 {
		t.Errorf("first apply took %d steps, want 2 enables + 9 creates: %v", n, c.Steps)
	}
	got0, _ := nvmlInstances(t, s, 0)
	if w := "1g.5gb@0 1g.5gb@1 1g.5gb@2 1g.5gb@3 1g.5gb@4 1g.5gb@5 1g.5gb@6"; strings.Join(got0, " ") != w {
		t.Errorf("GPU 0 holds %v, want %s", got0, w)
	}
	got1, ids1 := nvmlInstances(t, s, 1)
	if w := "3g.20gb@4 4g.20gb@0"; strings.Join(got1, " ") != w {
		t.Errorf("GPU 1 holds %v, want %s", got1, w)
	}
	for i := 0; i < 2; i++ {
		if s.Devices[i].(*dgxa100.Device).MigMode != nvml.DEVICE_MIG_ENABLE {
			t.Errorf("GPU %d: MIG mode not enabled in NVML", i)
		}
	}
	if d := s.Devices[2].(*dgxa100.Device); d.MigMode != 0 || len(d.GpuInstances) != 0 {
		t.Errorf("GPU 2 (not named) was changed: mode %d, %d instances", d.MigMode, len(d.GpuInstances))
	}

	// Again: nothing to do.
	st, _ := b.State(ctx)
	again, err := mig.Plan(st, first)
	if err != nil || !again.Empty() || len(again.Kept) != 9 {
		t.Fatalf("re-plan: %v, %d steps %v, %d kept", err, len(again.Steps), again.Steps, len(again.Kept))
	}
	counter := s.Devices[1].(*dgxa100.Device).GpuInstanceCounter
	if err := mig.Apply(ctx, b, again); err != nil {
		t.Fatal(err)
	}
	if after := s.Devices[1].(*dgxa100.Device).GpuInstanceCounter; after != counter {
		t.Errorf("re-apply created instances (counter %d → %d)", counter, after)
	}

	// Switch: GPU 1 keeps its 4g.20gb and trades the 3g.20gb for 2g.10gb + 1g.5gb (a second
	// 1g.5gb would not fit: slice 7 takes no 1g instance);
	// GPU 0 keeps 4 of its 1g.5gb and gets a 3g.20gb where three of them were.
	second := map[string][]string{
		bus(0): {"3g.20gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb"},
		bus(1): {"4g.20gb", "2g.10gb", "1g.5gb"},
	}
	_, ids0 := nvmlInstances(t, s, 0)
	c = apply(t, b, second)
	var destroyed []string
	for _, st := range c.Steps {
		if st.Op == mig.OpDestroy {
			destroyed = append(destroyed, fmt.Sprintf("%s %s@%d", st.GPU, st.Profile, st.Placement.Start))
		}
	}
	sort.Strings(destroyed)
	wantDestroyed := "0000:00:00.0 1g.5gb@4 0000:00:00.0 1g.5gb@5 0000:00:00.0 1g.5gb@6 0000:01:00.0 3g.20gb@4"
	if strings.Join(destroyed, " ") != wantDestroyed {
		t.Errorf("switch destroyed %v, want %s", destroyed, wantDestroyed)
	}
	got0, nids0 := nvmlInstances(t, s, 0)
	if w := "1g.5gb@0 1g.5gb@1 1g.5gb@2 1g.5gb@3 3g.20gb@4"; strings.Join(got0, " ") != w {
		t.Errorf("GPU 0 holds %v, want %s", got0, w)
	}
	for _, k := range []string{"1g.5gb@0", "1g.5gb@1", "1g.5gb@2", "1g.5gb@3"} {
		if nids0[k] != ids0[k] {
			t.Errorf("GPU 0 %s: instance id %d → %d (it should have been kept)", k, ids0[k], nids0[k])
		}
	}
	got1, nids1 := nvmlInstances(t, s, 1)
	if w := "1g.5gb@6 2g.10gb@4 4g.20gb@0"; strings.Join(got1, " ") != w {
		t.Errorf("GPU 1 holds %v, want %s", got1, w)
	}
	if nids1["4g.20gb@0"] != ids1["4g.20gb@0"] {
		t.Errorf("GPU 1: the 4g.20gb was not kept (id %d → %d)", ids1["4g.20gb@0"], nids1["4g.20gb@0"])
	}

	// Impossible: refused by Plan with the reason, NVML untouched.
	st, _ = b.State(ctx)
	before := fmt.Sprint(nvmlInstances(t, s, 2))
	for _, tc := range []struct {
		want []string
		msg  string
	}{
		{[]string{"4g.20gb", "4g.20gb"}, "2× 4g.20gb do not fit: it holds at most 1"},
		{[]string{"1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb"}, "8× 1g.5gb do not fit: it holds at most 7"},
		{[]string{"4g.20gb", "3g.20gb", "3g.20gb"}, "3g.20gb does not fit: 3g.20gb needs slices 0-3 or 4-7; 4g.20gb holds 0-3, 3g.20gb holds 4-7"},
		{[]string{"3g.40gb"}, `MIG profile "3g.40gb"`},
	} {
		_, err := mig.Plan(st, map[string][]string{bus(2): tc.want, bus(3): {"7g.40gb"}})
		if err == nil || !strings.Contains(err.Error(), tc.msg) || !strings.Contains(err.Error(), bus(2)) {
			t.Errorf("plan %v: %v, want an error containing %q naming %s", tc.want, err, tc.msg, bus(2))
		}
	}
	if after := fmt.Sprint(nvmlInstances(t, s, 2)); after != before || len(s.Devices[3].(*dgxa100.Device).GpuInstances) != 0 {
		t.Errorf("a refused plan changed NVML state")
	}
	_, err = mig.Plan(st, map[string][]string{bus(2): {"3g.40gb"}})
	if !errors.Is(err, host.ErrNotFound) || !strings.Contains(err.Error(), "did you mean 3g.20gb") {
		t.Errorf("unknown profile: %v, want not found with a did-you-mean", err)
	}

	// Back to empty: everything destroyed, mode left on unless asked.
	st, _ = b.State(ctx)
	c, err = mig.PlanWith(st, map[string][]string{bus(0): {}, bus(1): {}}, mig.PlanOptions{DisableWhenEmpty: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := mig.Apply(ctx, b, c); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		d := s.Devices[i].(*dgxa100.Device)
		if len(d.GpuInstances) != 0 || d.MigMode != nvml.DEVICE_MIG_DISABLE {
			t.Errorf("GPU %d after clearing: %d instances, mode %d", i, len(d.GpuInstances), d.MigMode)
		}
	}
}

// A create that fails half-way: Apply stops, says what was done and destroys what it created.
func TestApplyUndoesItsCreates(t *testing.T) {
	s := newDGXA100(t)
	b := New(s)
	d := s.Devices[0].(*dgxa100.Device)
	orig := d.CreateGpuInstanceWithPlacementFunc
	calls := 0
	d.CreateGpuInstanceWithPlacementFunc = func(info *nvml.GpuInstanceProfileInfo, pl *nvml.GpuInstancePlacement) (nvml.GpuInstance, nvml.Return) {
		calls++
		if calls == 3 {
			return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
		}
		return orig(info, pl)
	}
	st, _ := b.State(context.Background())
	c, err := mig.Plan(st, map[string][]string{bus(0): {"2g.10gb", "2g.10gb", "2g.10gb"}})
	if err != nil {
		t.Fatal(err)
	}
	err = mig.Apply(context.Background(), b, c)
	if !errors.Is(err, host.ErrBusy) || !strings.Contains(err.Error(), "step 4 of 4") || !strings.Contains(err.Error(), "enable MIG mode on 0000:00:00.0") {
		t.Fatalf("apply: %v", err)
	}
	if len(d.GpuInstances) != 0 {
		t.Errorf("%d GPU instances left after the failed apply, want 0 (undone)", len(d.GpuInstances))
	}
}

// mig.DocumentedGPU (what placement uses when NVML cannot be asked) gives the same placements
// and limits as NVML reports for the same profiles.
func TestDocumentedGeometryMatchesNVML(t *testing.T) {
	st, err := New(newDGXA100(t)).State(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	documentedAsNVML(t, st.GPUs[0])
}

// documentedAsNVML checks that mig.DocumentedGPU, for g's address and profile names, gives
// g's slices and, per profile, NVML's limit, placements and slices.
func documentedAsNVML(t *testing.T, g mig.GPU) {
	t.Helper()
	var names []string
	for _, p := range g.Profiles {
		names = append(names, p.Name)
	}
	doc, err := mig.DocumentedGPU(g.Address, 7, names)
	if err != nil {
		t.Fatal(err)
	}
	if doc.MemorySlices != g.MemorySlices || doc.ComputeSlices != g.ComputeSlices {
		t.Errorf("slices: documented %d/%d, NVML %d/%d", doc.ComputeSlices, doc.MemorySlices, g.ComputeSlices, g.MemorySlices)
	}
	for _, p := range g.Profiles {
		d, err := doc.LookupProfile(p.Name)
		if err != nil {
			t.Fatal(err)
		}
		if d.Max != p.Max || fmt.Sprint(d.Placements) != fmt.Sprint(p.Placements) || d.MemorySlices != p.MemorySlices || d.ComputeSlices != p.ComputeSlices {
			t.Errorf("%s: documented max %d at %v; NVML max %d at %v", p.Name, d.Max, d.Placements, p.Max, p.Placements)
		}
	}
}
