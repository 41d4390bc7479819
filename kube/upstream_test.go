package kube_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/vgpu-host/vgpu-host/internal/kubetest"
)

// TestStrictRoundTripCatchesSwallowedField proves the judge can fail: KubeVirt's VMI spec
// decoder accepts a misspelled "hostDevice" under DisallowUnknownFields.
func TestStrictRoundTripCatchesSwallowedField(t *testing.T) {
	ok := []byte(`{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachine","metadata":{"name":"x"},"spec":{"runStrategy":"Always","template":{"spec":{"domain":{"devices":{"hostDevices":[{"name":"a","deviceName":"nvidia.com/X"}]}}}}}}`)
	if err := kubetest.StrictRoundTrip[kubevirtv1.VirtualMachine](ok); err != nil {
		t.Fatalf("a correct manifest failed: %v", err)
	}
	bad := bytes.Replace(ok, []byte(`"hostDevices"`), []byte(`"hostDevice"`), 1)
	var vm kubevirtv1.VirtualMachine
	dec := json.NewDecoder(bytes.NewReader(bad))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&vm); err != nil {
		t.Logf("strict decode alone catches it now (%v); the leaf check stays as a second guard", err)
	}
	err := kubetest.StrictRoundTrip[kubevirtv1.VirtualMachine](bad)
	if err == nil || !strings.Contains(err.Error(), "hostDevice") {
		t.Fatalf("misspelled hostDevice not caught: %v", err)
	}
	// A field at the top level is caught by the strict decode itself.
	if err := kubetest.StrictRoundTrip[kubevirtv1.VirtualMachine](bytes.Replace(ok, []byte(`"runStrategy"`), []byte(`"runstrategy"`), 1)); err == nil {
		t.Fatal("misspelled runStrategy not caught")
	}
}
