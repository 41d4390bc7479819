package host

import "testing"

// The one viability rule shared by inspect and the binder.
func TestMemberViable(t *testing.T) {
	t.Parallel()
	cases := []struct {
		class  uint32
		driver string
		want   bool
	}{
		{0x030000, "", true},
		{0x030000, "vfio-pci", true},
		{0x030000, "nvidia", false},
		{0x040300, "snd_hda_intel", false},
		{0x060400, "pcieport", true},
		{0x060400, "", true},
		{0x060000, "", true},       // host bridge stays
		{0x060900, "shpchp", true}, // semi-transparent bridge
		{0x060400, "vfio-pci", false},
		{0x020000, "", true},
	}
	for _, c := range cases {
		if got := MemberViable(IsBridgeClass(c.class), c.driver); got != c.want {
			t.Errorf("class %06x driver %q: viable = %v, want %v", c.class, c.driver, got, c.want)
		}
	}
}
