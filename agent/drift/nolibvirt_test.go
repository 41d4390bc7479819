package drift

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/internal/testenv"
	"github.com/vgpu-host/vgpu-host/ledger"
	"github.com/vgpu-host/vgpu-host/virt"
)

// TestWatcherWithoutLibvirt: the agent on a host with no libvirt (a KubeVirt node, a container
// host) ran the drift watcher against a connection that cannot open, and logged "drift: check
// failed" every 250 ms, the error's text changing with its "next attempt in" each tick. For
// 5 s of that, the log must have one line (the connection is unreachable), the opens must be
// spaced by the back-off (not one per tick), and Status must say why for /v1/health; when
// libvirt comes up, one more line says so.
func TestWatcherWithoutLibvirt(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 5 s")
	}
	var up atomic.Bool
	var opens atomic.Int32
	fake := virt.NewFake()
	c := NewConn("qemu:///system", func() (virt.Conn, error) {
		opens.Add(1)
		if !up.Load() {
			return nil, errors.New("Failed to connect socket to '/var/run/libvirt/virtqemud-sock': No such file or directory")
		}
		return fake, nil
	}, nil)
	var shift atomic.Int64 // moves Conn's clock past a back-off at the end
	c.now = func() time.Time { return time.Now().Add(time.Duration(shift.Load())) }
	out := &testenv.LockedBuffer{}
	log := slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelInfo}))
	c.log = log
	tr := hosttest.New(t)
	w := &Watcher{Conn: c, Ledger: ledger.Open(tr.Root), Root: tr.Root, Log: log}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() { cancel(); <-done }()

	time.Sleep(5 * time.Second)
	lines := func() []string { return strings.Split(strings.TrimSpace(out.String()), "\n") }
	if l := lines(); len(l) != 1 || !strings.Contains(l[0], "libvirt: unreachable") {
		t.Fatalf("5 s without libvirt logged %d lines, want 1 (unreachable):\n%s", len(l), out.String())
	}
	// 250 ms doubling: attempts at 0, 0.25, 0.75, 1.75, 3.75 s; 20 ticks of the watcher.
	if n := opens.Load(); n < 3 || n > 6 {
		t.Errorf("%d attempts to open libvirt in 5 s, want about 5 (back-off from %s)", n, MinBackoff)
	}
	if s := c.Status(); !strings.HasPrefix(s, "unreachable since ") || !strings.Contains(s, "virtqemud-sock") {
		t.Errorf("Status %q: want unreachable with the reason", s)
	}

	up.Store(true)
	shift.Store(int64(MaxBackoff))
	deadline := time.Now().Add(3 * time.Second)
	for !c.Connected() && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if !c.Connected() || c.Status() != "connected" {
		t.Fatalf("libvirt came up but the watcher did not connect: %s", c.Status())
	}
	time.Sleep(300 * time.Millisecond)
	if l := lines(); len(l) != 2 || !strings.Contains(l[1], "libvirt: connected") {
		t.Fatalf("after libvirt came up the log has %d lines, want 2 (unreachable, connected):\n%s", len(l), out.String())
	}
}
