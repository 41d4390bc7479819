package mocknvml

import (
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
)

// ResetRequired makes d (a device of the DGXA100 mock) behave as a GPU whose MIG mode change
// waits for a GPU reset the driver cannot make, as in a VM with the GPU passed through
// (nvmlDeviceSetMigMode: "On certain platforms like pass-through virtualization, where reset
// functionality may not be exposed directly, VM reboot is required. activationStatus would
// return NVML_ERROR_RESET_REQUIRED for such cases"): SetMigMode records the mode as pending
// and answers activation ERROR_RESET_REQUIRED; GetMigMode answers the current and the
// pending mode. go-nvml's own mock has no pending mode (it answers the one mode twice).
//
// It returns reset, which does what a GPU reset or a reboot does: the pending mode becomes
// current, and every GPU instance is gone.
func ResetRequired(d *dgxa100.Device) (reset func()) {
	pending := d.MigMode
	d.SetMigModeFunc = func(mode int) (nvml.Return, nvml.Return) {
		if mode != nvml.DEVICE_MIG_ENABLE && mode != nvml.DEVICE_MIG_DISABLE {
			return nvml.ERROR_INVALID_ARGUMENT, nvml.ERROR_INVALID_ARGUMENT
		}
		pending = mode
		if mode == d.MigMode {
			return nvml.SUCCESS, nvml.SUCCESS // the current mode again: nothing pending
		}
		return nvml.SUCCESS, nvml.ERROR_RESET_REQUIRED
	}
	d.GetMigModeFunc = func() (int, int, nvml.Return) {
		return d.MigMode, pending, nvml.SUCCESS
	}
	return func() {
		d.MigMode = pending
		d.GpuInstances = map[*dgxa100.GpuInstance]struct{}{}
	}
}
