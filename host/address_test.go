package host

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
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

// TestParseCanonicalAddressIsParseAddress: the fast path for sysfs's "DDDD:BB:SS.F" accepts
// what the general parser accepts in that form, with the same value, and nothing else: every
// single-byte change of a few addresses (each position, every byte value) and random strings
// of the form's length, against the general parser (ParseAddress with the fast path skipped).
func TestParseCanonicalAddressIsParseAddress(t *testing.T) {
	t.Parallel()
	general := func(s string) (Address, error) { return ParseAddress(" " + s) } // a space skips the fast path
	check := func(s string) {
		want, werr := general(s)
		got, ok := parseCanonicalAddress(s)
		if ok && (werr != nil || got != want) {
			t.Fatalf("parseCanonicalAddress(%q) = %v, ParseAddress = %v, %v", s, got, want, werr)
		}
		if !ok && werr == nil && ownForm(s) {
			// Refusing is safe (the general parser decides), but only a form it does not
			// cover may be refused: four domain digits, two bus and slot digits, one function.
			t.Fatalf("parseCanonicalAddress(%q) refused an address of its own form (%v)", s, want)
		}
		if a, err := ParseAddress(s); (err == nil) != (werr == nil) || a != want {
			t.Fatalf("ParseAddress(%q) = %v, %v; the general parser: %v, %v", s, a, err, want, werr)
		}
	}
	for _, base := range []string{"0000:01:00.0", "abcd:EF:1f.7", "0001:ff:10.3"} {
		for i := 0; i < len(base); i++ {
			for c := 0; c < 256; c++ {
				b := []byte(base)
				b[i] = byte(c)
				check(string(b))
			}
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	const alphabet = "0123456789abcdefABCDEFgxz:._ -+"
	for i := 0; i < 20000; i++ {
		b := make([]byte, 12)
		for j := range b {
			b[j] = alphabet[r.IntN(len(alphabet))]
		}
		b[4], b[7], b[10] = ':', ':', '.'
		if r.IntN(4) == 0 {
			b[r.IntN(12)] = alphabet[r.IntN(len(alphabet))]
		}
		check(string(b))
	}
}

// ownForm reports whether s is "DDDD:BB:SS.F" with a hex digit in every digit position.
func ownForm(s string) bool {
	if len(s) != 12 || s[4] != ':' || s[7] != ':' || s[10] != '.' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if i == 4 || i == 7 || i == 10 {
			continue
		}
		if _, ok := parseHexDigits([]byte{s[i]}, 1); !ok {
			return false
		}
	}
	return true
}
