package agentcmd

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/internal/testenv"
	migremote "github.com/vgpu-host/vgpu-host/mig/remote"
)

// eventually waits up to a second for cond.
func eventually(cond func() bool) bool {
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// The Xid watch where NVML cannot be had (here: no helper) does not end for good: it waits
// for a function to move off or onto the nvidia driver (a pause of host.NVIDIANodes ends) and
// tries again, since binding a host's last GPU on nvidia to vfio-pci leaves NVML nothing to
// watch until one comes back. Nothing else wakes it. Not parallel: it pauses the process's gate.
func TestXidWatchTriesAgainWhenAGPUMoves(t *testing.T) {
	tr := hosttest.New(t)
	t.Setenv(migremote.EnvFacts, "h200.json") // NVML describes the fake root
	t.Setenv(migremote.EnvHelper, filepath.Join(t.TempDir(), "no-helper"))
	var logs testenv.LockedBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		watchXid(ctx, tr.Root, make(chan host.XidEvent), log)
		close(done)
	}()
	const line = "watched again when a GPU moves"
	if !eventually(func() bool { return strings.Count(logs.String(), line) == 1 }) {
		t.Fatalf("first try: %d lines %q in %s", strings.Count(logs.String(), line), line, logs.String())
	}
	time.Sleep(50 * time.Millisecond)
	if n := strings.Count(logs.String(), line); n != 1 {
		t.Fatalf("the watch tried again with nothing moved: %d tries", n)
	}
	host.NVIDIANodes.Pause()()
	if !eventually(func() bool { return strings.Count(logs.String(), line) == 2 }) {
		t.Fatalf("after a GPU moved: %d tries, want 2", strings.Count(logs.String(), line))
	}
	cancel()
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Fatal("the watch did not end with its context")
	}
}
