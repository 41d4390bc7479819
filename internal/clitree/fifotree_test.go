package clitree

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/host/hosttest"
)

// TestFIFOTreeNeverWaits: a host tree (a snapshot someone sent, a hostile fake root) whose every
// file under sys/, proc/, etc/ and usr/ is a named pipe. Before, sysfs and procfs attributes,
// pci.ids and /proc/mounts were opened with a blocking open(2): opening a FIFO for reading
// waits for a writer, so inspect, check, bind --dry-run, mdev and vf listings and host layout
// show each waited for ever on the real-kernel snapshot made so. Now every command answers
// within seconds: a FIFO reads as an empty attribute (a warning or an error naming its path).
func TestFIFOTreeNeverWaits(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := hosttest.UnpackSnapshot(hosttest.SharedFixture(t, "qemu-q35-iommu-6.1.tar.gz"), dir); err != nil {
		t.Fatal(err)
	}
	n := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if top, _, _ := strings.Cut(rel, "/"); top != "sys" && top != "proc" && top != "etc" && top != "usr" {
			return nil
		}
		if err := os.Remove(p); err != nil {
			return err
		}
		n++
		return syscall.Mkfifo(p, 0o644)
	})
	if err != nil || n < 500 {
		t.Fatalf("made %d FIFOs: %v", n, err)
	}
	for _, args := range [][]string{
		{"inspect"}, {"inspect", "-o", "json"}, {"inspect", "0000:01:00.0"}, {"check"},
		{"bind", "--dry-run", "0000:01:00.0"}, {"unbind", "--dry-run", "0000:01:00.0"},
		{"mdev", "list"}, {"mdev", "types"}, {"vf", "list"}, {"host", "layout", "show"}, {"host", "restore", "--dry-run"},
	} {
		type result struct {
			out  string
			code int
		}
		done := make(chan result, 1)
		go func() {
			out, code := run(t, append([]string{"--host-root", dir, "--agent", "never"}, args...)...)
			done <- result{out, code}
		}()
		select {
		case r := <-done:
			// Whatever the verdict, it is an answer: a crash would be exit 1 with "panic".
			if strings.Contains(r.out, "panic") || strings.Contains(r.out, "goroutine ") {
				t.Errorf("%v: exit %d\n%s", args, r.code, r.out)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%v waited 20 s on a tree of FIFOs", args)
		}
	}
}
