package host

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// On the real root SysfsWriter writes through the bare file descriptor (writeAttr): the value
// lands whole, a missing attribute is ENOENT naming the path and is never created, and a
// read-only one fails naming it. The files are in t.TempDir(): nothing of the host is touched.
func TestSysfsWriterRealRootRawFD(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	attr := filepath.Join(dir, "driver_override")
	if err := os.WriteFile(attr, []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	w := SysfsWriter{} // the zero Root is "/"
	ctx := context.Background()
	if err := w.Write(ctx, attr, "vfio-pci"); err != nil {
		t.Fatal(err)
	}
	// O_WRONLY without O_TRUNC, as `echo -n` into a sysfs attribute: the value overwrites
	// the start of a regular file.
	if b, _ := os.ReadFile(attr); string(b) != "vfio-pci" {
		t.Fatalf("file holds %q", b)
	}
	missing := filepath.Join(dir, "remove")
	err := w.Write(ctx, missing, "1")
	var pe *fs.PathError
	if !errors.Is(err, fs.ErrNotExist) || !errors.As(err, &pe) || pe.Path != missing || !strings.Contains(err.Error(), `write "1" to `+missing) {
		t.Fatalf("missing attribute: %v", err)
	}
	if _, err := os.Lstat(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("the write created the missing attribute")
	}
	if os.Geteuid() != 0 { // root writes read-only files
		ro := filepath.Join(dir, "ro")
		os.WriteFile(ro, nil, 0o444)
		if err := w.Write(ctx, ro, "1"); !errors.Is(err, fs.ErrPermission) {
			t.Fatalf("read-only attribute: %v", err)
		}
	}
}

// WaitFor looks once before arming its deadline: a condition that already holds returns at
// once even with a context that is already done, and one that never holds is ErrWriteTimeout.
func TestWaitForFirstLookThenPoll(t *testing.T) {
	t.Parallel()
	done, cancel := context.WithCancel(context.Background())
	cancel()
	looks := 0
	if err := WaitFor(done, time.Millisecond, func() (bool, error) { looks++; return true, nil }); err != nil || looks != 1 {
		t.Fatalf("a condition that holds: %v after %d looks", err, looks)
	}
	looks = 0
	if err := WaitFor(context.Background(), time.Second, func() (bool, error) { looks++; return looks == 3, nil }); err != nil || looks != 3 {
		t.Fatalf("a condition that holds at the third look: %v after %d looks", err, looks)
	}
	if err := WaitFor(context.Background(), 10*time.Millisecond, func() (bool, error) { return false, nil }); !errors.Is(err, ErrWriteTimeout) {
		t.Fatalf("a condition that never holds: %v", err)
	}
}

// SysfsWriter.WriteEach makes the writes in order on one goroutine and stops at the first
// that fails, with Write's wording; a write that blocks (a FIFO without a reader, as a sysfs
// store that waits on its device) is ErrWriteTimeout after timeout, counted from when that
// write began, and no write after it is made. WriteEach through a Writer that is not a
// Batcher (the Recorder) makes the same writes one Write at a time.
func TestWriteEachStopsAtTheFirstFailureOrTimeout(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := func(name, v string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a, b, c := file("a", "-"), file("b", "-"), file("c", "-")
	w := SysfsWriter{} // the zero Root is "/": the files are in t.TempDir()
	ctx := context.Background()
	n, err := WriteEach(ctx, w, time.Second, []RecordedWrite{{Path: a, Value: "1"}, {Path: b, Value: "2"}})
	if n != 2 || err != nil {
		t.Fatalf("two writes: %d, %v", n, err)
	}
	for p, want := range map[string]string{a: "1", b: "2", c: "-"} {
		if got, _ := os.ReadFile(p); string(got) != want {
			t.Fatalf("%s holds %q, want %q", p, got, want)
		}
	}
	missing := filepath.Join(dir, "remove")
	n, err = WriteEach(ctx, w, time.Second, []RecordedWrite{{Path: a, Value: "3"}, {Path: missing, Value: "1"}, {Path: c, Value: "4"}})
	if n != 1 || !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), `write "1" to `+missing) {
		t.Fatalf("a missing attribute second: %d, %v", n, err)
	}
	if got, _ := os.ReadFile(c); string(got) != "-" {
		t.Fatalf("the write after the failed one was made: c holds %q", got)
	}

	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	const timeout = 150 * time.Millisecond
	start := time.Now()
	n, err = WriteEach(ctx, w, timeout, []RecordedWrite{{Path: a, Value: "5"}, {Path: fifo, Value: "x"}, {Path: c, Value: "6"}})
	took := time.Since(start)
	if n != 1 || !errors.Is(err, ErrWriteTimeout) || !strings.Contains(err.Error(), `write "x" to `+fifo) {
		t.Fatalf("a write that blocks: %d, %v", n, err)
	}
	if took < timeout || took > 20*timeout {
		t.Fatalf("the blocked write timed out after %s, want about %s", took, timeout)
	}
	// Let the abandoned write finish: the writer must not go on to c.
	r, err := os.OpenFile(fifo, os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8)
	r.Read(buf)
	r.Close()
	time.Sleep(50 * time.Millisecond)
	if got, _ := os.ReadFile(c); string(got) != "-" {
		t.Fatalf("the write after the one that timed out was made: c holds %q", got)
	}

	var rec Recorder
	n, err = WriteEach(ctx, &rec, time.Second, []RecordedWrite{{Path: a, Value: "7"}, {Path: c, Value: "8"}})
	if got := rec.Writes(); n != 2 || err != nil || len(got) != 2 || got[0].Value != "7" || got[1].Path != c {
		t.Fatalf("through the Recorder: %d, %v, %v", n, err, got)
	}
}
