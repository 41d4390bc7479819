package domains_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/domains"
)

// BenchmarkRender measures resolve + build + marshal of every example against testInventory,
// one domain per iteration (the spec is parsed once, as apply does).
func BenchmarkRender(b *testing.B) {
	var vms []*domains.VM
	for _, f := range exampleFiles(b) {
		vm, err := domains.Load(f)
		if err != nil {
			b.Fatal(err)
		}
		vms = append(vms, vm)
	}
	inv := testInventory()
	opts := domains.ResolveOptions{VirtType: "kvm"}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		vm := vms[i%len(vms)]
		alloc, err := domains.Resolve(vm, inv, opts)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := domains.Render(vm, alloc, domains.BuildOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRenderEach is BenchmarkRender one example at a time, to see which costs what.
func BenchmarkRenderEach(b *testing.B) {
	inv := testInventory()
	opts := domains.ResolveOptions{VirtType: "kvm"}
	for _, f := range exampleFiles(b) {
		vm, err := domains.Load(f)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(strings.TrimSuffix(filepath.Base(f), ".yaml"), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				alloc, err := domains.Resolve(vm, inv, opts)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := domains.Render(vm, alloc, domains.BuildOptions{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
