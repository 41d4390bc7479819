package domains

import (
	"testing"

	"github.com/vgpu-host/vgpu-host/vgpu"
)

// Every kind of the vocabulary but the reserved MIG one has its implementation, and every kind
// of spec entry is wanted by exactly one kind.
func TestKindsRegistered(t *testing.T) {
	for _, k := range vgpu.Kinds {
		impl, ok := kinds[k]
		if k == vgpu.MIGVendorVFIO {
			if ok {
				t.Errorf("%s is registered; update this test and docs/architecture.md", k)
			}
			continue
		}
		if !ok || impl.Name() != k {
			t.Errorf("kind %s: no implementation", k)
		}
	}
	entries := map[string]GPU{
		"passthrough": {Passthrough: &Passthrough{Address: "0000:01:00.0"}},
		"mdev":        {VGPU: &VGPU{Profile: "A100-4C"}},
		"vendor-vfio": {VGPU: &VGPU{Profile: "L40S-4Q", Mode: "vendor-vfio"}},
		"virtio-gpu":  {VirtioGPU: &VirtioGPU{}},
	}
	for want, g := range entries {
		var hits []vgpu.Kind
		for name, k := range kinds {
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
