package domains_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"libvirt.org/go/libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/vgpu-host/vgpu-host/domains"
	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/virt/native"
)

// FuzzRender feeds arbitrary specs through parse -> validate -> resolve -> build and checks
// that nothing panics, that every error wraps a sentinel the CLI maps to an exit code, and
// that every accepted spec renders to XML that round-trips through libvirtxml. The seed corpus
// (every example plus some broken specs) runs in plain `go test`.
func FuzzRender(f *testing.F) {
	for _, b := range renderSeeds(f) {
		f.Add(b)
	}
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
			// What the user wrote arrives unchanged (encoding/xml silently replaces characters
			// XML cannot carry with U+FFFD; Validate must have refused those).
			if back.Name != vm.Metadata.Name || back.Description != vm.Metadata.Description {
				t.Fatalf("name/description changed on the way into XML: %q %q -> %q %q", vm.Metadata.Name, vm.Metadata.Description, back.Name, back.Description)
			}
			for i, f := range vm.DiskFiles(domains.BuildOptions{}) {
				if len(vm.Spec.XMLPatches) > 0 {
					break // a patch may change a disk on purpose
				}
				if src := back.Devices.Disks[i].Source; src.File != nil && src.File.File != f.Path || src.Block != nil && src.Block.Dev != f.Path {
					t.Fatalf("disk %d path %q changed on the way into XML: %+v", i, f.Path, src)
				}
			}
			again, err := domains.Marshal(&back)
			if err != nil || again != x {
				t.Fatalf("round trip changed the XML (err %v):\n%s\n---\n%s", err, x, again)
			}
			// libvirt's schema accepts what the typed builder writes for any spec Validate
			// accepts: a spec's mistake is Validate's error, naming its field, not libvirtd's.
			if len(vm.Spec.XMLPatches) == 0 {
				if ok, err := native.ValidateDomain(x); ok && err != nil {
					t.Fatalf("libvirt's schema refuses the domain of a valid spec: %v\n%s", err, x)
				}
			}
		}
	})
}

// renderSeeds is FuzzRender's seed corpus: every example plus specs that reach the corners.
func renderSeeds(tb testing.TB) [][]byte {
	var out [][]byte
	for _, p := range exampleFiles(tb) {
		b, err := os.ReadFile(p)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, b)
	}
	out = append(out, []byte(minimal))
	out = append(out, []byte(minimal+"  gpus:\n    - passthrough: {model: \"RTX\", count: 2}\n      fallback: virtio-gpu\n"))
	out = append(out, []byte(minimal+"  machine: pc\n  disks:\n    - {path: /dev/sdb, bus: sata}\n    - {path: /x.iso, device: cdrom}\n  gpus:\n    - passthrough: {address: \"0a:00.0\"}\n"))
	out = append(out, []byte("metadata: {name: \"\\u0000<x>\"}\nspec: {memory: 1e9}\n"))
	out = append(out, []byte("a: &a [*a, *a]\n"))
	out = append(out, []byte(minimal+multiGPU))
	out = append(out, []byte(minimal+"  machine: pc\n  firmware: bios\n  mmio64: 512GiB\n  cpu: {model: Skylake-Server}\n"+multiGPU))
	out = append(out, []byte(minimal+"  gpus:\n    - passthrough: {address: \"41:00.4\", rom: {bar: \"on\", file: \"/a&b<c>.rom\"}, primary: true}\n    - passthrough: {address: \"0a:00.1\"}\n"))
	out = append(out, []byte(minimal+"  gpus:\n    - vgpu: {profile: \"GRID T4-2Q\", count: 2, display: true, ramfb: false, uuids: [\"6f0b6b0e-0a4e-4b8e-9d1a-1f2e3d4c5b6a\", \"6f0b6b0e-0a4e-4b8e-9d1a-1f2e3d4c5b6b\"]}\n    - vgpu: {profile: \"l40s-8q\", mode: vendor-vfio}\n      fallback: virtio-gpu\n"))
	out = append(out, []byte(minimal+"  graphics: {type: spice, gl: true, renderNode: /dev/dri/renderD128}\n  gpus:\n    - virtioGpu: {virgl: true, heads: 4}\n  quirks: {kvmHidden: true, hypervVendorId: \"0123456789ab\"}\n"))
	out = append(out, []byte(minimal+"  network: {type: bridge, bridge: br0, mac: \"52-54-00-AA-BB-CC\", model: e1000e}\n  secureBoot: true\n  numa: auto\n  hugepages: 2MiB\n"))
	out = append(out, []byte(strings.Replace(minimal, "name: vm1", "name: vm1\n  description: \"a\\x01<b>&amp;]]>\"", 1)+"  disks:\n    - {image: /i/b.img, size: 1GiB, overlay: \"/i/o\\uFFFE.qcow2\"}\n  cloudInit: {userData: \"#cloud-config\\n</x>\\x1b\"}\n"))
	out = append(out, []byte(minimal+"  gpus:\n    - passthrough: {model: A100, count: twenty-three, companions: maybe}\n"))
	return out
}

// TestRenderCorpusSchemaValid is FuzzRender's second invariant, too slow for every fuzz input:
// every spec of the seed corpus and of testdata/fuzz/FuzzRender (inputs the fuzzer found) that
// is accepted renders a domain libvirt's schema accepts (DOMAIN_DEFINE_VALIDATE on the test
// driver checks the RNG schema).
func TestRenderCorpusSchemaValid(t *testing.T) {
	inputs := renderSeeds(t)
	files, _ := filepath.Glob(filepath.Join("testdata", "fuzz", "FuzzRender", "*"))
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.SplitN(strings.TrimSpace(string(b)), "\n", 2)
		if len(lines) != 2 || !strings.HasPrefix(lines[1], "[]byte(") {
			t.Fatalf("%s: not a go test fuzz v1 file", p)
		}
		v, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")"))
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		inputs = append(inputs, []byte(v))
	}
	conn, err := libvirt.NewConnect("test:///default")
	if err != nil {
		t.Fatalf("connect test:///default: %v", err)
	}
	defer conn.Close()
	accepted := 0
	for i, data := range inputs {
		vm, err := domains.Parse(data)
		if err != nil || vm.Validate() != nil {
			continue
		}
		for _, offline := range []bool{true, false} {
			alloc, err := domains.Resolve(vm, testInventory(), domains.ResolveOptions{Offline: offline})
			if err != nil {
				continue
			}
			x, err := domains.Render(vm, alloc, domains.BuildOptions{})
			if err != nil {
				continue
			}
			accepted++
			dom, err := conn.DomainDefineXMLFlags(x, libvirt.DOMAIN_DEFINE_VALIDATE)
			if err != nil {
				t.Errorf("input %d (offline=%v) was accepted but libvirt refuses its XML: %v\n%s", i, offline, err, x)
				continue
			}
			_ = dom.Undefine()
			dom.Free()
		}
	}
	if accepted < 10 {
		t.Fatalf("only %d renderings of %d inputs: the corpus no longer reaches the renderer", accepted, len(inputs))
	}
}
