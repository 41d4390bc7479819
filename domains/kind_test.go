package domains

import (
	"testing"

	"github.com/vgpu-host/vgpu-host/vgpu"
)

// Every kind of the vocabulary has its implementation, and every kind of spec entry is wanted
// by exactly one kind (the MIG-backed vendor-VFIO kind by none: vendor-vfio's resolve picks it).
func TestKindsRegistered(t *testing.T) {
	t.Parallel()
	for _, k := range vgpu.Kinds {
		impl, ok := kinds.Get()[k]
		if !ok || impl.Name() != k {
			t.Errorf("kind %s: no implementation", k)
		}
	}
	if len(allKinds()) != len(vgpu.Kinds) {
		t.Errorf("allKinds lists %d kinds, vgpu.Kinds %d", len(allKinds()), len(vgpu.Kinds))
	}
	entries := map[string]GPU{
		"passthrough": {Passthrough: &Passthrough{Address: "0000:01:00.0"}},
		"mdev":        {VGPU: &VGPU{Profile: "A100-4C"}},
		"vendor-vfio": {VGPU: &VGPU{Profile: "L40S-4Q", Mode: "vendor-vfio"}},
		"virtio-gpu":  {VirtioGPU: &VirtioGPU{}},
	}
	for want, g := range entries {
		var hits []vgpu.Kind
		for name, k := range kinds.Get() {
			if k.wants(g) {
				hits = append(hits, name)
			}
		}
		if len(hits) != 1 || string(hits[0]) != want {
			t.Errorf("entry %s is wanted by %v", want, hits)
		}
	}
	if _, err := kindFor(GPU{}); err == nil {
		t.Error("an empty entry has a kind")
	}
}

// TestPassthroughBindingOwner: by default vgpu-host owns the binding (a bind-group step, and
// managed='no' so libvirt does not detach and reattach behind it); managed: true hands it to
// libvirt (managed='yes', no bind-group step).
func TestPassthroughBindingOwner(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		managed   bool
		want      string
		wantSteps int
	}{{false, "no", 1}, {true, "yes", 0}} {
		vm := &VM{APIVersion: APIVersion, Kind: Kind, Metadata: Metadata{Name: "own"}}
		vm.Spec.VCPUs, vm.Spec.Memory = 1, MustSize("1GiB")
		vm.Spec.GPUs = []GPU{{Passthrough: &Passthrough{Address: "0000:41:00.0", Managed: c.managed}}}
		alloc, err := Resolve(vm, nil, ResolveOptions{Offline: true})
		if err != nil {
			t.Fatal(err)
		}
		d, err := Build(vm, alloc, BuildOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n := len(d.Devices.Hostdevs); n != 1 || d.Devices.Hostdevs[0].Managed != c.want {
			t.Errorf("managed %v: hostdevs %d, managed=%q, want %q", c.managed, n, d.Devices.Hostdevs[0].Managed, c.want)
		}
		steps, _, err := alloc.HostSteps(&Numbering{})
		if err != nil || len(steps) != c.wantSteps {
			t.Errorf("managed %v: host steps %v (%v), want %d", c.managed, steps, err, c.wantSteps)
		}
	}
}
