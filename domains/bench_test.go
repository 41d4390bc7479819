package domains_test

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

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
	cpu0 := cpuTime(b)
	defer func() { b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op") }()
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
			cpu0 := cpuTime(b)
			defer func() { b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op") }()
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

// cpuTime is the process's user + system CPU time so far: on the project's shared machine the
// wall time per render follows the other jobs' load, its CPU time much less (bench/render.sh
// prints both).
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
