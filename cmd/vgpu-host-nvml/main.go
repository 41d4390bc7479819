// Command vgpu-host-nvml is vgpu-host's NVML helper: it holds go-nvml (cgo; it dlopens
// libnvidia-ml.so.1 when NVML is initialised, so it builds and starts without the NVIDIA
// driver) and serves mig.Backend over its stdin and stdout (see package mig/remote), so that
// vgpu-host itself stays static and free of cgo. vgpu-host starts it beside itself for `mig`
// commands and for inspect's MIG section; it is not meant to be run by hand, except as
// `vgpu-host-nvml --version`.
package main

import (
	"fmt"
	"os"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/vgpu-host/vgpu-host/internal/buildinfo"
	"github.com/vgpu-host/vgpu-host/mig"
	"github.com/vgpu-host/vgpu-host/mig/nvmlmig"
	"github.com/vgpu-host/vgpu-host/mig/remote"
)

// mockLib, set only by the nvmlmock build (mock.go), returns a mock NVML instead of the
// driver's when the environment asks for one.
var mockLib func() nvml.Interface

func main() {
	if len(os.Args) == 2 && os.Args[1] == "--version" {
		fmt.Println(buildinfo.Get().Line(remote.HelperName))
		return
	}
	if len(os.Args) != 2 || os.Args[1] != "--serve" {
		fmt.Fprintf(os.Stderr, "%s: vgpu-host's NVML helper; vgpu-host runs it (with --serve) for MIG\n", remote.HelperName)
		os.Exit(2)
	}
	remote.Serve(func() (mig.Backend, error) {
		var lib nvml.Interface
		if mockLib != nil {
			lib = mockLib()
		}
		if lib == nil {
			lib = nvml.New()
		}
		if err := nvmlmig.Init(lib); err != nil {
			return nil, err
		}
		return nvmlmig.New(lib), nil
	}, stdio{})
}

// stdio is the helper's end of the pipe: requests on stdin, replies on stdout.
type stdio struct{}

func (stdio) Read(p []byte) (int, error)  { return os.Stdin.Read(p) }
func (stdio) Write(p []byte) (int, error) { return os.Stdout.Write(p) }
