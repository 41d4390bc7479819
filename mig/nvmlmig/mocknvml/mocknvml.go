// Package mocknvml holds go-nvml's DGX A100 mock as vgpu-host's tests and the test build of
// the NVML helper (build tag nvmlmock) use it; release binaries do not link it. DGXA100 is
// go-nvml's own mock (pkg/nvml/mock/dgxa100: eight A100-SXM4-40GB), corrected where it differs
// from real GPUs: it reports each profile's ID equal to its index, where real GPUs report the
// IDs nvidia-smi prints (ProfileIDs), and it creates instances anywhere, where NVML keeps to the
// profile's placements. The reference it answers to is a capture of a real GPU, replayed by
// package mig/nvmlmig/nvmlfacts (which, touching no GPU, is in release builds too).
package mocknvml

import (
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
)

// ProfileIDs maps NVML's GPU-instance profile index (nvml.GPU_INSTANCE_PROFILE_*) to the
// profile ID real A100, H100 and H200 GPUs report for it (GpuInstanceProfileInfo.Id, the ID
// column of nvidia-smi mig -lgip): index 0 (1g.5gb on an A100-40GB, 1g.18gb on an H200) is ID
// 19. Taken from the H200 capture; mig/nvmlmig's tests check it against that capture.
var ProfileIDs = map[int]uint32{
	nvml.GPU_INSTANCE_PROFILE_1_SLICE:      19,
	nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1: 20,
	nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2: 15,
	nvml.GPU_INSTANCE_PROFILE_2_SLICE:      14,
	nvml.GPU_INSTANCE_PROFILE_3_SLICE:      9,
	nvml.GPU_INSTANCE_PROFILE_4_SLICE:      5,
	nvml.GPU_INSTANCE_PROFILE_7_SLICE:      0,
}

// ProfileIndex is the profile index whose ID (ProfileIDs) is id.
func ProfileIndex(id uint32) (int, bool) {
	for index, pid := range ProfileIDs {
		if pid == id {
			return index, true
		}
	}
	return 0, false
}

// DGXA100 returns go-nvml's dgxa100 mock corrected to answer as real GPUs do:
//
//   - GetPciInfo reports each device's bus id (the mock fills in only the PCI device id), in
//     NVML's own form: an 8-digit domain, upper-case hex ("00000000:01:00.0");
//   - GetGpuInstanceProfileInfo(index) reports the real profile ID (ProfileIDs), not the
//     index, and everything keyed by a profile's ID (placements, instances, compute-instance
//     profiles) follows it;
//   - CreateGpuInstanceWithPlacement keeps NVIDIA's rules: MIG mode on, one of the profile's
//     placements, not over another instance's slices, at most InstanceCount of a profile;
//   - EventSetCreate and RegisterEvents answer (every GPU offers Xid critical errors, as an
//     A100 does) and the event set delivers nothing: nvmlEventSetWait waits out its timeout, so
//     the agent's Xid watch idles on the mock instead of crashing its helper. Tests that want
//     events set EventSetCreateFunc themselves.
func DGXA100() *dgxa100.Server {
	s := dgxa100.New()
	s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		return &mock.EventSet{
			WaitFunc: func(ms uint32) (nvml.EventData, nvml.Return) {
				time.Sleep(time.Duration(ms) * time.Millisecond)
				return nvml.EventData{}, nvml.ERROR_TIMEOUT
			},
			FreeFunc: func() nvml.Return { return nvml.SUCCESS },
		}, nvml.SUCCESS
	}
	for _, d := range s.Devices {
		d := d.(*dgxa100.Device)
		d.RegisterEventsFunc = func(types uint64, _ nvml.EventSet) nvml.Return {
			if types&^nvml.EventTypeXidCriticalError != 0 {
				return nvml.ERROR_NOT_SUPPORTED
			}
			return nvml.SUCCESS
		}
		d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
			p := nvml.PciInfo{PciDeviceId: 0x20B010DE}
			copy(p.BusId[:], "0000"+strings.ToUpper(d.PciBusID))
			return p, nvml.SUCCESS
		}
		d.GetVirtualizationModeFunc = func() (nvml.GpuVirtualizationMode, nvml.Return) {
			return nvml.GPU_VIRTUALIZATION_MODE_NONE, nvml.SUCCESS // a DGX A100 runs on bare metal
		}
		realIDs(d)
	}
	return s
}

// realIDs makes d report real profile IDs and keep NVIDIA's placement rules.
func realIDs(d *dgxa100.Device) {
	byIndex := d.GetGpuInstanceProfileInfoFunc
	d.GetGpuInstanceProfileInfoFunc = func(index int) (nvml.GpuInstanceProfileInfo, nvml.Return) {
		info, ret := byIndex(index)
		if id, ok := ProfileIDs[index]; ret == nvml.SUCCESS && ok {
			info.Id = id
		}
		return info, ret
	}
	d.GetGpuInstancePossiblePlacementsFunc = func(info *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstancePlacement, nvml.Return) {
		index, ok := ProfileIndex(info.Id)
		if !ok {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		return dgxa100.MIGPlacements.GpuInstancePossiblePlacements[index], nvml.SUCCESS
	}
	create := d.CreateGpuInstanceWithPlacementFunc
	d.CreateGpuInstanceWithPlacementFunc = func(info *nvml.GpuInstanceProfileInfo, pl *nvml.GpuInstancePlacement) (nvml.GpuInstance, nvml.Return) {
		index, ok := ProfileIndex(info.Id)
		if !ok || pl == nil {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		if ret := placementRules(d, index, *info, *pl); ret != nvml.SUCCESS {
			return nil, ret
		}
		gi, ret := create(info, pl)
		if ret == nvml.SUCCESS {
			ciByIndex(gi.(*dgxa100.GpuInstance), index)
		}
		return gi, ret
	}
	d.CreateGpuInstanceFunc = func(info *nvml.GpuInstanceProfileInfo) (nvml.GpuInstance, nvml.Return) {
		pls, ret := d.GetGpuInstancePossiblePlacements(info)
		if ret != nvml.SUCCESS {
			return nil, ret
		}
		for _, pl := range pls {
			if gi, ret := d.CreateGpuInstanceWithPlacement(info, &pl); ret == nvml.SUCCESS {
				return gi, ret
			}
		}
		return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
	}
}

// placementRules is NVML's check before creating a GPU instance of profile index at pl.
func placementRules(d *dgxa100.Device, index int, info nvml.GpuInstanceProfileInfo, pl nvml.GpuInstancePlacement) nvml.Return {
	d.RLock()
	defer d.RUnlock()
	if d.MigMode != nvml.DEVICE_MIG_ENABLE {
		return nvml.ERROR_NOT_SUPPORTED
	}
	ok := false
	for _, c := range dgxa100.MIGPlacements.GpuInstancePossiblePlacements[index] {
		ok = ok || c == pl
	}
	if !ok {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	n := 0
	for gi := range d.GpuInstances {
		if gi.Info.ProfileId == info.Id {
			n++
		}
		o := gi.Info.Placement
		if o.Start < pl.Start+pl.Size && pl.Start < o.Start+o.Size {
			return nvml.ERROR_INSUFFICIENT_RESOURCES
		}
	}
	if n >= int(info.InstanceCount) {
		return nvml.ERROR_INSUFFICIENT_RESOURCES
	}
	return nvml.SUCCESS
}

// ciByIndex makes gi look its compute-instance profiles up by its GPU-instance profile index,
// as the mock's tables are keyed, while its info carries the real profile ID.
func ciByIndex(gi *dgxa100.GpuInstance, index int) {
	gi.GetComputeInstanceProfileInfoFunc = func(ci, eng int) (nvml.ComputeInstanceProfileInfo, nvml.Return) {
		if ci < 0 || ci >= nvml.COMPUTE_INSTANCE_PROFILE_COUNT {
			return nvml.ComputeInstanceProfileInfo{}, nvml.ERROR_INVALID_ARGUMENT
		}
		if eng != nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED {
			return nvml.ComputeInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
		}
		info, ok := dgxa100.MIGProfiles.ComputeInstanceProfiles[index][ci]
		if !ok {
			return nvml.ComputeInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
		}
		return info, nvml.SUCCESS
	}
}
