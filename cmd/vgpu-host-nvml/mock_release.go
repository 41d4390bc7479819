//go:build !nvmlmock

package main

import (
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/vgpu-host/vgpu-host/mig/nvmlmig/nvmlfacts"
)

// mockLib is the test build's stand-in for NVML (mock.go): a release build has none.
func mockLib() (lib nvml.Interface, save func() error) { return nil, nil }

// replayState is the test build's saved state of a replay (mock.go): a release build keeps
// the replay's state for one command only.
func replayState(*nvmlfacts.Server) (save func() error) { return nil }
