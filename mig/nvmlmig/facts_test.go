package nvmlmig

import (
	"context"
	"reflect"
	"sync/atomic"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// countingLib is an nvml.Interface whose devices count the profile calls State makes.
type countingLib struct {
	nvml.Interface
	infos, placements *atomic.Int32
}

func (l countingLib) DeviceGetHandleByIndex(i int) (nvml.Device, nvml.Return) {
	d, ret := l.Interface.DeviceGetHandleByIndex(i)
	return countingDevice{Device: d, l: l}, ret
}

type countingDevice struct {
	nvml.Device
	l countingLib
}

func (d countingDevice) GetGpuInstanceProfileInfo(i int) (nvml.GpuInstanceProfileInfo, nvml.Return) {
	d.l.infos.Add(1)
	return d.Device.GetGpuInstanceProfileInfo(i)
}

func (d countingDevice) GetGpuInstancePossiblePlacements(info *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstancePlacement, nvml.Return) {
	d.l.placements.Add(1)
	return d.Device.GetGpuInstancePossiblePlacements(info)
}

// On the real H200's replayed answers: State reads the profiles' info and placements once per
// GPU and MIG mode, and answers the same as a backend reading them every time; a MIG mode
// change (and its instances) reads them again, and the state after it is what a fresh backend
// reads.
func TestProfileFactsReadOnce(t *testing.T) {
	t.Parallel()
	s, _ := replay(t, "nvidia-h200")
	var infos, placements atomic.Int32
	b := New(countingLib{Interface: s, infos: &infos, placements: &placements})
	ctx := context.Background()
	first, err := b.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	i1, p1 := infos.Load(), placements.Load()
	if i1 != nvml.GPU_INSTANCE_PROFILE_COUNT || p1 != 7 {
		t.Fatalf("first State: %d profile infos, %d placements, want every index (%d) and the H200's 7 profiles", i1, p1, nvml.GPU_INSTANCE_PROFILE_COUNT)
	}
	second, err := b.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if infos.Load() != i1 || placements.Load() != p1 {
		t.Errorf("second State read the profiles again: %d infos, %d placements", infos.Load()-i1, placements.Load()-p1)
	}
	if !reflect.DeepEqual(first, second) {
		t.Errorf("second State differs:\n%+v\n%+v", first, second)
	}
	if err := b.SetMode(ctx, "0000:00:06.0", true); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Create(ctx, "0000:00:06.0", "3g.71gb", 0); err != nil {
		t.Fatal(err)
	}
	on, err := b.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if infos.Load() == i1 {
		t.Error("State after the MIG mode change did not read the profiles again")
	}
	fresh, err := New(s).State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !on.GPUs[0].Enabled || len(on.GPUs[0].Instances) != 1 || !reflect.DeepEqual(on, fresh) {
		t.Errorf("State after enable and create:\n%+v\na fresh backend's:\n%+v", on, fresh)
	}
}
