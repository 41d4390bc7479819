package domains_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/domains"
	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
)

// On the real H200 host's capture, with the pci.ids that host had (it does not list the H200):
// `model: H200` selects nothing, and the error says why and how to select the GPU instead; the
// IDs it suggests do select it.
func TestModelSelectorOnH200(t *testing.T) {
	t.Parallel()
	inv, err := host.Scan(hosttest.RealGPUSnapshot(t, "nvidia-h200/sysfs-snapshot.tar.gz"))
	if err != nil {
		t.Fatal(err)
	}
	resolve := func(sel string) (*domains.Allocation, error) {
		t.Helper()
		vm, err := domains.Parse([]byte(minimal + "  gpus:\n    - passthrough: " + sel + "\n"))
		if err != nil {
			t.Fatal(err)
		}
		if err := vm.Validate(); err != nil {
			t.Fatal(err)
		}
		return domains.Resolve(vm, inv, domains.ResolveOptions{})
	}
	_, err = resolve(`{model: "H200"}`)
	if !errors.Is(err, host.ErrNotFound) {
		t.Fatalf("model H200: %v, want not found", err)
	}
	for _, want := range []string{`model="H200"`, "pci.ids names no device for 0000:00:06.0 (10de:2335)", `vendor: "10de", device: "2335"`, "update-pciids"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("model H200: %q lacks %q", err, want)
		}
	}
	a, err := resolve(`{vendor: "10de", device: "2335"}`)
	if err != nil || len(a.GPUs) != 1 || len(a.GPUs[0].Slots) != 1 || a.GPUs[0].Slots[0].Functions[0] != host.MustParseAddress("0000:00:06.0") {
		t.Fatalf("vendor/device: %+v, %v", a, err)
	}
}

// Where every GPU has a pci.ids name, a model that matches none gets no pci.ids hint.
func TestModelSelectorNoHintWhenNamed(t *testing.T) {
	t.Parallel()
	inv, err := host.Scan(hosttest.RealGPUSnapshot(t, "nvidia-h100/sysfs-snapshot.tar.gz"))
	if err != nil {
		t.Fatal(err)
	}
	vm, err := domains.Parse([]byte(minimal + "  gpus:\n    - passthrough: {model: \"H200\"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = domains.Resolve(vm, inv, domains.ResolveOptions{})
	if !errors.Is(err, host.ErrNotFound) || strings.Contains(err.Error(), "pci.ids") {
		t.Errorf("model H200 on the H100: %v", err)
	}
}
