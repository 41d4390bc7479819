package archtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckGo runs scripts/check-go.sh, the Makefile's first step, as make runs it: with a
// PATH that may lack Go (GNU make 4.3 gives $(shell) its own PATH, not the one the Makefile
// exports to recipes).
func TestCheckGo(t *testing.T) {
	t.Parallel()
	script := filepath.Join(moduleRoot(t), "scripts", "check-go.sh")
	// An empty HOME with Go's telemetry off. With no mode file, telemetry is "local", and the go
	// command forks a child that outlives it and writes under $HOME/.config/go/telemetry: it
	// raced t.TempDir's removal once in CI ("unlinkat ...: directory not empty").
	home := t.TempDir()
	mode := filepath.Join(home, ".config", "go", "telemetry", "mode")
	if err := os.MkdirAll(filepath.Dir(mode), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(mode, []byte("off"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(path string, args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command("bash", append([]string{script}, args...)...)
		cmd.Env = []string{"PATH=" + path, "HOME=" + home}
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	base := "/usr/bin:/bin"

	out, code := run(base, "nosuchgo")
	if code != 1 || !strings.Contains(out, "'nosuchgo' is not in PATH") {
		t.Errorf("missing toolchain: exit %d, %q", code, out)
	}

	old := t.TempDir()
	fake := "#!/bin/sh\n[ \"$1 $2\" = \"env GOVERSION\" ] && echo go1.19.8\n"
	if err := os.WriteFile(filepath.Join(old, "go"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	out, code = run(old + ":" + base)
	if code != 1 || !strings.Contains(out, "is go1.19.8") || !strings.Contains(out, "Go 1.") {
		t.Errorf("old toolchain: exit %d, %q", code, out)
	}

	// Not in PATH, but where the README installs it: found, as the Makefile's recipes find it.
	if _, err := os.Stat("/usr/local/go/bin/go"); err != nil {
		t.Logf("no /usr/local/go/bin/go on this machine: the fallback is not exercised")
		return
	}
	out, code = run(base)
	if code != 0 || out != "" {
		t.Errorf("Go in /usr/local/go/bin, not in PATH: exit %d, %q", code, out)
	}
}
