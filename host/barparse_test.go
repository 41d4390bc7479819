package host

import (
	"strconv"
	"strings"
	"testing"
)

// parseBARs' allocation-free helpers agree with what they replace: strings.Fields on ASCII
// text and strconv.ParseUint(s, 0, 64).
func TestBARFieldHelpers(t *testing.T) {
	t.Parallel()
	for _, line := range []string{"", " ", "a", " a  b\tc ", "0x1 0x2 0x3", "0x1 0x2", "1 2 3 4 5", "\ta\vb\fc\r"} {
		var f [3][2]int
		n := fields([]byte(line), f[:])
		want := strings.Fields(line)
		if n != len(want) {
			t.Errorf("fields(%q) = %d, want %d", line, n, len(want))
			continue
		}
		for i := 0; i < n && i < 3; i++ {
			if got := line[f[i][0]:f[i][1]]; got != want[i] {
				t.Errorf("fields(%q)[%d] = %q, want %q", line, i, got, want[i])
			}
		}
	}
	for _, s := range []string{"0x0000000000000000", "0x00000000f0000000", "0xFFFFFFFFFFFFFFFF", "0x0000000000040200",
		"0x", "0x1g", "0x10000000000000000", "0x1_0", "017", "42", "", "-1", "0X1f"} {
		got, gerr := parseUint0([]byte(s))
		want, werr := strconv.ParseUint(s, 0, 64)
		if got != want || (gerr == nil) != (werr == nil) {
			t.Errorf("parseUint0(%q) = %d, %v; strconv says %d, %v", s, got, gerr, want, werr)
		}
	}
}
