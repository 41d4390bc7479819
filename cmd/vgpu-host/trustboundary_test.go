package main

import (
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host/hosttest"
)

// TestMdevCreateFirstIndexRange: --first-index -3 and 9223372036854775807 were accepted (the
// second overflowed FirstIndex+i). A VM's instances are numbered 0..255 as apply numbers them;
// anything outside, or a count that runs past 255, is a usage error naming the range.
func TestMdevCreateFirstIndexRange(t *testing.T) {
	tr := hosttest.New(t)
	tr.Mbochs()
	withKernel(t, tr)
	r := tr.Dir()
	create := []string{"--host-root", r, "mdev", "create", "--parent", "mbochs", "--type", "small", "--name", "vm1"}
	for _, c := range [][]string{
		{"--first-index=-3"},
		{"--first-index", "-3"},
		{"--first-index", "9223372036854775807"},
		{"--first-index", "256"},
		{"--first-index", "255", "--count", "2"},
	} {
		out, err := runErr(t, append(append([]string{}, create...), c...)...)
		if code := exitCode(err); code != exitUsage {
			t.Errorf("%v: exit %d, want 2: %v\n%s", c, code, err, out)
			continue
		}
		if c[0] != "--first-index" || c[1] != "-3" { // "-3" alone may read as a flag to the parser
			if !strings.Contains(err.Error(), "0..255") {
				t.Errorf("%v: the error does not name the range: %v", c, err)
			}
		}
	}
	if out, code := run(t, append(create, "--first-index", "255", "--dry-run")...); code != 0 {
		t.Errorf("--first-index 255: exit %d\n%s", code, out)
	}
}

// TestDestroyMalformedNameExits2: destroy ../../etc exited 6 (not found) where the README
// gives a malformed name 2; and nothing is destroyed when one of the names is malformed.
func TestDestroyMalformedNameExits2(t *testing.T) {
	tr := hosttest.New(t)
	fakeLibvirt(t)
	for _, args := range [][]string{{"../../etc"}, {"ok", "a/b"}, {".."}} {
		out, err := runErr(t, append([]string{"--host-root", tr.Dir(), "destroy"}, args...)...)
		if code := exitCode(err); code != exitUsage || !strings.Contains(err.Error(), "VM name") {
			t.Errorf("destroy %v: exit %d, want 2 naming the VM name: %v\n%s", args, code, err, out)
		}
	}
}

