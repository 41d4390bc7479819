package lifecycle

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/domains"
	"github.com/vgpu-host/vgpu-host/ledger"
)

// The zero value of every result type (nil slices everywhere, as a VM without devices or an
// unchanged re-apply builds them) encodes its arrays as [], by value and by pointer, and the
// slices that are set are kept.
func TestResultJSONArraysNeverNull(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		v    any
		want []string
	}{
		{VMPlan{VM: "a", Alloc: &domains.Allocation{}}, []string{`"claims":[]`, `"steps":[]`, `"gpus":[]`}},
		{&VMPlan{VM: "a"}, []string{`"claims":[]`, `"steps":[]`, `"allocation":null`}},
		{VMApplyResult{VM: "a"}, []string{`"steps":[]`, `"claims":[]`}},
		{&DestroyResult{VM: "a"}, []string{`"undone":[]`, `"released":[]`}},
		{DestroyResult{VM: "a", Released: []ledger.Claim{{Kind: "pci", ID: "0000:01:00.0"}}}, []string{`"released":[{"kind":"pci","id":"0000:01:00.0"}]`}},
		{[]VMStatus{{Name: "a"}}, []string{`"claims":[]`}},
		{&VerifyResult{VM: "a"}, []string{`"checks":[]`}},
	} {
		b, err := json.Marshal(c.v)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range c.want {
			if !strings.Contains(string(b), w) {
				t.Errorf("%T: %s lacks %s", c.v, b, w)
			}
		}
	}
	// The one nullable field: a VMPlan built without an allocation (never by Plan itself) keeps
	// allocation null rather than inventing one; nothing else is null.
	b, _ := json.Marshal(VMApplyResult{VM: "a"})
	if strings.Contains(string(b), "null") {
		t.Errorf("Result: %s", b)
	}
}
