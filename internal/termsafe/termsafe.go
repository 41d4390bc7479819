// Package termsafe keeps what vgpu-host prints for a person from driving their terminal. The
// tables and messages carry strings read from the host tree (device, driver and mdev type
// names, attributes) and from files others wrote (a snapshot someone sent, a spec): a NUL, a
// carriage return or an escape sequence there (ESC [ 2 J clears the screen; OSC 52 writes the
// clipboard) would reach the terminal as a command. Writer shows every control character but
// the tab and the newline the tables are laid out with as an escape (\x1b, \x00, \u009b), and
// passes everything else, valid UTF-8 and invalid bytes alike, unchanged.
package termsafe

import (
	"fmt"
	"io"
	"strings"
)

// Writer writes to W what it is given with the control characters escaped (package comment).
// Each Write escapes what it is given on its own, so a UTF-8 C1 control (two bytes) split
// across two writes passes: callers write whole cells or lines (tabwriter, fmt.Fprintf).
type Writer struct{ W io.Writer }

// Write writes p with its control characters escaped; it reports len(p) on success, as an
// io.Writer must, however many bytes the escapes took.
func (t Writer) Write(p []byte) (int, error) {
	i := firstControl(p)
	if i < 0 {
		return t.W.Write(p)
	}
	out := make([]byte, 0, len(p)+16)
	out = append(out, p[:i]...)
	for i < len(p) {
		c := p[i]
		switch {
		case c == '\t' || c == '\n':
			out = append(out, c)
			i++
		case c < 0x20 || c == 0x7f:
			out = fmt.Appendf(out, `\x%02x`, c)
			i++
		case c == 0xc2 && i+1 < len(p) && p[i+1] >= 0x80 && p[i+1] <= 0x9f: // U+0080-U+009F
			out = fmt.Appendf(out, `\u%04x`, rune(p[i+1]))
			i += 2
		default:
			out = append(out, c)
			i++
		}
	}
	if _, err := t.W.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// String is s with its control characters escaped as Writer escapes them.
func String(s string) string {
	if firstControl([]byte(s)) < 0 {
		return s
	}
	var b strings.Builder
	Writer{W: &b}.Write([]byte(s))
	return b.String()
}

// firstControl is the index of p's first byte Writer escapes, -1 when there is none.
func firstControl(p []byte) int {
	for i, c := range p {
		switch {
		case c == '\t' || c == '\n':
		case c < 0x20 || c == 0x7f:
			return i
		case c == 0xc2 && i+1 < len(p) && p[i+1] >= 0x80 && p[i+1] <= 0x9f:
			return i
		}
	}
	return -1
}
