package remote

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/mig"
)

// The agent's shared client (Env.Shared) on real helper processes of the mock build: every Open
// gives the one client, whose helper starts once and outlives the callers' Close; a function
// bound to or unbound from nvidia under Root since the helper started makes the next Open start
// a new one (NVML lists the GPUs at its start); Close stops it, and later Opens get clients of
// their own.
func TestSharedClient(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	nvidia := filepath.Join(dir, "sys", "bus", "pci", "drivers", "nvidia")
	if err := os.MkdirAll(nvidia, 0o755); err != nil {
		t.Fatal(err)
	}
	bind := func(addr string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(nvidia, addr), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bind("0000:07:00.0")
	root, err := host.NewRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	sh := &Shared{Root: &root}
	e := helperEnv(buildHelper(t, "nvmlmock"), map[string]string{EnvMock: "dgxa100"})
	e.Shared = sh
	ctx := context.Background()
	use := func() *Client {
		t.Helper()
		c, err := e.Open()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.State(ctx); err != nil {
			t.Fatal(err)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		return c
	}
	first := use()
	if second := use(); second != first || sh.Starts() != 1 {
		t.Fatalf("two Opens: the same client %v, %d helpers started (want 1)", second == first, sh.Starts())
	}
	bind("0000:08:00.0") // a GPU onto nvidia past vgpu-host
	use()
	if sh.Starts() != 2 {
		t.Errorf("after a function moved onto nvidia: %d helpers started, want 2", sh.Starts())
	}
	use()
	if sh.Starts() != 2 {
		t.Errorf("nothing moved: %d helpers started, want still 2", sh.Starts())
	}
	if err := os.Remove(filepath.Join(nvidia, "0000:07:00.0")); err != nil {
		t.Fatal(err)
	}
	use()
	if sh.Starts() != 3 {
		t.Errorf("after a function left nvidia: %d helpers started, want 3", sh.Starts())
	}
	if err := sh.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := first.State(ctx); err == nil {
		t.Error("the shared client still answers after Shared.Close")
	}
	own, err := e.Open()
	if err != nil {
		t.Fatal(err)
	}
	if own == first || own.shared {
		t.Error("an Open after Shared.Close got the shared client")
	}
	if err := own.Close(); err != nil {
		t.Error(err)
	}
}

// stubBackend answers State with an empty state.
type stubBackend struct{ mig.Backend }

func (stubBackend) State(context.Context) (mig.State, error) { return mig.State{}, nil }

// A helper that dies (its pipe closes) fails the call in progress and is replaced at the next
// call, instead of every later call failing on the dead pipe: the agent keeps its shared client
// for good.
func TestClientStartsAgainAfterItsHelperDied(t *testing.T) {
	t.Parallel()
	var server atomic.Pointer[net.Conn]
	start := func() (io.ReadWriteCloser, func() error, error) {
		a, b := net.Pipe()
		server.Store(&b)
		go Serve(func() (mig.Backend, error) { return stubBackend{}, nil }, b)
		return a, func() error { return nil }, nil
	}
	c := &Client{start: start}
	ctx := context.Background()
	if err := c.ready(ctx); err != nil {
		t.Fatal(err)
	}
	c.mu.Unlock()
	if _, err := c.State(ctx); err != nil {
		t.Fatal(err)
	}
	(*server.Load()).Close() // the helper dies
	if _, err := c.State(ctx); err == nil {
		t.Fatal("a call on a dead helper's pipe succeeded")
	}
	if _, err := c.State(ctx); err != nil {
		t.Fatalf("the call after the helper died: %v", err)
	}
	if c.starts != 2 {
		t.Errorf("%d helpers started, want 2", c.starts)
	}
	_ = c.Close()
}
