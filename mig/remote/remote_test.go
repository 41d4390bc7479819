package remote

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/mig"
)

// buildHelper builds cmd/vgpu-host-nvml (with tags) into a temporary directory.
func buildHelper(t *testing.T, tags string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), HelperName)
	args := []string{"build", "-o", bin}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), append(args, "../../cmd/vgpu-host-nvml")...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the NVML helper: %v\n%s", err, out)
	}
	return bin
}

// The protocol end to end: the helper's test build serving go-nvml's dgxa100 mock, driven
// through Client: the layout, a re-plan with nothing to do, a refusal with its reason
// and sentinel, and errors that keep their sentinels across the pipe.
func TestHelperServesTheDGXA100Mock(t *testing.T) {
	t.Setenv(EnvHelper, buildHelper(t, "nvmlmock"))
	t.Setenv("VGPU_HOST_NVML_MOCK", "dgxa100")
	c, err := Open()
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
	if _, err := os.Stat("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"); err == nil {
		t.Skip("this host has NVML")
	}
	t.Setenv(EnvHelper, buildHelper(t, ""))
	_, err := Open()
	if !errors.Is(err, mig.ErrNoNVML) || !errors.Is(err, host.ErrUnsupported) ||
		!strings.Contains(err.Error(), "NVML not available: libnvidia-ml.so.1 not found (install the NVIDIA driver)") {
		t.Errorf("Open without NVML: %v", err)
	}
	t.Setenv(EnvHelper, filepath.Join(t.TempDir(), "missing"))
	if _, err := Open(); !errors.Is(err, ErrNoHelper) || !errors.Is(err, host.ErrUnsupported) {
		t.Errorf("Open without the helper: %v", err)
	}
}

// The helper's test build on go-nvml's dgxa100 mock: WaitXid over the pipe waits out its
// timeout and answers no event (the mock's GPUs offer Xid events; none happen), so the
// agent's watch idles there instead of crashing the helper.
func TestHelperWaitXidOnTheMock(t *testing.T) {
	t.Setenv(EnvHelper, buildHelper(t, "nvmlmock"))
	t.Setenv("VGPU_HOST_NVML_MOCK", "dgxa100")
	c, err := Open()
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
