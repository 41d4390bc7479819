package remote

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/internal/testenv"
	"github.com/vgpu-host/vgpu-host/mig"
)

// helpers are cmd/vgpu-host-nvml's builds the tests share, by build tags, made once for the
// test binary (linking the cgo helper costs seconds); TestMain removes them.
var helpers = &testenv.Builds{Pkg: "../../cmd/vgpu-host-nvml", Name: HelperName}

// TestMain removes the helpers' builds after the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	helpers.Remove()
	os.Exit(code)
}

// buildHelper returns cmd/vgpu-host-nvml built with tags, building it on first use.
func buildHelper(t *testing.T, tags string) string {
	t.Helper()
	return helpers.Get(t, tags)
}

// helperEnv is the Env of a helper at bin with the other variables as vars sets them (the
// rest of EnvVars unset, whatever this process's environment holds).
func helperEnv(bin string, vars map[string]string) Env {
	e := Env{Vars: map[string]string{}}
	for _, k := range EnvVars {
		e.Vars[k] = vars[k]
	}
	e.Vars[EnvHelper] = bin
	return e
}

// The protocol end to end: the helper's test build serving go-nvml's dgxa100 mock, driven
// through Client: the layout, a re-plan with nothing to do, a refusal with its reason
// and sentinel, and errors that keep their sentinels across the pipe.
func TestHelperServesTheDGXA100Mock(t *testing.T) {
	t.Parallel()
	c, err := helperEnv(buildHelper(t, "nvmlmock"), map[string]string{EnvMock: "dgxa100"}).Open()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	}()
	ctx := context.Background()
	st, err := c.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.GPUs) != 8 || st.GPUs[1].Address != "0000:01:00.0" || len(st.GPUs[1].Profiles) == 0 {
		t.Fatalf("state over the pipe: %+v", st.GPUs)
	}
	want := map[string][]string{
		"0000:00:00.0": {"1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb"},
		"0000:01:00.0": {"3g.20gb", "4g.20gb"},
	}
	plan, err := mig.Plan(st, want)
	if err != nil {
		t.Fatal(err)
	}
	if err := mig.Apply(ctx, c, plan); err != nil {
		t.Fatal(err)
	}
	st, err = c.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, g := range st.GPUs[:3] {
		var ps []string
		for _, in := range g.Instances {
			ps = append(ps, in.Profile+"@"+in.Placement.String())
		}
		got = append(got, g.Address+"="+strings.Join(ps, ","))
	}
	if w := "0000:00:00.0=1g.5gb@0,1g.5gb@1,1g.5gb@2,1g.5gb@3,1g.5gb@4,1g.5gb@5,1g.5gb@6 0000:01:00.0=3g.20gb@4-7,4g.20gb@0-3 0000:02:00.0="; strings.Join(got, " ") != w {
		t.Errorf("instances after apply:\n got %s\nwant %s", strings.Join(got, " "), w)
	}
	again, err := mig.Plan(st, want)
	if err != nil || !again.Empty() {
		t.Errorf("re-plan: %v %v", again.Steps, err)
	}
	// A create the helper refuses: its sentinel survives the pipe.
	_, err = c.Create(ctx, "0000:01:00.0", "1g.5gb", 0)
	if !errors.Is(err, host.ErrBusy) || !strings.Contains(err.Error(), "holds 0-3") {
		t.Errorf("create on an occupied slice: %v", err)
	}
	if err := c.SetMode(ctx, "0000:63:00.0", true); !errors.Is(err, host.ErrNotFound) {
		t.Errorf("unknown GPU: %v", err)
	}
}

// The release build on a host without the NVIDIA driver: Open says NVML is not available,
// exit code 7's sentinel.
func TestHelperWithoutNVML(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"); err == nil {
		t.Skip("this host has NVML")
	}
	_, err := helperEnv(buildHelper(t, ""), nil).Open()
	if !errors.Is(err, mig.ErrNoNVML) || !errors.Is(err, host.ErrUnsupported) ||
		!strings.Contains(err.Error(), "NVML not available: libnvidia-ml.so.1 not found (install the NVIDIA driver)") {
		t.Errorf("Open without NVML: %v", err)
	}
	if _, err := helperEnv(filepath.Join(t.TempDir(), "missing"), nil).Open(); !errors.Is(err, ErrNoHelper) || !errors.Is(err, host.ErrUnsupported) {
		t.Errorf("Open without the helper: %v", err)
	}
}

// The helper's test build on go-nvml's dgxa100 mock: WaitXid over the pipe waits out its
// timeout and answers no event (the mock's GPUs offer Xid events; none happen), so the
// agent's watch idles there instead of crashing the helper.
func TestHelperWaitXidOnTheMock(t *testing.T) {
	t.Parallel()
	c, err := helperEnv(buildHelper(t, "nvmlmock"), map[string]string{EnvMock: "dgxa100"}).Open()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	evs, err := c.WaitXid(context.Background(), 200*time.Millisecond)
	if err != nil || len(evs) != 0 || time.Since(start) < 200*time.Millisecond {
		t.Fatalf("WaitXid: %+v %v after %v", evs, err, time.Since(start))
	}
	if _, err := c.State(context.Background()); err != nil {
		t.Fatalf("the helper after WaitXid: %v", err)
	}
}

// An Env's Vars stand in for the process's variables, in what it looks up and in the helper's
// environment: with VGPU_HOST_NVML_MOCK=dgxa100 in this process, a helper whose Env unsets it
// serves no mock (no NVML here), and one whose Env has it serves the mock; the zero Env is the
// process's.
func TestEnvVarsStandInForTheProcess(t *testing.T) {
	t.Setenv(EnvMock, "dgxa100")
	t.Setenv("VGPU_HOST_TEST_OTHER", "kept")
	if (Env{}).Getenv(EnvMock) != "dgxa100" || (Env{}).Environ() != nil {
		t.Errorf("the zero Env is not the process's: %q %v", Env{}.Getenv(EnvMock), Env{}.Environ())
	}
	bin := buildHelper(t, "nvmlmock")
	unset := helperEnv(bin, nil)
	env := strings.Join(unset.Environ(), "\n") + "\n"
	if unset.Getenv(EnvMock) != "" || strings.Contains(env, EnvMock+"=") || !strings.Contains(env, "VGPU_HOST_TEST_OTHER=kept\n") ||
		!strings.Contains(env, EnvHelper+"="+bin+"\n") {
		t.Errorf("Env unsetting %s: Getenv %q, environ:\n%s", EnvMock, unset.Getenv(EnvMock), env)
	}
	if _, err := os.Stat("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"); err != nil {
		if _, err := unset.Open(); !errors.Is(err, mig.ErrNoNVML) {
			t.Errorf("the helper with %s unset by its Env: %v, want no NVML", EnvMock, err)
		}
	}
	c, err := helperEnv(bin, map[string]string{EnvMock: "dgxa100"}).Open()
	if err != nil {
		t.Fatalf("the helper with %s=dgxa100 by its Env: %v", EnvMock, err)
	}
	c.Close()
}

// pendingBackend is a mig.Backend whose SetMode leaves the mode pending, as NVML does while
// another process holds the GPU (nvmlmig.PendingError wraps the same two sentinels).
type pendingBackend struct{ mig.Backend }

func (pendingBackend) SetMode(context.Context, string, bool) error {
	return fmt.Errorf("MIG mode on GPU 0000:00:06.0 is pending (asked to enable it; activation: NVML_ERROR_IN_USE): stop what holds the GPU: %w: %w", mig.ErrModePending, host.ErrBusy)
}

// A MIG mode change left pending keeps both its sentinels across the pipe: mig.ErrModePending
// (ops adds who holds the GPU on it) and host.ErrBusy (exit 5).
func TestModePendingCrossesThePipe(t *testing.T) {
	t.Parallel()
	a, b := net.Pipe()
	go Serve(func() (mig.Backend, error) { return pendingBackend{}, nil }, b)
	c, err := Dial(a)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	err = c.SetMode(context.Background(), "0000:00:06.0", true)
	if !errors.Is(err, mig.ErrModePending) || !errors.Is(err, host.ErrBusy) || !strings.Contains(err.Error(), "NVML_ERROR_IN_USE") {
		t.Errorf("SetMode: %v", err)
	}
}
