// Command vgpu-host-nvml is vgpu-host's NVML helper: it holds go-nvml (cgo; it dlopens
// libnvidia-ml.so.1 when NVML is initialised, so it builds and starts without the NVIDIA
// driver) and serves mig.Backend over its stdin and stdout (see package mig/remote), so that
// vgpu-host itself stays static and free of cgo. vgpu-host starts it beside itself for `mig`
// commands and for inspect's MIG section; it is not meant to be run by hand, except as
// `vgpu-host-nvml --version`.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/vgpu-host/vgpu-host/internal/buildinfo"
	"github.com/vgpu-host/vgpu-host/mig"
	"github.com/vgpu-host/vgpu-host/mig/nvmlmig"
	"github.com/vgpu-host/vgpu-host/mig/remote"
)

// mockLib, set only by the nvmlmock build (mock.go), returns a mock NVML instead of the
// driver's when the environment asks for one; mockSave, set with it, saves the mock's state
// after each change.
var (
	mockLib  func() nvml.Interface
	mockSave func() error
)

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
		b := nvmlmig.New(lib)
		if mockSave != nil {
			return saving{b}, nil
		}
		return b, nil
	}, stdio{})
}

// saving saves the mock's state after every call that changes it (nvmlmock build only).
type saving struct{ mig.Backend }

func (s saving) SetMode(ctx context.Context, address string, enabled bool) error {
	return errors.Join(s.Backend.SetMode(ctx, address, enabled), mockSave())
}

func (s saving) Create(ctx context.Context, address, profile string, start int) (mig.Instance, error) {
	in, err := s.Backend.Create(ctx, address, profile, start)
	return in, errors.Join(err, mockSave())
}

func (s saving) Destroy(ctx context.Context, address string, id int) error {
	return errors.Join(s.Backend.Destroy(ctx, address, id), mockSave())
}

// stdio is the helper's end of the pipe: requests on stdin, replies on stdout.
type stdio struct{}

func (stdio) Read(p []byte) (int, error)  { return os.Stdin.Read(p) }
func (stdio) Write(p []byte) (int, error) { return os.Stdout.Write(p) }
