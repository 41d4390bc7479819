package ledger

import (
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
)

// BenchmarkTransactionScale: the ledger's own cost per transaction while it holds 10 to
// 10,000 VMs: a journal step (one VM file), a claim and its release (the index and one VM
// file each), and a View that reads one VM and a holder. Files are written with fsync, as in
// production; the held VMs are written without (filling 10,000 with fsync takes minutes).
//
//	go test ./ledger -run '^$' -bench TransactionScale
func BenchmarkTransactionScale(b *testing.B) {
	for _, n := range []int{10, 100, 1000, 10000} {
		b.Run(fmt.Sprintf("held=%d", n), func(b *testing.B) {
			l := OpenPath(filepath.Join(b.TempDir(), "ledger.json"))
			l.WriteFile = renameNoSync
			for i := 0; i < n; i += 500 {
				if err := l.Update(func(bk *Book) error {
					for j := i; j < min(n, i+500); j++ {
						e := bk.Entry(fmt.Sprintf("held-%05d", j))
						e.Phase = PhaseApplied
						for k := range 8 {
							e.Record("define", e.Name, map[string]string{"k": fmt.Sprint(k)})
						}
					}
					return bk.Claim(fmt.Sprintf("held-%05d", i), Claim{Kind: KindPCI, ID: fmt.Sprintf("0000:%02x:00.0", i/500)})
				}); err != nil {
					b.Fatal(err)
				}
			}
			l.WriteFile = nil
			syscall.Sync() // the fill's unsynced writes are not the timed fsyncs' to flush
			gpu := Claim{Kind: KindPCI, ID: "0000:ff:00.0"}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := l.Update(func(bk *Book) error { return bk.Claim("probe", gpu) }); err != nil {
					b.Fatal(err)
				}
				if err := l.Update(func(bk *Book) error { bk.Entry("probe").Record("define", "probe", nil); return nil }); err != nil {
					b.Fatal(err)
				}
				if err := l.View(func(bk *Book) error {
					if bk.VM("probe") == nil || bk.Holder(gpu) != "probe" {
						return fmt.Errorf("probe not found")
					}
					return nil
				}); err != nil {
					b.Fatal(err)
				}
				if err := l.Update(func(bk *Book) error { bk.Delete("probe"); return nil }); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
