package ledger

import (
	"encoding/json"
	"testing"

	"github.com/vgpu-host/vgpu-host/vgpu"
)

// TestClaimKindOf pins which claim each guest kind holds, and that every kind has an answer.
func TestClaimKindOf(t *testing.T) {
	t.Parallel()
	want := map[vgpu.Kind]ClaimKind{
		vgpu.Passthrough:   KindPCI,
		vgpu.SRIOVVF:       KindPCI,
		vgpu.Mdev:          KindMdev,
		vgpu.VendorVFIO:    KindVendorVGPU,
		vgpu.MIGVendorVFIO: KindVendorVGPU,
		vgpu.VirtioGPU:     "",
	}
	for _, k := range vgpu.Kinds {
		w, ok := want[k]
		if !ok {
			t.Errorf("kind %s: no expectation; add it here", k)
		}
		if got := ClaimKindOf(k); got != w {
			t.Errorf("ClaimKindOf(%s) = %q, want %q", k, got, w)
		}
	}
}

// TestClaimKindOnDisk pins the claim's JSON: the typed kind is written as the bare string the
// ledger files have always held, and read back from it.
func TestClaimKindOnDisk(t *testing.T) {
	t.Parallel()
	c := Claim{Kind: KindVendorVGPU, ID: "0000:41:00.4", Detail: "1155"}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), `{"kind":"vendor-vgpu","id":"0000:41:00.4","detail":"1155"}`; got != want {
		t.Fatalf("claim JSON = %s, want %s", got, want)
	}
	var back Claim
	if err := json.Unmarshal(b, &back); err != nil || back != c {
		t.Fatalf("round trip = %+v, %v; want %+v", back, err, c)
	}
	if got := claimOfKey(c.Key()); got.Kind != c.Kind || got.ID != c.ID {
		t.Fatalf("claimOfKey(%q) = %+v", c.Key(), got)
	}
}
