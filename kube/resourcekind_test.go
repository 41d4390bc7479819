package kube

import (
	"testing"

	"github.com/vgpu-host/vgpu-host/vgpu"
)

// TestResourceKindOf pins which KubeVirt resource kind each guest kind is attached through.
func TestResourceKindOf(t *testing.T) {
	want := map[vgpu.Kind]ResourceKind{
		vgpu.Passthrough:   KindPCI,
		vgpu.SRIOVVF:       KindPCI,
		vgpu.Mdev:          KindMdev,
		vgpu.VendorVFIO:    KindVendorVFIO,
		vgpu.MIGVendorVFIO: KindVendorVFIO,
		vgpu.VirtioGPU:     "",
	}
	for _, k := range vgpu.Kinds {
		w, ok := want[k]
		if !ok {
			t.Errorf("kind %s: no expectation; add it here", k)
		}
		got, needs := ResourceKindOf(k)
		if got != w || needs != (w != "") {
			t.Errorf("ResourceKindOf(%s) = %q, %v; want %q", k, got, needs, w)
		}
	}
}
