package layout

import (
	"context"
	"errors"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
)

// TestExamples: examples/host-layouts.yaml parses and validates; every configuration plans on
// a fitting fake datacenter node, and those without MIG apply there and then plan nothing; the
// MIG ones are refused as unsupported while NVML is not wired in (no go-nvml mock of our own).
func TestExamples(t *testing.T) {
	f, _, err := ReadFile("../examples/host-layouts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"mixed", "training", "training-mig", "vdi", "host"} {
		if _, ok := f.Configs[want]; !ok {
			t.Errorf("examples lack configuration %q", want)
		}
	}
	if name, _, err := f.Select(""); err != nil || name != "mixed" {
		t.Errorf("default configuration %q %v", name, err)
	}
	mig := map[string]bool{"mixed": true, "training-mig": true}
	for _, name := range f.Names() {
		t.Run(name, func(t *testing.T) {
			_, k, h := dcHost(t)
			p, err := PlanConfig(context.Background(), h, f, name, nil)
			if mig[name] {
				if !errors.Is(err, host.ErrUnsupported) {
					t.Fatalf("plan %s without NVML: %v", name, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("plan %s: %v", name, err)
			}
			if len(k.Writes()) != 0 {
				t.Fatal("plan wrote")
			}
			if _, err := Apply(context.Background(), h, p, ApplyOptions{}); err != nil {
				t.Fatalf("apply %s: %v", name, err)
			}
			if p, err := PlanConfig(context.Background(), h, f, name, nil); err != nil || !p.Empty() {
				t.Fatalf("plan %s after apply: %v %v", name, actions(p), err)
			}
		})
	}
}
