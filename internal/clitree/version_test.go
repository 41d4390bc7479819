package clitree

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/internal/buildinfo"
	"github.com/vgpu-host/vgpu-host/virt/remote"
)

// helperScript writes an executable that answers --version with line, standing in for the
// helper at $VGPU_HOST_LIBVIRT_HELPER (the deb test runs the real one).
func helperScript(t *testing.T, line string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), remote.HelperName)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n[ \"$1\" = --version ] || exit 2\necho '"+line+"'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestVersion: -o json has version and commit; the helper is reported found and matching only
// when its --version names the same build, and a missing helper is said, with exit 0.
func TestVersion(t *testing.T) {
	self := buildinfo.Get()
	other := self
	other.Commit = "0123456789ab"
	for _, tc := range []struct {
		name           string
		helper         string
		found, matches bool
		errPart        string
	}{
		{"same build", helperScript(t, self.Line(remote.HelperName)), true, true, ""},
		{"other commit", helperScript(t, other.Line(remote.HelperName)), true, false, ""},
		{"garbage answer", helperScript(t, "usage: something"), true, false, "unexpected --version answer"},
		{"missing", filepath.Join(t.TempDir(), "nope"), false, false, "not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(remote.EnvHelper, tc.helper)
			out, errOut, code := runSplit(t, "-o", "json", "version")
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			var r struct {
				Version, Commit, Go string
				Helper              helperReport
			}
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				t.Fatalf("%v:\n%s", err, out)
			}
			if r.Version != self.Version || r.Commit != self.Commit || r.Go != self.Go || r.Version == "" || r.Commit == "" {
				t.Errorf("got %+v, want %+v", r, self)
			}
			h := r.Helper
			if h.Found != tc.found || h.Matches != tc.matches || !strings.Contains(h.Error, tc.errPart) {
				t.Errorf("helper %+v: want found %v, matches %v, error containing %q", h, tc.found, tc.matches, tc.errPart)
			}
			if tc.found && h.Path != tc.helper {
				t.Errorf("helper path %q, want %q", h.Path, tc.helper)
			}
			table, _, _ := runSplit(t, "version")
			if !strings.HasPrefix(table, "vgpu-host  "+self.Version+"\n") || !strings.Contains(table, "helper ") {
				t.Errorf("table:\n%s", table)
			}
		})
	}
}

// TestVersionLineRoundTrip: what the helper prints, vgpu-host reads back.
func TestVersionLineRoundTrip(t *testing.T) {
	t.Parallel()
	in := buildinfo.Info{Version: "v1.2.3", Commit: "5f1c2e9-dirty", Go: "go1.26.8"}
	got, err := buildinfo.ParseLine(remote.HelperName, in.Line(remote.HelperName))
	if err != nil || got != in {
		t.Fatalf("got %+v, %v; want %+v", got, err, in)
	}
	if _, err := buildinfo.ParseLine("vgpu-host", in.Line(remote.HelperName)); err == nil {
		t.Error("a line naming another binary parsed")
	}
}
