package host

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
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
