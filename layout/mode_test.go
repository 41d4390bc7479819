package layout

import (
	"testing"

	"github.com/vgpu-host/vgpu-host/vgpu"
)

// TestModeGuestKind pins which kind of GPU a guest gets from each mode, for every mode.
func TestModeGuestKind(t *testing.T) {
	want := map[Mode]vgpu.Kind{
		ModePassthrough: vgpu.Passthrough,
		ModeSRIOV:       vgpu.SRIOVVF,
		ModeMdev:        vgpu.Mdev,
		ModeVendorVFIO:  vgpu.VendorVFIO,
		ModeMIG:         vgpu.MIGVendorVFIO,
		ModeHost:        "",
	}
	for _, m := range Modes {
		w, ok := want[m]
		if !ok {
			t.Errorf("mode %s: no expectation; add it here", m)
		}
		got, gives := m.GuestKind()
		if got != w || gives != (w != "") {
			t.Errorf("%s.GuestKind() = %q, %v; want %q", m, got, gives, w)
		}
	}
	if k, ok := Mode("bogus").GuestKind(); ok || k != "" {
		t.Errorf("unknown mode gives %q, %v", k, ok)
	}
}
