//go:build nvmlmock

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"

	"github.com/vgpu-host/vgpu-host/mig/nvmlmig"
	"github.com/vgpu-host/vgpu-host/mig/nvmlmig/mocknvml"
	"github.com/vgpu-host/vgpu-host/mig/nvmlmig/nvmlfacts"
	"github.com/vgpu-host/vgpu-host/mig/remote"
)

// The test build (go build -tags nvmlmock) serves, beyond the release build's replay of a
// capture (EnvFacts, facts.go), a stand-in for NVML when the environment asks:
//
//   - EnvMock=dgxa100 serves go-nvml's DGX A100 mock (corrected to real profile IDs). A
//     capture wins over the mock: with both set, the facts are served.
//   - EnvMockState=FILE reads the MIG modes and GPU instances of the mock or of the replay
//     from FILE at start and writes them back after every change, so that state carries from
//     one command to the next (mig apply, then mig plan has nothing to do).
//
// Each helper process is one vgpu-host command, so by default every command starts from the
// capture's (or the mock's) own state. The state is a file of its own, not one beside the
// facts: captures are shared, read-only fixtures (CI mounts shared/ read-only), and two tests
// replaying one capture must not see each other's instances. Release builds (make build)
// contain none of this: go-nvml's mock is not linked, and the helper a host runs as root
// writes no state file an environment variable names.
const (
	EnvMock      = remote.EnvMock
	EnvMockState = remote.EnvMockState
)

// mockState is the saved state: per device, its MIG mode, instance counter and GPU instances.
type mockState struct {
	GPUs []mockGPU `json:"gpus"`
}

type mockGPU struct {
	MigMode   int            `json:"mig_mode"`
	Counter   uint32         `json:"counter"`
	Instances []mockInstance `json:"instances"`
}

type mockInstance struct {
	ID               uint32 `json:"id"`
	ProfileID        uint32 `json:"profile_id"`
	Start            uint32 `json:"start"`
	Size             uint32 `json:"size"`
	ComputeInstances int    `json:"compute_instances"`
}

// mockLib returns go-nvml's dgxa100 mock when the environment asks for it (EnvMock; nil
// otherwise) and, when EnvMockState names a file, its state loaded from there and save, which
// writes it back.
func mockLib() (lib nvml.Interface, save func() error) {
	if os.Getenv(EnvMock) != "dgxa100" {
		return nil, nil
	}
	s := mocknvml.DGXA100()
	path := os.Getenv(EnvMockState)
	if path == "" {
		return s, nil
	}
	if err := loadMock(s, path); err != nil {
		fmt.Fprintf(os.Stderr, "vgpu-host-nvml: mock state %s: %v\n", path, err)
		os.Exit(1)
	}
	return s, func() error { return saveMock(s, path) }
}

// replayState loads a replay's state from the file EnvMockState names, if any, and returns
// the function that saves it there (nil when none is named).
func replayState(s *nvmlfacts.Server) (save func() error) {
	st := os.Getenv(EnvMockState)
	if st == "" {
		return nil
	}
	if err := s.LoadState(st); err != nil {
		fmt.Fprintf(os.Stderr, "vgpu-host-nvml: %s: %v\n", EnvMockState, err)
		os.Exit(1)
	}
	return func() error { return s.SaveState(st) }
}

func loadMock(s *dgxa100.Server, path string) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var st mockState
	if err := json.Unmarshal(b, &st); err != nil {
		return err
	}
	for i, g := range st.GPUs {
		if i >= len(s.Devices) {
			break
		}
		d := s.Devices[i].(*dgxa100.Device)
		d.MigMode = g.MigMode
		for _, in := range g.Instances {
			index, ok := mocknvml.ProfileIndex(in.ProfileID) // saved is the profile's ID, as NVML reports it
			if !ok {
				return fmt.Errorf("GPU %d: no profile has ID %d", i, in.ProfileID)
			}
			info, ret := d.GetGpuInstanceProfileInfo(index)
			if ret != nvml.SUCCESS {
				return fmt.Errorf("GPU %d: profile index %d: %v", i, index, ret)
			}
			d.GpuInstanceCounter = in.ID // keep the instance's id
			gi, ret := d.CreateGpuInstanceWithPlacement(&info, &nvml.GpuInstancePlacement{Start: in.Start, Size: in.Size})
			if ret != nvml.SUCCESS {
				return fmt.Errorf("GPU %d: GPU instance %d: %v", i, in.ID, ret)
			}
			for c := 0; c < in.ComputeInstances; c++ {
				id, _ := nvmlmig.CIProfile(int(info.SliceCount))
				ci, ret := gi.GetComputeInstanceProfileInfo(id, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
				if ret == nvml.SUCCESS {
					gi.CreateComputeInstance(&ci)
				}
			}
		}
		d.GpuInstanceCounter = g.Counter
	}
	return nil
}

func saveMock(s *dgxa100.Server, path string) error {
	var st mockState
	for _, dev := range s.Devices {
		d := dev.(*dgxa100.Device)
		g := mockGPU{MigMode: d.MigMode, Counter: d.GpuInstanceCounter, Instances: []mockInstance{}}
		for gi := range d.GpuInstances {
			g.Instances = append(g.Instances, mockInstance{ID: gi.Info.Id, ProfileID: gi.Info.ProfileId,
				Start: gi.Info.Placement.Start, Size: gi.Info.Placement.Size, ComputeInstances: len(gi.ComputeInstances)})
		}
		sort.Slice(g.Instances, func(i, j int) bool { return g.Instances[i].ID < g.Instances[j].ID })
		st.GPUs = append(st.GPUs, g)
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
