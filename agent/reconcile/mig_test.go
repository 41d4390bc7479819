package reconcile

import (
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/layout"
	"github.com/vgpu-host/vgpu-host/mdev"
	"github.com/vgpu-host/vgpu-host/mig"
	"github.com/vgpu-host/vgpu-host/mig/nvmlmig"
	"github.com/vgpu-host/vgpu-host/mig/nvmlmig/mocknvml"
	"github.com/vgpu-host/vgpu-host/vfio"
)

const migHostLayout = `apiVersion: vgpu-host/v1
kind: HostLayout
configs:
  split:
    gpus:
      - select: {address: "0000:00:00.0"}
        mode: mig
        profiles: [{profile: 3g.20gb, count: 1}, {profile: 4g.20gb, count: 1}]
`

// giCount counts GPU 0's GPU instances as NVML reports them.
func giCount(t *testing.T, lib nvml.Interface) int {
	t.Helper()
	d, _ := lib.DeviceGetHandleByIndex(0)
	n := 0
	for _, pid := range []int{nvml.GPU_INSTANCE_PROFILE_3_SLICE, nvml.GPU_INSTANCE_PROFILE_4_SLICE} {
		info, _ := d.GetGpuInstanceProfileInfo(pid)
		gis, _ := d.GetGpuInstances(&info)
		n += len(gis)
	}
	return n
}

// TestReconcileMIG: NVML forgets GPU instances at a reboot; the boot reconcile creates those
// of the stored host layout again, first of all (before VFs, which MIG-backed vGPU types
// sit on), and a second run finds them in place. Against go-nvml's dgxa100 mock: a fresh
// mock is the rebooted GPU.
func TestReconcileMIG(t *testing.T) {
	tr := hosttest.New(t)
	tr.DatacenterGPU("0000:00:01.0", "0000:00:00.0", "nvidia", 0)
	k := hosttest.NewKernel(tr)
	m := mdev.New(tr.Root, k)
	before := mocknvml.DGXA100()
	h := &layout.Host{Root: tr.Root, Mdev: m, Binder: &vfio.Binder{Root: tr.Root, W: k, Modules: k, Timeout: 2 * time.Second},
		MIG: nvmlmig.New(before), MIGPlanner: layout.NVMLPlanner{}}
	f, err := layout.Parse([]byte(migHostLayout))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := layout.ApplyConfig(ctx, h, f, "split", "host.yaml", []byte(migHostLayout), layout.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := giCount(t, before); n != 2 {
		t.Fatalf("layout apply made %d GPU instances, want 2", n)
	}

	rebooted := mocknvml.DGXA100()
	// MIG mode survives a reboot; the instances do not.
	d, _ := rebooted.DeviceGetHandleByIndex(0)
	d.SetMigMode(nvml.DEVICE_MIG_ENABLE)
	r := &Reconciler{Mdev: m, OpenMIG: func() (mig.Backend, func(), error) { return nvmlmig.New(rebooted), func() {}, nil }}
	res, err := r.Run(ctx)
	if err != nil {
		t.Fatalf("reconcile: %v (%+v)", err, res.Steps)
	}
	if len(res.Steps) == 0 || res.Steps[0].Kind != KindMIG || res.Steps[0].Result != Applied || res.Steps[0].Target != "0000:00:00.0" {
		t.Fatalf("steps %+v: want the MIG step first, applied on 0000:00:00.0", res.Steps)
	}
	if n := giCount(t, rebooted); n != 2 {
		t.Fatalf("after reconcile NVML has %d GPU instances, want 2", n)
	}
	res, err = r.Run(ctx)
	if err != nil || res.Steps[0].Result != Already {
		t.Fatalf("second reconcile: %v %+v", err, res.Steps)
	}
	if n := giCount(t, rebooted); n != 2 {
		t.Fatalf("a second reconcile changed NVML: %d instances", n)
	}

	// No NVML: the step fails, saying so; the other steps still run.
	r.OpenMIG = nil
	res, err = r.Run(ctx)
	if err == nil || res.Steps[0].Result != Failed || !strings.Contains(res.Steps[0].Error, "NVML is not available") {
		t.Fatalf("without NVML: %v %+v", err, res.Steps)
	}
}
