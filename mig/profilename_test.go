package mig

import (
	"math/rand/v2"
	"regexp"
	"testing"
)

// profileNameExpr is the expression profileName matches by hand.
var profileNameExpr = regexp.MustCompile(`^([1-8])g\.([0-9]+)gb((?:\+|-)[a-z]+(?:\.[a-z]+)?)?$`)

// checkProfileName fails t when profileName and the expression disagree on n: whether it
// matches, and each of the three groups.
func checkProfileName(t *testing.T, n string) {
	t.Helper()
	m := profileNameExpr.FindStringSubmatch(n)
	slices, gb, attr, ok := profileName(n)
	if ok != (m != nil) {
		t.Fatalf("profileName(%q) ok = %v, the expression matches: %v", n, ok, m != nil)
	}
	if ok && (slices != m[1] || gb != m[2] || attr != m[3]) {
		t.Fatalf("profileName(%q) = %q %q %q, the expression's groups %q %q %q", n, slices, gb, attr, m[1], m[2], m[3])
	}
}

// profileName is the expression, on every name NVIDIA prints (the H200, H100, A100 and A30
// listings), on near misses, and on 200,000 random strings over the expression's alphabet.
func TestProfileNameMatchesRegexp(t *testing.T) {
	for _, n := range []string{
		"1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb", "1g.10gb",
		"1g.20gb", "1g.12gb", "1g.24gb", "1g.10gb+me", "1g.12gb-me", "1g.24gb+gfx", "1g.6gb+me.all",
		"8g.1gb", "9g.1gb", "0g.1gb", "1g.gb", "1g.18g", "1g.18gb+", "1g.18gb+me.", "1g.18gb+.me",
		"1g.18gb+me.all.x", "1g.18gb+ME", "1g.18gbme", "1g.18gb-", "1g18gb", "g.18gb", "1g.18gb ",
		"", "1", "1g", "1g.", "1g.1", "1g.1g", "1g.01gb", "1g.123456789012345678901234567890gb",
		"1g.18gb+m-e", "1g.18gb++me", "1g.18gb+me+me", "1g.18gb\n", "12g.1gb", "1g.1gb.me",
	} {
		checkProfileName(t, n)
	}
	r := rand.New(rand.NewPCG(7, 1))
	const alphabet = "0123456789g.b+-mealxG"
	for range 200000 {
		b := make([]byte, r.IntN(14))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		if r.IntN(3) == 0 && len(b) >= 3 { // half-way valid starts, so that the later rules are reached
			b[0], b[1], b[2] = "12345678"[r.IntN(8)], 'g', '.'
		}
		checkProfileName(t, string(b))
	}
}

// FuzzProfileName holds profileName to the expression on any input.
func FuzzProfileName(f *testing.F) {
	for _, s := range []string{"1g.18gb+me", "7g.141gb", "1g.6gb+me.all", "9g.1gb"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, n string) { checkProfileName(t, n) })
}
