package nvmlmig

import (
	"context"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// The cost of the backend's State on a real GPU's driver, and of the NVML calls it makes, one
// benchmark each (EnvRealNVML=1, on a host with an NVIDIA GPU; read-only):
//
//	VGPU_TEST_REAL_NVML=1 ./nvmlmig.test -test.run '^$' -test.bench RealNVML -test.benchtime 50x
//
// It says where `mig show` spends its time once the helper has started (13 ms through the
// agent on a real H200, of which about 3 ms is the agent's round trip).
func BenchmarkRealNVML(b *testing.B) {
	lib := realLib(b)
	dev, ret := lib.DeviceGetHandleByIndex(0)
	if ret != nvml.SUCCESS {
		b.Fatal(ret)
	}
	var infos []nvml.GpuInstanceProfileInfo
	for i := 0; i < nvml.GPU_INSTANCE_PROFILE_COUNT; i++ {
		if info, ret := dev.GetGpuInstanceProfileInfo(i); ret == nvml.SUCCESS {
			infos = append(infos, info)
		}
	}
	b.Run("State", func(b *testing.B) {
		be := New(lib)
		for b.Loop() {
			if _, err := be.State(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("DeviceGetCount+Handle+PciInfo+UUID+Name+MigMode+Memory", func(b *testing.B) {
		for b.Loop() {
			lib.DeviceGetCount()
			d, _ := lib.DeviceGetHandleByIndex(0)
			d.GetPciInfo()
			d.GetUUID()
			d.GetName()
			d.GetMigMode()
			d.GetMemoryInfo()
		}
	})
	b.Run("GetGpuInstanceProfileInfo-every-index", func(b *testing.B) {
		for b.Loop() {
			for i := 0; i < nvml.GPU_INSTANCE_PROFILE_COUNT; i++ {
				dev.GetGpuInstanceProfileInfo(i)
			}
		}
	})
	b.Run("GetGpuInstancePossiblePlacements-every-profile", func(b *testing.B) {
		for b.Loop() {
			for k := range infos {
				dev.GetGpuInstancePossiblePlacements(&infos[k])
			}
		}
	})
	b.Run("GetGpuInstanceRemainingCapacity-every-profile", func(b *testing.B) {
		for b.Loop() {
			for k := range infos {
				dev.GetGpuInstanceRemainingCapacity(&infos[k])
			}
		}
	})
}
