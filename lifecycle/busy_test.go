package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
)

// TestBusyNamesHolders: when every GPU a selector matches is allocated, the refusal is busy
// (not "not found") and names the VMs holding them.
func TestBusyNamesHolders(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	var names []string
	for i := 0; i < 4; i++ {
		n := fmt.Sprintf("vgpuhost-test-h%d", i)
		if _, err := e.lc().Apply(ctx, spec(t, n, anyNvidia)); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	_, err := e.lc().Apply(ctx, spec(t, "vgpuhost-test-h9", anyNvidia))
	if !errors.Is(err, host.ErrBusy) {
		t.Fatalf("want ErrBusy, got %v", err)
	}
	msg := err.Error()
	if !strings.Contains(msg, "only 0 are free") || !strings.Contains(msg, "allocated to VMs "+strings.Join(names, ", ")) || strings.Contains(msg, "not found") {
		t.Fatalf("unclear refusal: %s", msg)
	}
}
