package clitree

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/internal/testenv"
	"golang.org/x/sys/unix"
)

// hostileTreeCommands are the read-only commands a hostile host tree is run through.
var hostileTreeCommands = [][]string{
	{"inspect"}, {"inspect", "-o", "json"}, {"inspect", "0000:01:00.0"}, {"check"},
	{"bind", "--dry-run", "0000:01:00.0"}, {"unbind", "--dry-run", "0000:01:00.0"},
	{"mdev", "list"}, {"mdev", "types"}, {"vf", "list"}, {"host", "layout", "show"}, {"host", "restore", "--dry-run"},
}

// hostileSnapshot unpacks the real-kernel snapshot and replaces every regular file under sys/,
// proc/, etc/ and usr/ with what plant makes at its path; it returns the tree's directory.
func hostileSnapshot(t *testing.T, plant func(p string) error) string {
	t.Helper()
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
		return plant(p)
	})
	if err != nil || n < 500 {
		t.Fatalf("replaced %d files: %v", n, err)
	}
	return dir
}

// runHostile runs every hostileTreeCommands on dir, each within 20 s, and checks that each
// answers (no crash) and prints no raw control character (the output goes to a terminal).
func runHostile(t *testing.T, dir string) {
	t.Helper()
	for _, args := range hostileTreeCommands {
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
			if args[len(args)-1] != "json" && strings.ContainsAny(r.out, "\x00\x1b\r\u009b") {
				t.Errorf("%v printed a raw control character: %q", args, r.out)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%v waited 20 s", args)
		}
	}
}

// TestFIFOTreeNeverWaits: a host tree (a snapshot someone sent, a hostile fake root) whose every
// file under sys/, proc/, etc/ and usr/ is a named pipe. Before, sysfs and procfs attributes,
// pci.ids and /proc/mounts were opened with a blocking open(2): opening a FIFO for reading
// waits for a writer, so inspect, check, bind --dry-run, mdev and vf listings and host layout
// show each waited for ever on the real-kernel snapshot made so. Now every command answers
// within seconds: a FIFO reads as an empty attribute (a warning or an error naming its path).
func TestFIFOTreeNeverWaits(t *testing.T) {
	t.Parallel()
	runHostile(t, hostileSnapshot(t, func(p string) error { return syscall.Mkfifo(p, 0o644) }))
}

// TestEndlessFileTree: the same tree with every file a link to /dev/zero, an endless file of
// NUL bytes. Reads of the host tree were unbounded: inspect grew its heap until the kernel (or
// a 2 GB ulimit) killed it. Now a read stops at maxHostFile (32 MiB; a PCI function's
// attribute at 1 MiB) with ErrTooLarge, an error quotes at most 80 bytes of what it read, and
// the NULs in the mdev type names a table prints are escaped. Reads under a --host-root
// resolve inside it, so the links lead to the tree's own dev/zero: it is made here as the
// kernel makes /dev/zero, character device 1:5 (mknod: root).
func TestEndlessFileTree(t *testing.T) {
	t.Parallel()
	testenv.RequireRoot(t)
	dir := hostileSnapshot(t, func(p string) error { return os.Symlink("/dev/zero", p) })
	if err := unix.Mknod(filepath.Join(dir, "dev", "zero"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 5))); err != nil {
		t.Fatal(err)
	}
	runHostile(t, dir)
	// The tree's endless file was read (the attribute is NUL bytes), and the error quotes 80 of
	// them.
	_, errOut, code := asMain([]string{"--host-root", dir, "--agent", "never", "inspect", "0000:01:00.0"})
	if code != 1 || !strings.Contains(errOut, "vendor: not a hex number: \"\\x00") || len(errOut) > 1000 {
		t.Errorf("inspect 0000:01:00.0 on a tree of /dev/zero links: exit %d, want the tree's dev/zero read and quoted short:\n%s", code, errOut)
	}
}

// TestTerminalEscapesInTheTree: names read from the host tree reach the terminal escaped: an
// mdev type named with an escape sequence (clear the screen, write the clipboard) and a
// device whose driver override holds one show as \x1b… in the tables, the warnings and the
// error line, never as raw control characters.
func TestTerminalEscapesInTheTree(t *testing.T) {
	t.Parallel()
	tr := fakeHost(t)
	evil := "evil\x1b[2J\x1b]52;c;aGk=\x07\r\u009b1m"
	dir := filepath.Join(tr.Dir(), "sys/class/mdev_bus/mbochs/mdev_supported_types/mbochs-small")
	if err := os.WriteFile(filepath.Join(dir, "name"), []byte(evil+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "available_instances"), []byte(evil+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"inspect"}, {"mdev", "types"}, {"mdev", "create", "--type", "no-such-" + evil, "--parent", "mbochs", "--dry-run"}} {
		// As main runs it: the error line (vgpu-host: ...) is printed by execute.
		argv := append([]string{"--host-root", tr.Dir(), "--agent", "never"}, args...)
		var outw, errw bytes.Buffer
		app := newAppFor(testEnv(), argv)
		app.Writer, app.ErrWriter = &outw, &errw
		code := execute(app, append([]string{"vgpu-host"}, argv...), &errw)
		out := outw.String() + errw.String()
		if strings.ContainsAny(out, "\x1b\x07\r\u009b") {
			t.Errorf("%v (exit %d) printed a raw control character: %q", args, code, out)
		}
		if !strings.Contains(out, `evil\x1b[2J\x1b]52;c;aGk=\x07`) && !strings.Contains(out, `evil\x1b[2J\x1b]52;c;aGk=\a`) && !strings.Contains(out, `evil\u001b[2J`) {
			t.Errorf("%v (exit %d) does not show the escaped name:\n%s", args, code, out)
		}
	}
}
