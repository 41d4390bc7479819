// Command vgpu-host-libvirt is vgpu-host's libvirt helper: it holds the cgo binding
// (libvirt.org/go/libvirt) so that vgpu-host itself stays pure Go and starts fast, and serves
// vgpu-host's narrow libvirt interface (virt.Conn) over its stdin and stdout. vgpu-host starts
// it beside itself when a command needs libvirt (see package virt/remote); it is not meant to be
// run by hand, except as `vgpu-host-libvirt --version`, which `vgpu-host version` uses to
// tell whether the helper it would start is the same build.
package main

import (
	"fmt"
	"os"

	"github.com/vgpu-host/vgpu-host/internal/buildinfo"
	"github.com/vgpu-host/vgpu-host/virt"
	"github.com/vgpu-host/vgpu-host/virt/native"
	"github.com/vgpu-host/vgpu-host/virt/remote"
)

// init names the process (it is started through /proc/self/fd/N): see remote.NameProcess.
func init() { remote.NameProcess() }

func main() {
	if len(os.Args) == 2 && os.Args[1] == "--version" {
		fmt.Println(buildinfo.Get().Line(remote.HelperName))
		return
	}
	if len(os.Args) != 2 || os.Args[1] != "--serve" {
		fmt.Fprintf(os.Stderr, "%s: vgpu-host's libvirt helper; vgpu-host runs it (with --serve) when a command needs libvirt\n", remote.HelperName)
		os.Exit(2)
	}
	err := remote.ServeBackend(remote.Backend{
		Open:          func(uri string) (virt.Conn, error) { return native.Open(uri) },
		PrepareDefine: native.PrepareSchema,
	}, stdio{})
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", remote.HelperName, err)
		os.Exit(1)
	}
}

// stdio is the helper's end of the pipe: requests on stdin, replies on stdout.
type stdio struct{}

func (stdio) Read(p []byte) (int, error)  { return os.Stdin.Read(p) }
func (stdio) Write(p []byte) (int, error) { return os.Stdout.Write(p) }
func (stdio) Close() error                { return os.Stdout.Close() }
