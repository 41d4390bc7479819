package lifecycle

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/domains"
	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/ledger"
	"github.com/vgpu-host/vgpu-host/virt"
)

// smallVM is the scale benchmark's VM (spec's: 1 vCPU, an overlay on a base image, a
// cloud-init seed) with any NVIDIA GPU or else virtio-gpu: the generated host's GPUs are held
// by their drivers or not vfio-viable, so it falls back, and its ledger entry has a journal
// but no device claims.
func smallVM(tb testing.TB, name string) *domains.VM { return spec(tb, name, anyNvidiaOrVirtio) }

// BenchmarkApplyDestroyScale (issue 19): apply + destroy (NoStart) of one small VM against
// virt.NewFake, on the generated 64-GPU host (hosttest.GPUHost64, scanned once), while the
// ledger holds 10, 100, 1,000 and 10,000 other VMs. The ledger is real (flock, one file per
// VM and the claims index, each written by an atomic rename with fsync, in a temporary
// directory). Up to 1,000 the held VMs are applied one by one, sequentially, through Apply;
// the 10,000 step copies the 1,000th VM's ledger entry under new names, 100 per transaction
// (applying 9,000 more would take many minutes). Metrics: ms per apply and per destroy, the
// CPU time per apply+destroy, the ledger directory's size, and the mean time of the
// sequential applies that filled the ledger so far (fill-ms/apply).
//
//	go test ./lifecycle -run '^$' -bench ApplyDestroyScale -benchtime 20x
func BenchmarkApplyDestroyScale(b *testing.B) {
	ctx := context.Background()
	tr := hosttest.New(b)
	tr.GenerateHost(hosttest.GPUHost64)
	inv, err := host.Scan(tr.Root)
	if err != nil {
		b.Fatal(err)
	}
	root := tr.Root
	lg := ledger.Open(root)
	l := New(Options{Root: root, Conn: virt.NewFake("qemu"), Host: newFakeHost(), Ledger: lg, NoStart: true,
		Scan: func(host.Root) (*host.Inventory, error) { return inv, nil }})
	held := 0
	var fillTime time.Duration // of the sequential applies that filled the ledger to held
	fillN := 0
	fill := func(b *testing.B, n int) {
		b.Helper()
		for ; held < n && held < 1000; held++ {
			vm := smallVM(b, fmt.Sprintf("held-%05d", held))
			t0 := time.Now()
			if _, err := l.Apply(ctx, vm); err != nil {
				b.Fatal(err)
			}
			fillTime += time.Since(t0)
			fillN++
		}
		for held < n {
			err := lg.Update(func(bk *ledger.Book) error {
				tmpl := *bk.VM("held-00999")
				for stop := min(n, held+100); held < stop; held++ {
					e := bk.Entry(fmt.Sprintf("held-%05d", held))
					name := e.Name
					*e = tmpl
					e.Name = name
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, n := range []int{10, 100, 1000, 10000} {
		b.Run(fmt.Sprintf("held=%d", n), func(b *testing.B) {
			fill(b, n)
			probe := smallVM(b, "probe")
			// One apply and destroy first, unmeasured: the process's first (encoding/json's
			// type caches, the fake libvirt's, the page cache's) would count at 10 held only,
			// the ratios' denominator.
			if _, err := l.Apply(ctx, probe); err != nil {
				b.Fatal(err)
			}
			if _, err := l.Destroy(ctx, "probe"); err != nil {
				b.Fatal(err)
			}
			var apply, destroy time.Duration
			cpu0 := cpuTime()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				if _, err := l.Apply(ctx, probe); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if _, err := l.Destroy(ctx, "probe"); err != nil {
					b.Fatal(err)
				}
				apply, destroy = apply+t1.Sub(t0), destroy+time.Since(t1)
			}
			b.StopTimer()
			// CPU time (user + system) per op: what the ledger's work costs, apart from the
			// waits for fsync that make the wall time noisy on a shared disk.
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/1e3/float64(b.N), "cpu-ms/op")
			b.ReportMetric(float64(apply.Microseconds())/1e3/float64(b.N), "apply-ms/op")
			b.ReportMetric(float64(destroy.Microseconds())/1e3/float64(b.N), "destroy-ms/op")
			if fillN > 0 {
				b.ReportMetric(float64(fillTime.Microseconds())/1e3/float64(fillN), "fill-ms/apply")
			}
			var size int64 // the whole ledger directory
			_ = filepath.WalkDir(lg.Path(), func(_ string, d fs.DirEntry, err error) error {
				if err == nil && !d.IsDir() {
					if st, err := d.Info(); err == nil {
						size += st.Size()
					}
				}
				return nil
			})
			b.ReportMetric(float64(size)/1024, "ledger-KiB")
		})
	}
}

// cpuTime is the process's user + system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
