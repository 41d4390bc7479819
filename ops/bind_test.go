package ops

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/vfio"
)

// kernelEnv is fakeEnv with its writes going to hosttest's kernel emulator, and its progress
// events collected in events.
func kernelEnv(t *testing.T, tr *hosttest.Tree, events *[]Event) Env {
	env := fakeEnv(t, tr)
	k := hosttest.NewKernel(tr)
	env.HostIO = func() (host.Writer, host.ModuleLoader) { return k, k }
	env.Progress = func(e Event) { *events = append(*events, e) }
	env.Now = func() time.Time { return time.Unix(1, 0) }
	return env
}

func TestBindUnbind(t *testing.T) {
	tr := hosttest.New(t)
	gpu, audio := tr.ConsumerGPU("0000:00:04.0", "0000:01:00.0", "")
	var events []Event
	env := kernelEnv(t, tr, &events)
	ctx := context.Background()

	v, err := Run(ctx, env, &BindRequest{Addresses: []string{"01:00.0"}, DryRun: true, Timeout: vfio.DefaultTimeout})
	if res, ok := v.(*vfio.Result); err != nil || !ok || !res.DryRun || len(res.Steps) == 0 || tr.Driver(gpu) == vfio.DriverName {
		t.Fatalf("bind --dry-run: %#v, %v (driver now %q)", v, err, tr.Driver(gpu))
	}
	res, err := Bind(ctx, env, BindRequest{Addresses: []string{"01:00.0"}, Timeout: vfio.DefaultTimeout})
	if err != nil || !res.Changed || tr.Driver(gpu) != vfio.DriverName || tr.Driver(audio) != vfio.DriverName {
		t.Fatalf("bind: %+v, %v", res, err)
	}
	for _, c := range []struct {
		req   Request
		words string
	}{
		{&BindRequest{Timeout: time.Second}, "bind needs at least one PCI address"},
		{&UnbindRequest{Addresses: []string{"01:00.0"}}, "--timeout must be positive, got 0s"},
		{&BindRequest{Addresses: []string{"zz"}, Timeout: time.Second}, "zz"},
	} {
		if _, err := Run(ctx, env, c.req); ExitCode(err) != ExitUsage || !strings.Contains(err.Error(), c.words) {
			t.Errorf("%+v: %v; want exit 2 saying %q", c.req, err, c.words)
		}
	}

	// The GPU falls off the bus while on vfio-pci: unbind fails (exit 6) and the function
	// is quarantined, said as a progress event (the CLI's stderr line).
	tr.RemoveFunction(gpu)
	_, err = Unbind(ctx, env, UnbindRequest{Addresses: []string{gpu.String()}, Timeout: vfio.DefaultTimeout})
	if !errors.Is(err, host.ErrNotFound) {
		t.Fatalf("unbind of a function gone from the bus: %v; want not found", err)
	}
	if len(events) != 1 || events[0].Op != "unbind" || events[0].Subject != gpu.String() ||
		!strings.HasPrefix(events[0].Message, "vgpu-host: "+gpu.String()+" quarantined (") || !events[0].At.Equal(time.Unix(1, 0)) {
		t.Errorf("events %+v; want one saying %s is quarantined", events, gpu)
	}
	if r := (UnbindRequest{DryRun: true, Timeout: vfio.DefaultTimeout}); !r.Bool("dry-run") || r.IsSet("timeout") || r.Op() != "unbind" {
		t.Errorf("%+v: settings wrong", r)
	}
}
