package clitree

import (
	"context"
	"io"
	"syscall"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/host/hosttest"
)

// BenchmarkInspectGPU64 is the whole of `vgpu-host inspect -o json` in process, from the
// command tree's construction to the last byte written, on the 64-GPU host bench/scale.sh
// compares with lspci (756 functions): what the installed binary does after its start and
// before its exit. Profile it with
//
//	go test ./internal/clitree -run '^$' -bench InspectGPU64 -benchtime 40x -cpuprofile cpu.out
//
// cpu-ms/op is the process's user + system time per run, which the shared machine's load
// stretches far less than the wall time.
func BenchmarkInspectGPU64(b *testing.B) {
	tr := hosttest.New(b)
	tr.GenerateHost(hosttest.GPUHost64)
	args := []string{"vgpu-host", "--host-root", tr.Dir(), "inspect", "-o", "json"}
	run := func() {
		app := newApp(testEnv())
		app.Writer, app.ErrWriter = io.Discard, io.Discard
		if err := app.Run(context.Background(), args); err != nil {
			b.Fatal(err)
		}
	}
	run() // pci.ids found once, as every later run of this process finds it
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU(b)
	for i := 0; i < b.N; i++ {
		run()
	}
	b.ReportMetric(float64(processCPU(b)-cpu0)/1e6/float64(b.N), "cpu-ms/op")
}

// processCPU is the process's user + system CPU time so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
