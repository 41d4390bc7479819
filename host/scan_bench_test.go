package host_test

import (
	"encoding/json"
	"io"
	"syscall"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
)

// BenchmarkScan measures Scan alone on the generated hosts that bench/inspect.sh and
// bench/scale.sh compare with lspci (~2,000 functions, a workstation, 64 GPUs) and on the two
// real-kernel snapshots bench/start.sh compares (snapshot: ../shared/fixtures' QEMU q35,
// skipped when absent outside CI; lab: host/testdata's, 19 functions each);
// BenchmarkScanJSON adds the JSON encoding `inspect --output json` does. Run: go test ./host -run '^$' -bench Scan -cpuprofile cpu.out
func BenchmarkScan(b *testing.B) {
	for _, c := range []struct {
		name string
		spec hosttest.HostSpec
		tgz  func(b *testing.B) string // a real-kernel snapshot instead of spec
	}{{"big", hosttest.BenchHost, nil}, {"small", hosttest.SmallHost, nil}, {"gpu64", hosttest.GPUHost64, nil},
		{"snapshot", hosttest.HostSpec{}, func(b *testing.B) string { return hosttest.SharedFixture(b, "qemu-q35-iommu-6.1.tar.gz") }},
		{"lab", hosttest.HostSpec{}, func(b *testing.B) string {
			p := hosttest.RepoFile(b, "host/testdata/lab-snapshot.tar.gz")
			if p == "" {
				b.Fatal("host/testdata/lab-snapshot.tar.gz is missing (make lab-snapshot captures it)")
			}
			return p
		}}} {
		// Generated once, and only when -bench selects it (a big tree takes seconds to
		// write): b.Run calls its function again for every b.N it tries.
		var root *host.Root
		outer := b
		b.Run(c.name, func(b *testing.B) {
			if root == nil {
				if c.tgz != nil {
					r := hosttest.Snapshot(outer, c.tgz(b))
					root = &r
				} else {
					tr := hosttest.New(outer)
					tr.GenerateHost(c.spec)
					root = &tr.Root
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := cpuTime(b)
			for i := 0; i < b.N; i++ {
				if _, err := host.Scan(*root); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpuTime(b)-cpu0)/1e6/float64(b.N), "cpu-ms/op")
		})
	}
}

// cpuTime is the process's user + system CPU time so far: on this project's shared machine
// the wall time of a benchmark depends on the other jobs, its CPU time much less.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func BenchmarkScanJSON(b *testing.B) {
	tr := hosttest.New(b)
	tr.GenerateHost(hosttest.BenchHost)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		inv, err := host.Scan(tr.Root)
		if err != nil {
			b.Fatal(err)
		}
		enc := json.NewEncoder(io.Discard)
		enc.SetIndent("", "  ")
		if err := enc.Encode(inv); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkJSONGPU64 is the JSON encoding alone of the 64-GPU host's inventory (about 900 KB
// indented), the part of `inspect -o json` after Scan.
func BenchmarkJSONGPU64(b *testing.B) {
	tr := hosttest.New(b)
	tr.GenerateHost(hosttest.GPUHost64)
	inv, err := host.Scan(tr.Root)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		enc := json.NewEncoder(io.Discard)
		enc.SetIndent("", "  ")
		if err := enc.Encode(inv); err != nil {
			b.Fatal(err)
		}
	}
}
