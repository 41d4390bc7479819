package mdev

import (
	"context"
	"testing"

	"github.com/vgpu-host/vgpu-host/host/hosttest"
)

// BenchmarkCreateRemove16 measures vgpu-host's own work (no kernel) for the lab bench's shape:
// 16 instances for one owner created, then released.
func BenchmarkCreateRemove16(b *testing.B) {
	tr := hosttest.New(b)
	tr.MdevParentVirtual("mbochs", []hosttest.MdevType{{ID: "mbochs-small", Name: "small", Available: 16}})
	m := New(tr.Root, hosttest.NewKernel(tr))
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		if _, err := m.Create(ctx, CreateRequest{Parent: "mbochs", Profile: "small", Count: 16, Owner: "bench"}); err != nil {
			b.Fatal(err)
		}
		if rm, err := m.RemoveOwner(ctx, "bench", RemoveOptions{Force: true}); err != nil || len(rm) != 16 {
			b.Fatal(err, len(rm))
		}
	}
}
