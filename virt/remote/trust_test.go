package remote

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
)

// TestHelperEnvTrusted: $VGPU_HOST_LIBVIRT_HELPER was run with no check. Now a helper that
// others can write, or that another user owns, is refused with the reason and a fix that
// exists (it said "use --force", which no helper has); a private one runs.
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
		if !errors.Is(err, host.ErrRefused) || !strings.Contains(err.Error(), why) || !strings.Contains(err.Error(), EnvHelper) ||
			strings.Contains(err.Error(), "--force") {
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

// TestHelperEnvSymlinkRace: the trust check and the exec both used the path, so a symlink
// flipped between them made root run the other file (15 times in 300 tries). Now the file is
// opened once, checked on the descriptor and run through it: with the link flipping between a
// good helper and a script anyone may write, the script never runs.
func TestHelperEnvSymlinkRace(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	marker, ran := filepath.Join(dir, "evil-ran"), filepath.Join(dir, "good-ran")
	good, evil := filepath.Join(dir, "good"), filepath.Join(dir, "evil")
	if err := os.WriteFile(good, []byte("#!/bin/sh\necho >>"+ran+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(evil, []byte("#!/bin/sh\necho >>"+marker+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(evil, 0o777); err != nil { // anyone may write it: refused
		t.Fatal(err)
	}
	link := filepath.Join(dir, "helper")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvHelper, link)

	stop := make(chan struct{})
	flipped := make(chan struct{})
	go func() { // flip the link atomically (rename over it): mostly good, evil for a moment
		defer close(flipped)
		tmp := filepath.Join(dir, "helper.tmp")
		point := func(target string) {
			_ = os.Remove(tmp)
			if err := os.Symlink(target, tmp); err == nil {
				_ = os.Rename(tmp, link)
			}
		}
		for {
			select {
			case <-stop:
				return
			default:
			}
			point(evil)
			runtime.Gosched()
			point(good)
			time.Sleep(200 * time.Microsecond)
		}
	}()
	var started, refused int
	for range 300 {
		p, err := HelperPath()
		if err != nil {
			if !errors.Is(err, host.ErrRefused) && !errors.Is(err, os.ErrNotExist) {
				t.Errorf("find: %v", err)
			}
			if refused < 5 {
				t.Logf("find: %v", err)
			}
			refused++
			continue
		}
		rwc, wait, err := StartHelper(p)
		if err != nil {
			if refused < 5 {
				t.Logf("start: %v", err)
			}
			refused++
			continue
		}
		rwc.Close()
		_ = wait()
		started++
	}
	close(stop)
	<-flipped
	if b, err := os.ReadFile(marker); err == nil {
		t.Fatalf("the evil script ran %d times in 300 tries (%d started, %d refused)", strings.Count(string(b), "\n"), started, refused)
	}
	if b, _ := os.ReadFile(ran); len(b) == 0 {
		t.Fatalf("the good helper never ran (%d started, %d refused)", started, refused)
	}
	t.Logf("%d started, %d refused", started, refused)
}

// TestOpenHelperRunsDescriptor: a helper opened by OpenHelper runs from its descriptor, so
// replacing the file at its path afterwards changes nothing, and a script helper works too.
func TestOpenHelperRunsDescriptor(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, HelperName)
	if err := os.WriteFile(p, []byte("#!/bin/sh\necho first \"$0\" \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvHelper, p)
	h, err := OpenHelper(HelperName, EnvHelper, "test", ErrNoHelper)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := os.Rename(p, p+".old"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("#!/bin/sh\necho second\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := h.Command(context.Background(), "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out)); !strings.HasPrefix(got, "first ") || !strings.HasSuffix(got, " --version") {
		t.Errorf("ran %q, want the first helper with --version", got)
	}
}
