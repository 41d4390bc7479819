package remote

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
)

// TestHelperEnvTrusted: $VGPU_HOST_LIBVIRT_HELPER was run with no check. Now a helper that
// others can write, or that another user owns, is refused with the reason; a private one runs.
func TestHelperEnvTrusted(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, HelperName)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvHelper, p)
	if got, err := HelperPath(); err != nil || got != p {
		t.Fatalf("a private helper: %q, %v", got, err)
	}

	refused := func(why string) {
		t.Helper()
		_, err := HelperPath()
		if !errors.Is(err, host.ErrRefused) || !strings.Contains(err.Error(), why) || !strings.Contains(err.Error(), EnvHelper) {
			t.Errorf("want a refusal saying %q, got %v", why, err)
		}
	}
	if err := os.Chmod(p, 0o777); err != nil {
		t.Fatal(err)
	}
	refused("writable by group or others")
	if err := os.Chmod(p, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	refused("writable by group or others")
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if os.Getuid() == 0 {
		if err := os.Chown(p, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		refused("owned by uid 65534")
	}
}
