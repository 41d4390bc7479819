package agentcmd

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
	migremote "github.com/vgpu-host/vgpu-host/mig/remote"
)

// syncBuffer is a bytes.Buffer safe for a logger's goroutine and the test's.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) count(sub string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Count(s.b.String(), sub)
}

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
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		watchXid(ctx, tr.Root, make(chan host.XidEvent), log)
		close(done)
	}()
	const line = "watched again when a GPU moves"
	if !eventually(func() bool { return logs.count(line) == 1 }) {
		t.Fatalf("first try: %d lines %q in %s", logs.count(line), line, logs.b.String())
	}
	time.Sleep(50 * time.Millisecond)
	if n := logs.count(line); n != 1 {
		t.Fatalf("the watch tried again with nothing moved: %d tries", n)
	}
	host.NVIDIANodes.Pause()()
	if !eventually(func() bool { return logs.count(line) == 2 }) {
		t.Fatalf("after a GPU moved: %d tries, want 2", logs.count(line))
	}
	cancel()
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Fatal("the watch did not end with its context")
	}
}
