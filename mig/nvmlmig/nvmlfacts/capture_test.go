package nvmlfacts

import (
	"encoding/json"
	"os"
	"reflect"
	"testing"

	"github.com/vgpu-host/vgpu-host/host/hosttest"
)

// Capturing the replay of a real GPU gives back that GPU's capture: Capture asks what the
// capture was taken with, and the replay answers every call Capture makes: on the H200 of
// ../shared/fixtures and on the H100 of testdata/nvidia-h100.
func TestCaptureOfReplayIsTheCapture(t *testing.T) {
	for _, capture := range []string{"nvidia-h200", "nvidia-h100"} {
		t.Run(capture, func(t *testing.T) {
			path := hosttest.Capture(t, capture+"/nvml-facts.json")
			f, err := Load(path)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Capture(NewServer(f))
			if err != nil {
				t.Fatalf("capture: %v", err)
			}
			b, err := json.Marshal(got)
			if err != nil {
				t.Fatal(err)
			}
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var want, have any
			if err := json.Unmarshal(raw, &want); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &have); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(want, have) {
				w, _ := json.MarshalIndent(want, "", " ")
				h, _ := json.MarshalIndent(have, "", " ")
				t.Errorf("capture of the replay differs from the capture\nwant %s\ngot  %s", w, h)
			}
		})
	}
}

func TestZeroUUID(t *testing.T) {
	for in, want := range map[string]string{
		"GPU-5f3c9a1b-0d2e-4f60-8a7b-1c2d3e4f5a6b": "GPU-00000000-0000-0000-0000-000000000000",
		"MIG-5f3c9a1b-0d2e-4f60-8a7b-1c2d3e4f5a6b": "MIG-00000000-0000-0000-0000-000000000000",
		"abcdef12-0d2e-4f60-8a7b-1c2d3e4f5a6b":     "00000000-0000-0000-0000-000000000000",
		"":                                         "",
	} {
		if got := ZeroUUID(in); got != want {
			t.Errorf("ZeroUUID(%q) = %q, want %q", in, got, want)
		}
	}
}
