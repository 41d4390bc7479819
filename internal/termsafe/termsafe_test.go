package termsafe

import (
	"bytes"
	"strings"
	"testing"
)

func TestWriterEscapesControls(t *testing.T) {
	for in, want := range map[string]string{
		"plain NVIDIA H200\tnvidia\n":         "plain NVIDIA H200\tnvidia\n",
		"clear\x1b[2Jscreen":                  `clear\x1b[2Jscreen`,
		"osc\x1b]52;c;aGk=\x07":               `osc\x1b]52;c;aGk=\x07`,
		"nul\x00cr\rdel\x7f":                  `nul\x00cr\x0ddel\x7f`,
		"c1 csi \u009b2J and \u0085":          `c1 csi \u009b2J and \u0085`,
		"Größe 1g.18gb+me ✓":                  "Größe 1g.18gb+me ✓",
		"invalid \xff\xfe utf-8 stays":        "invalid \xff\xfe utf-8 stays",
		"\xc2 lone lead byte at the end \xc2": "\xc2 lone lead byte at the end \xc2",
	} {
		var b bytes.Buffer
		n, err := Writer{W: &b}.Write([]byte(in))
		if err != nil || n != len(in) || b.String() != want {
			t.Errorf("Write(%q) = %d, %v, wrote %q; want %q", in, n, err, b.String(), want)
		}
		if got := String(in); got != want {
			t.Errorf("String(%q) = %q, want %q", in, got, want)
		}
		if strings.ContainsAny(b.String(), "\x1b\x00\r\x07\x7f\u009b\u0085") {
			t.Errorf("Write(%q) passed a control character: %q", in, b.String())
		}
	}
}
