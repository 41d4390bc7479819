package mig

import "errors"

// ErrNoNVML says NVML could not be loaded (no NVIDIA driver, so no libnvidia-ml.so.1). Errors
// wrapping it also wrap host.ErrUnsupported (exit code 7).
var ErrNoNVML = errors.New("NVML not available")
