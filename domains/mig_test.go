package domains_test

import (
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/domains"
	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/step"
	"github.com/vgpu-host/vgpu-host/vgpu"
)

// A MIG-backed vendor-VFIO type in a spec goes through the vendor-VFIO path: the VFs that list
// it once GPU instances exist, an assign-vgpu step per VF, a managed='no' PCI hostdev; the
// allocation is named mig-vendor-vfio.
func TestResolveMIGBackedVendorVFIO(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	pf := tr.NvidiaSRIOVGPU("0000:80:01.0", "0000:81:00.0", 0, 4, []hosttest.NvidiaVGPUType{
		{ID: 1210, Name: "NVIDIA H100-1-10C", MaxPerGPU: 7, MIGProfile: "1g.10gb"},
		{ID: 1212, Name: "NVIDIA H100-3-40C", MaxPerGPU: 2, MIGProfile: "3g.40gb"},
		{ID: 1213, Name: "NVIDIA H100-80C", MaxPerGPU: 1},
	})
	vm, err := domains.Parse([]byte(minimal + "  gpus:\n    - vgpu: {profile: H100-3-40C, mode: vendor-vfio, count: 2}\n"))
	if err != nil {
		t.Fatal(err)
	}
	inv, err := host.Scan(tr.Root)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := domains.Resolve(vm, inv, domains.ResolveOptions{}); err == nil {
		t.Fatal("resolved a MIG-backed type on a GPU without GPU instances")
	}
	tr.SetMIGInstances(pf, []string{"3g.40gb", "3g.40gb"})
	if inv, err = host.Scan(tr.Root); err != nil {
		t.Fatal(err)
	}
	a, err := domains.Resolve(vm, inv, domains.ResolveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ga := a.GPUs[0]
	if ga.Kind != vgpu.MIGVendorVFIO || len(ga.Slots) != 2 || ga.Slots[0].VGPUType != 1212 {
		t.Fatalf("allocation: %+v", ga)
	}
	steps, _, err := a.HostSteps(&domains.Numbering{})
	if err != nil || len(steps) != 2 {
		t.Fatalf("host steps: %v, %v", steps, err)
	}
	for i, s := range steps {
		as, ok := s.(step.AssignVGPU)
		if !ok || as.Type != 1212 || as.VF != tr.VFAddress(pf, i) {
			t.Errorf("step %d: %#v, want assign-vgpu 1212 to VF %d", i, s, i)
		}
	}
	xml, err := domains.Render(vm, a, domains.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(xml, "managed=\"no\"") != 2 {
		t.Errorf("domain XML has %d managed='no' hostdevs, want 2:\n%s", strings.Count(xml, "managed=\"no\""), xml)
	}
}
