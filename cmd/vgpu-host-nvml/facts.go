package main

import (
	"fmt"
	"os"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/vgpu-host/vgpu-host/mig/nvmlmig/nvmlfacts"
	"github.com/vgpu-host/vgpu-host/mig/remote"
)

// EnvFacts names a capture of a real machine's NVML answers (nvmlfacts.Facts, the format of
// ../shared/fixtures/nvidia-h200/nvml-facts.json and of `vgpu-host-nvml --facts`; docs/mig.md)
// to answer from instead of the driver. Release builds honour it too: the replay never touches
// a GPU, so a host can be reproduced from its snapshot (`vgpu-host host snapshot`) anywhere.
// MIG mode and GPU instances are kept in memory by NVIDIA's placement rules for the one
// command; only the test build carries them from one command to the next (mock.go).
const EnvFacts = remote.EnvFacts

// factsLib is the replay of the capture at path. It says on stderr, once per helper process,
// that no GPU answers; a capture that cannot be read ends the helper (exit 1).
// save is the test build's saving of the replay's state (replayState), nil in a release build.
func factsLib(path string) (lib nvml.Interface, save func() error) {
	f, err := nvmlfacts.Load(path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "vgpu-host-nvml: %s: %v\n", EnvFacts, err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "vgpu-host-nvml: note: NVML answers from the capture %s (%s), not from a GPU\n", path, EnvFacts)
	s := nvmlfacts.NewServer(f)
	return s, replayState(s)
}
