package layout

import (
	"context"
	"errors"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/mig/nvmlmig"
	"github.com/vgpu-host/vgpu-host/mig/nvmlmig/mocknvml"
)

const migLayout = `apiVersion: vgpu-host/v1
kind: HostLayout
configs:
  split:
    default: true
    gpus:
      - select: {address: "0000:00:00.0"}
        mode: mig
        profiles: [{profile: 1g.5gb, count: 7}]
      - select: {address: "0000:01:00.0"}
        mode: mig
        profiles: [{profile: 3g.20gb, count: 1}, {profile: 4g.20gb, count: 1}]
  switched:
    gpus:
      - select: {address: "0000:00:00.0"}
        mode: mig
        profiles: [{profile: 1g.5gb, count: 7}]
      - select: {address: "0000:01:00.0"}
        mode: mig
        profiles: [{profile: 4g.20gb, count: 1}, {profile: 2g.10gb, count: 1}, {profile: 1g.5gb, count: 1}]
  impossible:
    gpus:
      - select: {address: "0000:01:00.0"}
        mode: mig
        profiles: [{profile: 4g.20gb, count: 2}]
`

// migInstances lists each GPU's GPU instances as NVML itself reports them (profile id@start),
// not as our own bookkeeping says.
func migInstances(t *testing.T, lib nvml.Interface) map[int][]string {
	t.Helper()
	out := map[int][]string{}
	n, _ := lib.DeviceGetCount()
	for i := 0; i < n; i++ {
		d, _ := lib.DeviceGetHandleByIndex(i)
		for _, pid := range []int{nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.GPU_INSTANCE_PROFILE_2_SLICE, nvml.GPU_INSTANCE_PROFILE_3_SLICE, nvml.GPU_INSTANCE_PROFILE_4_SLICE, nvml.GPU_INSTANCE_PROFILE_7_SLICE} {
			info, ret := d.GetGpuInstanceProfileInfo(pid)
			if ret != nvml.SUCCESS {
				continue
			}
			gis, _ := d.GetGpuInstances(&info)
			for _, gi := range gis {
				gii, _ := gi.GetInfo()
				out[i] = append(out[i], strings.Join([]string{string(rune('0' + info.SliceCount)), "@", string(rune('0' + gii.Placement.Start))}, ""))
			}
		}
		sort.Strings(out[i])
	}
	return out
}

// TestLayoutMIG: a host layout's mig entries, planned and applied through package mig over
// go-nvml's own dgxa100 mock (eight A100-SXM4-40GB; the 80 GB shapes with this card's
// names): 7 × 1g.5gb on GPU 0 and 3g.20gb + 4g.20gb on GPU 1 are created exactly; a second plan
// is empty; switching configurations destroys only GPU 1's 3g.20gb; an impossible combination
// is refused by plan with the reason, before any change.
func TestLayoutMIG(t *testing.T) {
	tr := hosttest.New(t)
	tr.DatacenterGPU("0000:00:01.0", "0000:00:00.0", "nvidia", 0)
	tr.DatacenterGPU("0000:00:02.0", "0000:01:00.0", "nvidia", 0)
	k := hosttest.NewKernel(tr)
	h := hostOn(tr.Root, k)
	lib := mocknvml.DGXA100()
	b := nvmlmig.New(lib)
	h.MIG, h.MIGPlanner = b, NVMLPlanner{}
	f := mustParse(t, migLayout)
	ctx := context.Background()

	p, err := PlanConfig(ctx, h, f, "split", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := actions(p); !slices.Contains(got, "mig 0000:00:00.0, 0000:01:00.0") {
		t.Fatalf("plan: %v", got)
	}
	if _, err := ApplyConfig(ctx, h, f, "split", "mig.yaml", []byte(migLayout), ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	got := migInstances(t, lib)
	if strings.Join(got[0], ",") != "1@0,1@1,1@2,1@3,1@4,1@5,1@6" || len(got[1]) != 2 || len(got) != 2 {
		t.Fatalf("NVML has %v; want 7 one-slice instances on GPU 0 and a 3- and a 4-slice one on GPU 1", got)
	}
	if p, err := PlanConfig(ctx, h, f, "split", nil); err != nil || len(p.Changes) != 0 {
		t.Fatalf("re-plan: %v %v", actions(p), err)
	}

	before := migInstances(t, lib)
	t.Logf("after split: %v", before)
	if _, err := ApplyConfig(ctx, h, f, "switched", "mig.yaml", []byte(migLayout), ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	after := migInstances(t, lib)
	t.Logf("after switch: %v", after)
	if strings.Join(after[0], ",") != strings.Join(before[0], ",") {
		t.Errorf("GPU 0 changed: %v -> %v", before[0], after[0])
	}
	kept4 := slices.ContainsFunc(before[1], func(s string) bool { return strings.HasPrefix(s, "4@") }) &&
		slices.ContainsFunc(after[1], func(s string) bool { return strings.HasPrefix(s, "4@") })
	if !kept4 || len(after[1]) != 3 {
		t.Errorf("GPU 1: %v -> %v; want the 4-slice instance kept and a 2g and a 1g added", before[1], after[1])
	}

	snapshot := migInstances(t, lib)
	_, err = PlanConfig(ctx, h, f, "impossible", nil)
	if err == nil || !strings.Contains(err.Error(), "4g.20gb") {
		t.Fatalf("impossible plan: %v", err)
	}
	if errors.Is(err, host.ErrUnsupported) {
		t.Errorf("a combination that does not fit is not 'unsupported': %v", err)
	}
	if now := migInstances(t, lib); strings.Join(now[1], ",") != strings.Join(snapshot[1], ",") {
		t.Errorf("a refused plan changed NVML: %v -> %v", snapshot[1], now[1])
	}
}
