package reconcile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/layout"
	"github.com/vgpu-host/vgpu-host/mdev"
	"github.com/vgpu-host/vgpu-host/mig"
	"github.com/vgpu-host/vgpu-host/mig/nvmlmig"
	"github.com/vgpu-host/vgpu-host/mig/nvmlmig/mocknvml"
	"github.com/vgpu-host/vgpu-host/vfio"
)

// migLayoutHost applies migHostLayout (GPU 0: 3g.20gb + 4g.20gb) on a fresh mock and returns
// the mdev manager and layout host for further runs.
func migLayoutHost(t *testing.T) (*mdev.Manager, *layout.Host, *hosttest.Tree) {
	t.Helper()
	tr := hosttest.New(t)
	tr.DatacenterGPU("0000:00:01.0", "0000:00:00.0", "nvidia", 0)
	k := hosttest.NewKernel(tr)
	m := mdev.New(tr.Root, k)
	h := &layout.Host{Root: tr.Root, Mdev: m, Binder: &vfio.Binder{Root: tr.Root, W: k, Modules: k, Timeout: 2 * time.Second},
		MIG: nvmlmig.New(mocknvml.DGXA100()), MIGPlanner: layout.NVMLPlanner{}}
	f, err := layout.Parse([]byte(migHostLayout))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := layout.ApplyConfig(ctx, h, f, "split", "host.yaml", []byte(migHostLayout), layout.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	return m, h, tr
}

func migStep(t *testing.T, res Result) Step {
	t.Helper()
	if len(res.Steps) == 0 || res.Steps[0].Kind != KindMIG {
		t.Fatalf("steps %+v: want the MIG step first", res.Steps)
	}
	return res.Steps[0]
}

// TestReconcileMIGModeLost: MIG mode is not kept across a reboot everywhere (NVIDIA documents
// it as persistent on Ampere; on a vGPU host it is lost, as NVIDIA's gpu-operator found): the
// boot reconcile finds it off, turns it on and makes the instances again.
func TestReconcileMIGModeLost(t *testing.T) {
	m, _, _ := migLayoutHost(t)
	rebooted := mocknvml.DGXA100() // MIG off, no instances
	r := &Reconciler{Mdev: m, OpenMIG: func() (mig.Backend, func(), error) { return nvmlmig.New(rebooted), func() {}, nil }}
	res, err := r.Run(ctx)
	if s := migStep(t, res); err != nil || s.Result != Applied {
		t.Fatalf("reconcile after MIG mode was lost: %v %+v", err, s)
	}
	if cur, _, _ := rebooted.Devices[0].GetMigMode(); cur != nvml.DEVICE_MIG_ENABLE || giCount(t, rebooted) != 2 {
		t.Fatalf("MIG mode %d, %d instances: want on with 2", cur, giCount(t, rebooted))
	}
}

// TestReconcileMIGModePending: in a VM with the GPU passed through, NVML cannot reset the GPU:
// turning MIG on leaves it pending (activation NVML_ERROR_RESET_REQUIRED). The reconcile's MIG
// step fails with what to do, wrapping mig.ErrModePending (exit 5 from host restore, /v1/health
// not ready with that reason), every time it runs, without panicking or retrying in a loop; once
// the GPU is reset (here: the VM rebooted) the next run makes the instances. host layout apply
// says the same.
func TestReconcileMIGModePending(t *testing.T) {
	m, h, tr := migLayoutHost(t)
	rebooted := mocknvml.DGXA100()
	reset := mocknvml.ResetRequired(rebooted.Devices[0].(*dgxa100.Device))
	// DCGM holds the GPU; the run's own NVML helper (pid 900) does until it is let go.
	tr.HoldOpen(812, "nv-hostengine", "/dev/nvidia0")
	r := &Reconciler{Mdev: m, OpenMIG: func() (mig.Backend, func(), error) {
		tr.HoldOpen(900, "vgpu-host-nvml", "/dev/nvidiactl")
		return nvmlmig.New(rebooted), func() { _ = os.RemoveAll(filepath.Join(tr.Dir(), "proc", "900")) }, nil
	}}
	for i := 0; i < 2; i++ {
		res, err := r.Run(ctx)
		s := migStep(t, res)
		if !errors.Is(err, mig.ErrModePending) || !errors.Is(err, host.ErrBusy) || s.Result != Failed {
			t.Fatalf("run %d with MIG mode pending: %v %+v", i+1, err, s)
		}
		held := "holding NVIDIA device nodes now: pid 812 (nv-hostengine) has /dev/nvidia0 open (DCGM's host engine: systemctl stop nvidia-dcgm)"
		for _, want := range []string{"MIG mode on GPU 0000:00:00.0 is pending", "now off, on after a reset", "NVML_ERROR_RESET_REQUIRED",
			"nvidia-smi -r -i 0", "reboot the VM", held} {
			if !strings.Contains(s.Error, want) {
				t.Errorf("run %d: the step's error lacks %q:\n%s", i+1, want, s.Error)
			}
		}
		if !strings.Contains(err.Error(), held) || strings.Contains(err.Error(), "pid 900") || strings.Contains(s.Error, "pid 900") {
			t.Errorf("run %d: the error names the holders %v, and not the run's own helper:\n%v", i+1, strings.Contains(err.Error(), held), err)
		}
	}
	if n := giCount(t, rebooted); n != 0 {
		t.Fatalf("%d GPU instances made with MIG mode pending", n)
	}
	if _, cur, _ := rebooted.Devices[0].GetMigMode(); cur != nvml.DEVICE_MIG_ENABLE {
		t.Fatalf("pending mode %d: the enable was not recorded", cur)
	}

	h.MIG = nvmlmig.New(rebooted)
	f, _ := layout.Parse([]byte(migHostLayout))
	_, err := layout.ApplyConfig(ctx, h, f, "split", "host.yaml", []byte(migHostLayout), layout.ApplyOptions{})
	if !errors.Is(err, mig.ErrModePending) || !strings.Contains(err.Error(), "MIG mode on GPU 0000:00:00.0 is pending") {
		t.Fatalf("host layout apply with MIG mode pending: %v", err)
	}

	reset()
	res, err := r.Run(ctx)
	if s := migStep(t, res); err != nil || s.Result != Applied || giCount(t, rebooted) != 2 {
		t.Fatalf("after the reset: %v %+v, %d instances", err, s, giCount(t, rebooted))
	}
}

// TestReconcileMIGDisablePending: MIG on, but "off" pending (nvidia-smi -mig 0 without a
// reset): instances made now would vanish at the next reset, so the reconcile sets MIG on again,
// which cancels the pending disable, then makes them.
func TestReconcileMIGDisablePending(t *testing.T) {
	m, _, _ := migLayoutHost(t)
	rebooted := mocknvml.DGXA100()
	d := rebooted.Devices[0].(*dgxa100.Device)
	d.MigMode = nvml.DEVICE_MIG_ENABLE
	mocknvml.ResetRequired(d)
	d.SetMigMode(nvml.DEVICE_MIG_DISABLE)
	r := &Reconciler{Mdev: m, OpenMIG: func() (mig.Backend, func(), error) { return nvmlmig.New(rebooted), func() {}, nil }}
	res, err := r.Run(ctx)
	if s := migStep(t, res); err != nil || s.Result != Applied {
		t.Fatalf("reconcile with a disable pending: %v %+v", err, s)
	}
	if cur, pending, _ := d.GetMigMode(); cur != nvml.DEVICE_MIG_ENABLE || pending != nvml.DEVICE_MIG_ENABLE || giCount(t, rebooted) != 2 {
		t.Fatalf("MIG mode %d pending %d, %d instances: want on, on, 2", cur, pending, giCount(t, rebooted))
	}
}
