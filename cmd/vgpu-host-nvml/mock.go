//go:build nvmlmock

package main

import (
	"os"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/vgpu-host/vgpu-host/mig/nvmlmig/mocknvml"
)

// EnvMock selects a mock NVML in the test build (go build -tags nvmlmock): "dgxa100" serves
// go-nvml's DGX A100 mock. Release builds (make build) do not contain this file.
const EnvMock = "VGPU_HOST_NVML_MOCK"

func init() {
	mockLib = func() nvml.Interface {
		if os.Getenv(EnvMock) == "dgxa100" {
			return mocknvml.DGXA100()
		}
		return nil
	}
}
