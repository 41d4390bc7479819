package host_test

import (
	"encoding/json"
	"io"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
)

// BenchmarkScan measures Scan alone on the generated hosts that bench/inspect.sh compares
// with lspci (~2,000 functions and a workstation); BenchmarkScanJSON adds the JSON encoding
// `inspect --output json` does. Run: go test ./host -run '^$' -bench Scan -cpuprofile cpu.out
func BenchmarkScan(b *testing.B) {
	for _, c := range []struct {
		name string
		spec hosttest.HostSpec
	}{{"big", hosttest.BenchHost}, {"small", hosttest.SmallHost}} {
		// Generated once: b.Run calls its function again for every b.N it tries.
		tr := hosttest.New(b)
		tr.GenerateHost(c.spec)
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := host.Scan(tr.Root); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
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
