package remote

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
)

// running returns the pids of the processes running the executable bin (a helper build only
// this test binary starts).
func running(t *testing.T, bin string) []int {
	t.Helper()
	want, err := filepath.EvalSymlinks(bin)
	if err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err == nil && exe == want {
			pids = append(pids, pid)
		}
	}
	return pids
}

// gatedMock opens a client of the helper's test build serving the dgxa100 mock, registered
// with a gate of its own; the test's end closes it.
func gatedMock(t *testing.T) (bin string, g *host.NVIDIAGate, c *Client) {
	t.Helper()
	bin, g = buildHelper(t, "nvmlmock"), &host.NVIDIAGate{}
	return bin, g, openGated(t, bin, g, map[string]string{EnvMock: "dgxa100"})
}

// openGated opens a client of the helper at bin with the variables vars, registered with g;
// the test's end closes it.
func openGated(t *testing.T, bin string, g *host.NVIDIAGate, vars map[string]string) *Client {
	t.Helper()
	e := helperEnv(bin, vars)
	e.Gate = g
	c, err := e.Open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// A client registered with a gate: a pause stops its helper (the process is gone when Pause
// returns), a call during the pause waits for the resume and then starts a new helper, and
// Close leaves none running and the client out of later pauses. Not parallel: it counts the
// helper processes of a build the parallel tests share.
func TestPauseStopsTheHelperAndACallStartsAnother(t *testing.T) {
	bin, g, c := gatedMock(t)
	ctx := context.Background()
	if _, err := c.State(ctx); err != nil {
		t.Fatal(err)
	}
	pids := running(t, bin)
	if len(pids) != 1 || c.starts != 1 {
		t.Fatalf("before the pause: %d helper processes, %d started; want 1, 1", len(pids), c.starts)
	}
	// Started through /proc/self/fd/3, it is named after its file, not "3" (vremote.NameProcess).
	if comm, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pids[0]), "comm")); err != nil || string(comm) != HelperName+"\n" {
		t.Fatalf("the helper's /proc/PID/comm: %q %v; want %q", comm, err, HelperName)
	}
	resume := g.Pause()
	if pids := running(t, bin); len(pids) != 0 {
		t.Fatalf("Pause returned with the helper still running: pids %v", pids)
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.State(ctx)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("a call returned during the pause (%v)", err)
	case <-time.After(100 * time.Millisecond):
	}
	if pids := running(t, bin); len(pids) != 0 {
		t.Fatalf("a helper started during the pause: pids %v", pids)
	}
	resume()
	if err := <-done; err != nil {
		t.Fatalf("the call after the resume: %v", err)
	}
	if n := len(running(t, bin)); n != 1 || c.starts != 2 {
		t.Fatalf("after the resume: %d helper processes, %d started; want 1, 2", n, c.starts)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if pids := running(t, bin); len(pids) != 0 {
		t.Fatalf("Close left the helper running: pids %v", pids)
	}
	g.Pause()() // a closed client is not suspended again (it would block on nothing; this checks it is gone)
	if _, err := c.State(ctx); err == nil {
		t.Fatal("a call on a closed client succeeded")
	}
	if c.starts != 2 {
		t.Fatalf("a closed client started a helper: %d started", c.starts)
	}
}

// A pause that begins during a WaitXid lets the call finish (no error, the Xid watch goes on)
// and then stops the helper; the next WaitXid, after the resume, runs on a new helper.
func TestPauseDuringWaitXid(t *testing.T) {
	bin, g, c := gatedMock(t)
	ctx := context.Background()
	done := make(chan error, 1)
	go func() {
		_, err := c.WaitXid(ctx, 300*time.Millisecond)
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	resume := g.Pause()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("WaitXid cut by the pause: %v", err)
		}
	default:
		t.Fatal("Pause returned before the WaitXid in progress")
	}
	if pids := running(t, bin); len(pids) != 0 {
		t.Fatalf("Pause returned with the helper running: %v", pids)
	}
	resume()
	if _, err := c.WaitXid(ctx, 10*time.Millisecond); err != nil || c.starts != 2 {
		t.Fatalf("WaitXid after the resume: %v, %d helpers started", err, c.starts)
	}
}

// A MIG mode change through one client stops the gate's other helpers for its duration (NVIDIA
// leaves it pending while another client holds the GPU) and keeps its own: after it, the other
// client has no helper running and starts one at its next call. On go-nvml's DGX A100 mock and
// on the real H200's capture replayed.
func TestSetModeStopsTheOtherHelpers(t *testing.T) {
	bin := buildHelper(t, "nvmlmock")
	for _, tc := range []struct {
		name, gpu string
		vars      map[string]string
	}{
		{"dgxa100-mock", "0000:00:00.0", map[string]string{EnvMock: "dgxa100"}},
		{"h200-capture", "0000:00:06.0", map[string]string{EnvFacts: hosttest.Capture(t, "nvidia-h200/nvml-facts.json")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := &host.NVIDIAGate{}
			c, other := openGated(t, bin, g, tc.vars), openGated(t, bin, g, tc.vars)
			ctx := context.Background()
			if err := c.SetMode(ctx, tc.gpu, true); err != nil {
				t.Fatal(err)
			}
			if pids := running(t, bin); len(pids) != 1 || c.starts != 1 || other.starts != 1 || other.rpc != nil || g.Paused() {
				t.Fatalf("after SetMode: helpers %v, started %d and %d, the other's stopped: %v, paused %v; want one helper (SetMode's), the other stopped",
					pids, c.starts, other.starts, other.rpc == nil, g.Paused())
			}
			if _, err := other.State(ctx); err != nil || other.starts != 2 {
				t.Fatalf("the other client after SetMode: %v, %d started", err, other.starts)
			}
			c.Close()
			other.Close()
		})
	}
}

// Which gate a helper registers with: the Env's; else the process's for a helper on the real
// driver; none for a replay or a mock, which open no device node.
func TestEnvGate(t *testing.T) {
	g := &host.NVIDIAGate{}
	for _, tc := range []struct {
		e    Env
		want *host.NVIDIAGate
	}{
		{helperEnv("x", nil), host.NVIDIANodes},
		{helperEnv("x", map[string]string{EnvFacts: "h200.json"}), nil},
		{helperEnv("x", map[string]string{EnvMock: "dgxa100"}), nil},
		{Env{Vars: map[string]string{EnvMock: "dgxa100"}, Gate: g}, g},
	} {
		if got := tc.e.gate(); got != tc.want {
			t.Errorf("%+v: gate %p, want %p", tc.e.Vars, got, tc.want)
		}
	}
}

// TestRealNVMLHelperPause runs on a host with an NVIDIA GPU and its driver, as root, with
// VGPU_TEST_REAL_NVML=1 and the helper (VGPU_HOST_NVML_HELPER, else beside the test binary or
// in PATH), read-only: the helper on the real driver holds /dev/nvidia* open from its start, so
// any process's bind of an nvidia GPU would find it (the agent's Xid watch keeps one running);
// a pause of its gate stops it, no process of it holds a node when Pause returns, and the next
// call starts one that holds them again.
//
//	go test -c -o remote.test ./mig/remote   # here
//	VGPU_TEST_REAL_NVML=1 VGPU_HOST_NVML_HELPER=bin/vgpu-host-nvml ./remote.test -test.run TestRealNVMLHelperPause -test.v
func TestRealNVMLHelperPause(t *testing.T) {
	if os.Getenv("VGPU_TEST_REAL_NVML") != "1" {
		t.Skip("VGPU_TEST_REAL_NVML=1 runs this on a host with an NVIDIA GPU and its driver (no CI machine has one)")
	}
	root, err := host.NewRoot("/")
	if err != nil {
		t.Fatal(err)
	}
	helpersHolding := func() map[int][]string {
		out := map[int][]string{}
		for _, h := range host.Holders(root, []string{"/dev/nvidia*"}) {
			if h.Comm == HelperName {
				out[h.PID] = append(out[h.PID], h.Path)
			}
		}
		return out
	}
	if h := helpersHolding(); len(h) != 0 {
		t.Fatalf("a %s holds NVIDIA nodes before the test: %v", HelperName, h)
	}
	g := &host.NVIDIAGate{}
	c, err := Env{Gate: g}.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	st, err := c.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before := helpersHolding()
	t.Logf("%d GPU(s); the helper holds: %v", len(st.GPUs), before)
	if len(before) != 1 {
		t.Fatalf("want one %s holding /dev/nvidia*, got %v", HelperName, before)
	}
	resume := g.Pause()
	if h := helpersHolding(); len(h) != 0 {
		t.Fatalf("paused: %s still holds %v", HelperName, h)
	}
	resume()
	if _, err := c.State(ctx); err != nil {
		t.Fatalf("after the resume: %v", err)
	}
	after := helpersHolding()
	t.Logf("after the resume: %v (%d helpers started)", after, c.starts)
	if len(after) != 1 || c.starts != 2 {
		t.Fatalf("after the resume: holders %v, %d helpers started; want one new", after, c.starts)
	}
	for pid := range after {
		if _, old := before[pid]; old {
			t.Fatalf("pid %d held the nodes before and after the pause", pid)
		}
	}
}
