// Command vgpu-host-nvml is vgpu-host's NVML helper: it holds go-nvml (cgo; it dlopens
// libnvidia-ml.so.1 when NVML is initialised, so it builds and starts without the NVIDIA
// driver) and serves mig.Backend over its stdin and stdout (see package mig/remote), so that
// vgpu-host itself stays static and free of cgo. vgpu-host starts it beside itself for `mig`
// commands and for inspect's MIG section, and as `vgpu-host-nvml --facts` for `host snapshot`;
// it is not meant to be run by hand, except as `vgpu-host-nvml --version` or `--facts`.
//
//	vgpu-host-nvml --serve    serve mig.Backend on stdin and stdout
//	vgpu-host-nvml --facts    write what NVML answers (a capture, docs/mig.md) to stdout; change nothing
//	vgpu-host-nvml --version  print the build
//
// With VGPU_HOST_NVML_FACTS=FILE it answers from that capture instead of the driver (facts.go).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/internal/buildinfo"
	"github.com/vgpu-host/vgpu-host/mig"
	"github.com/vgpu-host/vgpu-host/mig/nvmlmig"
	"github.com/vgpu-host/vgpu-host/mig/nvmlmig/nvmlfacts"
	"github.com/vgpu-host/vgpu-host/mig/remote"
	vremote "github.com/vgpu-host/vgpu-host/virt/remote"
)

// init names the process (it is started through /proc/self/fd/N): see remote.NameProcess.
func init() { vremote.NameProcess() }

func main() {
	if len(os.Args) == 2 {
		switch os.Args[1] {
		case "--version":
			fmt.Println(buildinfo.Get().Line(remote.HelperName))
			return
		case "--facts":
			if err := writeFacts(); err != nil {
				fmt.Fprintf(os.Stderr, "%s: %v\n", remote.HelperName, err)
				if errors.Is(err, host.ErrUnsupported) {
					os.Exit(7) // vgpu-host's exit code for "unsupported": no NVML here
				}
				os.Exit(1)
			}
			return
		}
	}
	if len(os.Args) != 2 || os.Args[1] != "--serve" {
		fmt.Fprintf(os.Stderr, "%s: vgpu-host's NVML helper; vgpu-host runs it (with --serve) for MIG, (with --facts) for host snapshot\n", remote.HelperName)
		os.Exit(2)
	}
	remote.Serve(func() (mig.Backend, error) {
		lib, save := openLib()
		if err := nvmlmig.Init(lib); err != nil {
			return nil, err
		}
		b := nvmlmig.New(lib)
		if save != nil {
			return saving{b, save}, nil
		}
		return b, nil
	}, stdio{})
}

// openLib is the NVML the helper answers from: the capture VGPU_HOST_NVML_FACTS names, else
// (test build only) the mock the environment asks for, else the driver's. save, when not nil
// (test build only: mock.go), saves the stand-in's state after each change.
func openLib() (lib nvml.Interface, save func() error) {
	if path := os.Getenv(EnvFacts); path != "" {
		return factsLib(path)
	}
	if lib, save := mockLib(); lib != nil {
		return lib, save
	}
	return nvml.New(), nil
}

// writeFacts writes a capture of what NVML answers to stdout: only reads, UUIDs zeroed.
func writeFacts() error {
	lib, _ := openLib() // a capture only reads
	if err := nvmlmig.Init(lib); err != nil {
		return err
	}
	defer lib.Shutdown()
	f, err := nvmlfacts.Capture(lib)
	if err != nil {
		return fmt.Errorf("capture nvml facts: %w", err)
	}
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return fmt.Errorf("encode nvml facts: %w", err)
	}
	if _, err := os.Stdout.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("write nvml facts: %w", err)
	}
	return nil
}

// saving saves the stand-in's state (save) after every call that changes it (nvmlmock build
// only).
type saving struct {
	mig.Backend
	save func() error
}

func (s saving) SetMode(ctx context.Context, address string, enabled bool) error {
	return errors.Join(s.Backend.SetMode(ctx, address, enabled), s.save())
}

func (s saving) Create(ctx context.Context, address, profile string, start int) (mig.Instance, error) {
	in, err := s.Backend.Create(ctx, address, profile, start)
	return in, errors.Join(err, s.save())
}

func (s saving) Destroy(ctx context.Context, address string, id int) error {
	return errors.Join(s.Backend.Destroy(ctx, address, id), s.save())
}

// WaitXid passes the Xid events of the backend through (remote.XidSource).
func (s saving) WaitXid(ctx context.Context, timeout time.Duration) ([]host.XidEvent, error) {
	xs, ok := s.Backend.(remote.XidSource)
	if !ok {
		return nil, fmt.Errorf("the NVML backend delivers no Xid events: %w", host.ErrUnsupported)
	}
	return xs.WaitXid(ctx, timeout)
}

// stdio is the helper's end of the pipe: requests on stdin, replies on stdout.
type stdio struct{}

func (stdio) Read(p []byte) (int, error)  { return os.Stdin.Read(p) }
func (stdio) Write(p []byte) (int, error) { return os.Stdout.Write(p) }
