package domains_test

import (
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
