package mig

import "errors"

// ErrNoNVML says NVML could not be loaded (no NVIDIA driver, so no libnvidia-ml.so.1). Errors
// wrapping it also wrap host.ErrUnsupported (exit code 7).
var ErrNoNVML = errors.New("NVML not available")

// ErrModePending says a GPU's MIG mode was set but takes effect only after a GPU reset or a
// reboot (NVML's current and pending modes differ; nvmlDeviceSetMigMode's activation status
// was NVML_ERROR_RESET_REQUIRED, or NVML_ERROR_IN_USE while something held the GPU). Errors
// wrapping it also wrap host.ErrBusy (exit code 5) and say what to do: docs/reconcile.md.
var ErrModePending = errors.New("MIG mode change pending a GPU reset")
