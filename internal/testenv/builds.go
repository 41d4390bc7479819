package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// Builds are the builds of one of the module's commands that a test binary's tests share, by
// build tags ("" is the release build): each is made once, on first use, in a directory of its
// own under one temporary directory that Remove deletes (from TestMain, after the tests).
// Building and linking a command (the cgo NVML helper) costs seconds; the tests only run it.
// A failed build is remembered, so the tests after it fail at once with the same error.
type Builds struct {
	// Pkg is the command's package, relative to the test's directory ("../../cmd/vgpu-host-nvml").
	Pkg string
	// Name is the built file's name (the name the code under test looks for it by).
	Name string

	mu    sync.Mutex
	dir   string
	built map[string]string // tags → path
	err   map[string]error
}

// Get returns the command built with tags, building it on first use.
func (b *Builds) Get(t testing.TB, tags string) string {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if p, ok := b.built[tags]; ok {
		return p
	}
	if err, ok := b.err[tags]; ok {
		t.Fatal(err)
	}
	p, err := b.build(tags)
	if err != nil {
		b.err[tags] = err
		t.Fatal(err)
	}
	b.built[tags] = p
	return p
}

func (b *Builds) build(tags string) (string, error) {
	if b.dir == "" {
		d, err := os.MkdirTemp("", "vgpu-host-builds")
		if err != nil {
			return "", err
		}
		b.dir = d
	}
	if b.built == nil {
		b.built, b.err = map[string]string{}, map[string]error{}
	}
	sub, err := os.MkdirTemp(b.dir, "tags")
	if err != nil {
		return "", err
	}
	out := filepath.Join(sub, b.Name)
	args := []string{"build", "-o", out}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	cmd := exec.Command(GoTool(), append(args, b.Pkg)...)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s (tags %q): %v\n%s", b.Pkg, tags, err, msg)
	}
	return out, nil
}

// Remove deletes every build.
func (b *Builds) Remove() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dir != "" {
		os.RemoveAll(b.dir)
	}
}

// GoTool is the go command of the toolchain that built the running test binary: tests that
// build or list packages use it, so they see what `go test` saw whatever PATH holds.
func GoTool() string {
	//lint:ignore SA1019 the test binary's own GOROOT is the one meant: it was built moments ago on this machine
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}
