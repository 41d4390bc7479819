package fetch

import (
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	for in, want := range map[string]string{
		"ftp://x/y.iso":       "want an http:// or https:// URL",
		"https:///y.iso":      "want an http",
		"https://example/":    "names no file",
		"https://example/../": "names no file",
	} {
		if _, err := CheckURL(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v", in, err)
		}
	}
	if n, err := CheckURL("https://cdimage.example/debian-12.8.0-amd64-netinst.iso?x=1"); err != nil || n != "debian-12.8.0-amd64-netinst.iso" {
		t.Errorf("%q %v", n, err)
	}
	for in, want := range map[string]string{
		"md5:abcd":       "want sha256:HEX or sha512:HEX",
		"sha256:abcd":    "64 hex digits",
		"sha512:" + "zz": "128 hex digits",
	} {
		if _, _, err := ParseChecksum(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v", in, err)
		}
	}
}
