package domains_test

import (
	"errors"
	"os"
	"testing"

	"libvirt.org/go/libvirtxml"

	"github.com/vgpu-host/vgpu-host/domains"
	"github.com/vgpu-host/vgpu-host/host"
)

// FuzzRender feeds arbitrary specs through parse -> validate -> resolve -> build and checks
// that nothing panics, that every error wraps a sentinel the CLI maps to an exit code, and
// that every accepted spec renders to XML that round-trips through libvirtxml. The seed corpus
// (every example plus some broken specs) runs in plain `go test`.
func FuzzRender(f *testing.F) {
	for _, p := range exampleFiles(f) {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(minimal))
	f.Add([]byte(minimal + "  gpus:\n    - passthrough: {model: \"RTX\", count: 2}\n      fallback: virtio-gpu\n"))
	f.Add([]byte(minimal + "  machine: pc\n  disks:\n    - {path: /dev/sdb, bus: sata}\n    - {path: /x.iso, device: cdrom}\n  gpus:\n    - passthrough: {address: \"0a:00.0\"}\n"))
	f.Add([]byte("metadata: {name: \"\\u0000<x>\"}\nspec: {memory: 1e9}\n"))
	f.Add([]byte("a: &a [*a, *a]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		vm, err := domains.Parse(data)
		if err != nil {
			if !errors.Is(err, host.ErrInvalid) {
				t.Fatalf("parse error without ErrInvalid: %v", err)
			}
			return
		}
		if err := vm.Validate(); err != nil {
			if !errors.Is(err, host.ErrInvalid) {
				t.Fatalf("validate error without ErrInvalid: %v", err)
			}
			return
		}
		for _, offline := range []bool{true, false} {
			alloc, err := domains.Resolve(vm, testInventory(), domains.ResolveOptions{Offline: offline})
			if err != nil {
				if !errors.Is(err, host.ErrInvalid) && !errors.Is(err, host.ErrNotFound) && !errors.Is(err, host.ErrBusy) {
					t.Fatalf("resolve error without a sentinel: %v", err)
				}
				continue
			}
			x, err := domains.Render(vm, alloc, domains.BuildOptions{})
			if err != nil {
				if !errors.Is(err, host.ErrInvalid) {
					t.Fatalf("render error without ErrInvalid: %v", err)
				}
				continue
			}
			var back libvirtxml.Domain
			if err := back.Unmarshal(x); err != nil {
				t.Fatalf("rendered XML does not parse: %v\n%s", err, x)
			}
			again, err := back.Marshal()
			if err != nil || again != x {
				t.Fatalf("round trip changed the XML (err %v):\n%s\n---\n%s", err, x, again)
			}
		}
	})
}
