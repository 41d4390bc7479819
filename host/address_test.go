package host

import (
	"encoding/json"
	"fmt"
	"testing"
)

func TestParseAddress(t *testing.T) {
	t.Parallel()
	good := map[string]string{
		"0000:01:00.0":     "0000:01:00.0",
		"01:00.1":          "0000:01:00.1",
		"pci_0000_41_00_3": "0000:41:00.3",
		"10000:e1:1f.7":    "10000:e1:1f.7",
		" 0000:0a:00.2 ":   "0000:0a:00.2",
	}
	for in, want := range good {
		a, err := ParseAddress(in)
		if err != nil {
			t.Errorf("ParseAddress(%q): %v", in, err)
			continue
		}
		if a.String() != want {
			t.Errorf("ParseAddress(%q) = %s, want %s", in, a, want)
		}
	}
	for _, in := range []string{"", "01:00", "0000:01:20.0", "0000:01:00.8", "zz:00.0", "0000:001:00.0", "pci_0000_01_00"} {
		if _, err := ParseAddress(in); err == nil {
			t.Errorf("ParseAddress(%q) accepted a bad address", in)
		}
	}
}

func TestAddressJSONAndLibvirt(t *testing.T) {
	t.Parallel()
	a := MustParseAddress("0000:41:00.1")
	b, _ := json.Marshal(map[string]Address{"a": a})
	if string(b) != `{"a":"0000:41:00.1"}` {
		t.Fatalf("json = %s", b)
	}
	var back map[string]Address
	if err := json.Unmarshal(b, &back); err != nil || back["a"] != a {
		t.Fatalf("round trip = %v, %v", back, err)
	}
	if a.NodeDevName() != "pci_0000_41_00_1" || !a.SameSlot(MustParseAddress("0000:41:00.0")) {
		t.Fatal("node dev name / same slot")
	}
}

// String is fmt's "%04x:%02x:%02x.%x" without fmt: the same text for every field value,
// including domains wider than four digits (VMD's 10000+).
func TestAddressStringIsPrintf(t *testing.T) {
	t.Parallel()
	for _, dom := range []uint32{0, 1, 0xa, 0xff, 0x1234, 0xffff, 0x10000, 0xabcdef, 0xffffffff} {
		for _, bus := range []uint8{0, 1, 0x1f, 0x80, 0xff} {
			for dev := uint8(0); dev <= 0x1f; dev += 0xf {
				for fn := uint8(0); fn <= 7; fn++ {
					a := Address{Domain: dom, Bus: bus, Device: dev, Function: fn}
					want := fmt.Sprintf("%04x:%02x:%02x.%x", dom, bus, dev, fn)
					if got := a.String(); got != want {
						t.Fatalf("%#v.String() = %q, want %q", a, got, want)
					}
					if b, _ := a.MarshalText(); string(b) != want {
						t.Fatalf("%#v.MarshalText() = %q, want %q", a, b, want)
					}
				}
			}
		}
	}
}
