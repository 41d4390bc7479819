package vfio

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
)

// pausedWrites is a host.Writer that notes, for each write, whether gate was paused.
type pausedWrites struct {
	host.Writer
	gate             *host.NVIDIAGate
	paused, unpaused atomic.Int32
}

func (w *pausedWrites) Write(ctx context.Context, path, value string) error {
	if w.gate.Paused() {
		w.paused.Add(1)
	} else {
		w.unpaused.Add(1)
	}
	return w.Writer.Write(ctx, path, value)
}

// This process's own NVML helper holding /dev/nvidia* (in the agent, the Xid watch's: seen on
// a real H200) refuses a bind of a GPU on nvidia as any holder does, unless the helper is a
// user of the Binder's gate: then the bind pauses the gate first (the helper exits), makes
// every write paused, and resumes it after. Unbind back to nvidia pauses it too (NVML sees the
// GPU again only from a new start); a dry-run unbind and a bind of a GPU on another driver
// do not.
func TestBindPausesThisProcessesNVIDIAUsers(t *testing.T) {
	t.Parallel()
	// Without the gate's user: the helper is a holder like any other.
	tr, _, b, gpu, _ := consumer(t, "nvidia")
	b.NVIDIA = &host.NVIDIAGate{}
	tr.HoldOpen(4711, "vgpu-host-nvml", "/dev/nvidia0")
	if _, err := b.Bind(ctx, []host.Address{gpu}, BindOptions{}); !errors.Is(err, host.ErrBusy) ||
		!strings.Contains(err.Error(), "pid 4711 (vgpu-host-nvml) has /dev/nvidia0 open") {
		t.Fatalf("bind with an unregistered helper holding /dev/nvidia0: %v", err)
	}

	// With it: the pause lets the helper go before the holder search is read.
	tr, k, b, gpu, _ := consumer(t, "nvidia")
	g := &host.NVIDIAGate{}
	w := &pausedWrites{Writer: k, gate: g}
	b.NVIDIA, b.W = g, w
	tr.HoldOpen(4711, "vgpu-host-nvml", "/dev/nvidia0")
	var suspends atomic.Int32
	g.Register(func() {
		suspends.Add(1)
		if err := os.RemoveAll(filepath.Join(tr.Dir(), "proc", "4711")); err != nil {
			t.Error(err)
		}
	})
	if rs, err := b.Preflight([]host.Address{gpu}); err != nil || len(rs) != 0 || suspends.Load() != 1 {
		t.Fatalf("preflight: refusals %+v, %v, %d suspends", rs, err, suspends.Load())
	}
	tr.HoldOpen(4711, "vgpu-host-nvml", "/dev/nvidia0") // the helper started again after the resume
	if _, err := b.Bind(ctx, []host.Address{gpu}, BindOptions{}); err != nil {
		t.Fatalf("bind with the helper a user of the gate: %v", err)
	}
	if tr.Driver(gpu) != DriverName || suspends.Load() != 2 || g.Paused() {
		t.Fatalf("after bind: driver %q, %d suspends, paused %v", tr.Driver(gpu), suspends.Load(), g.Paused())
	}
	if w.paused.Load() == 0 || w.unpaused.Load() != 0 {
		t.Fatalf("bind's writes: %d paused, %d not", w.paused.Load(), w.unpaused.Load())
	}
	if _, err := b.Unbind(ctx, []host.Address{gpu}, UnbindOptions{DryRun: true}); err != nil || suspends.Load() != 2 {
		t.Fatalf("dry-run unbind: %v, %d suspends (want 2: none)", err, suspends.Load())
	}
	w.paused.Store(0)
	if _, err := b.Unbind(ctx, []host.Address{gpu}, UnbindOptions{}); err != nil {
		t.Fatal(err)
	}
	if tr.Driver(gpu) != "nvidia" || suspends.Load() != 3 || g.Paused() || w.paused.Load() == 0 {
		t.Fatalf("after unbind: driver %q, %d suspends, paused %v, %d paused writes", tr.Driver(gpu), suspends.Load(), g.Paused(), w.paused.Load())
	}

	// A GPU on another driver: no pause.
	_, _, b, gpu, _ = consumer(t, "amdgpu")
	b.NVIDIA = g
	if _, err := b.Bind(ctx, []host.Address{gpu}, BindOptions{}); err != nil || suspends.Load() != 3 {
		t.Fatalf("bind of a GPU on amdgpu: %v, %d suspends (want 3: none)", err, suspends.Load())
	}
}

// The held-open refusal says how to stop the programs that usually hold a GPU (each fix
// once), and nothing more for a program it does not know.
func TestHeldRefusalNamesKnownFixes(t *testing.T) {
	t.Parallel()
	tr, _, b, gpu, _ := consumer(t, "nvidia")
	b.NVIDIA = &host.NVIDIAGate{}
	tr.HoldOpen(900, "nvidia-persiste", "/dev/nvidiactl")
	tr.HoldOpen(900, "nvidia-persiste", "/dev/nvidia0")
	tr.HoldOpen(901, "pipewire", "/dev/snd/controlC0")
	tr.HoldOpen(902, "wireplumber", "/dev/snd/controlC0")
	tr.HoldOpen(903, "my-cuda-job", "/dev/nvidia0")
	_, err := b.Bind(ctx, []host.Address{gpu}, BindOptions{DryRun: true})
	if !errors.Is(err, host.ErrBusy) {
		t.Fatalf("bind: %v", err)
	}
	msg := err.Error()
	for _, want := range []string{
		"pid 900 (nvidia-persiste) has /dev/nvidia0 open", "pid 903 (my-cuda-job) has /dev/nvidia0 open",
		"systemctl stop nvidia-persistenced", "systemctl --user stop pipewire.socket pipewire-pulse.socket pipewire pipewire-pulse wireplumber",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("refusal lacks %q:\n%s", want, msg)
		}
	}
	if n := strings.Count(msg, "systemctl stop nvidia-persistenced"); n != 1 {
		t.Errorf("the persistenced fix %d times, want once:\n%s", n, msg)
	}
	if n := strings.Count(msg, "wireplumber, as the user"); n != 1 {
		t.Errorf("the sound server's fix %d times (pipewire and wireplumber share it), want once:\n%s", n, msg)
	}
	t.Log(msg)
}
