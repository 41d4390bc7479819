package host

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Writer makes host changes. Every write vgpu-host makes to a kernel attribute (sysfs) goes
// through a Writer, so a dry run can record the exact writes and a unit test can emulate the
// kernel's reaction on a fake tree (see package hosttest).
type Writer interface {
	// Write writes value to the attribute at path (an absolute path under the Root) in a
	// single write(2), as `echo -n value > path` would. It returns when the kernel answers
	// or ctx ends, whichever comes first.
	Write(ctx context.Context, path, value string) error
}

// ErrWriteTimeout is returned when a sysfs write did not return before its deadline: the kernel
// is usually waiting for something that holds the device (an open /dev/vfio group, a DRM client).
var ErrWriteTimeout = errors.New("sysfs write did not return in time")

// SysfsWriter writes to the real files under a Root.
type SysfsWriter struct {
	// Root is the host root the paths are under. Every path is resolved inside it
	// (OpenInRoot), so a symlink in a snapshot or fake tree cannot send a write out of it.
	// The zero Root is the real root "/".
	Root Root
}

// Write opens path write-only (never creating it: a missing attribute is the kernel's answer
// that the feature is absent) and writes value. A write that blocks past ctx's deadline is
// abandoned and reported with ErrWriteTimeout; the kernel may still complete it later.
func (w SysfsWriter) Write(ctx context.Context, path, value string) error {
	done := make(chan error, 1)
	go func() { done <- writeAttr(w.Root, path, value) }()
	select {
	case err := <-done:
		if err != nil {
			return writeFailed(path, value, err)
		}
		return nil
	case <-ctx.Done():
		return writeTimedOut(path, value, ctx.Err())
	}
}

// writeFailed is how SysfsWriter words a write the kernel refused.
func writeFailed(path, value string, err error) error {
	return fmt.Errorf("write %q to %s: %w", strings.TrimSpace(value), path, err)
}

// writeTimedOut is how SysfsWriter words a write abandoned at its deadline (cause: the
// context's error).
func writeTimedOut(path, value string, cause error) error {
	return fmt.Errorf("write %q to %s: %w (%v)", strings.TrimSpace(value), path, ErrWriteTimeout, cause)
}

// Batcher is a Writer that makes a run of writes itself (WriteEach), cheaper than one Write
// each: SysfsWriter makes them on one goroutine instead of one per write.
type Batcher interface {
	Writer
	// WriteEach is WriteEach's contract for this Writer.
	WriteEach(ctx context.Context, timeout time.Duration, writes []RecordedWrite) (int, error)
}

// WriteEach makes writes in order through w, each bounded by timeout as Write bounds one by its
// context (a write that does not return in time is abandoned and reported with
// ErrWriteTimeout), and stops at the first that fails. It returns how many succeeded and the
// error of the one that failed, worded as Write words it. A Batcher makes them itself; any
// other Writer (the dry-run Recorder, the agent's LogWriter, a test's kernel) gets them one
// Write at a time.
func WriteEach(ctx context.Context, w Writer, timeout time.Duration, writes []RecordedWrite) (int, error) {
	if b, ok := w.(Batcher); ok {
		return b.WriteEach(ctx, timeout, writes)
	}
	for i, wr := range writes {
		wctx, cancel := context.WithTimeout(ctx, timeout)
		err := w.Write(wctx, wr.Path, wr.Value)
		cancel()
		if err != nil {
			return i, err
		}
	}
	return len(writes), nil
}

// WriteEach makes the writes on one goroutine (Write starts one per write: in the lab's TCG
// guest, with a timer each, they were a fifth of a 16-instance mdev create and remove beyond
// the kernel's own work, #32). The caller waits for the whole run; each write still has its
// own deadline, timeout after it began. On a timeout or ctx's end the goroutine makes no
// further write; the one in flight may still complete in the kernel, as with Write.
func (w SysfsWriter) WriteEach(ctx context.Context, timeout time.Duration, writes []RecordedWrite) (int, error) {
	if len(writes) == 0 {
		return 0, nil
	}
	type result struct {
		n   int
		err error
	}
	var (
		mu      sync.Mutex
		current int       // the write in flight
		began   time.Time // when it began
		stop    bool      // the caller gave up: make no further write
	)
	beganAt := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return began
	}
	giveUp := func() int {
		mu.Lock()
		defer mu.Unlock()
		stop = true
		return current
	}
	done := make(chan result, 1)
	began = time.Now()
	go func() {
		for i, wr := range writes {
			mu.Lock()
			if stop {
				mu.Unlock()
				return
			}
			current, began = i, time.Now()
			mu.Unlock()
			if err := writeAttr(w.Root, wr.Path, wr.Value); err != nil {
				done <- result{i, err}
				return
			}
		}
		done <- result{len(writes), nil}
	}()
	finished := func(r result) (int, error) {
		if r.err != nil {
			return r.n, writeFailed(writes[r.n].Path, writes[r.n].Value, r.err)
		}
		return r.n, nil
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case r := <-done:
			return finished(r)
		case <-ctx.Done():
			i := giveUp()
			return i, writeTimedOut(writes[i].Path, writes[i].Value, ctx.Err())
		case <-timer.C:
			select {
			case r := <-done: // ended as the timer fired
				return finished(r)
			default:
			}
			// The write in flight may have begun after the timer was set: its own deadline is
			// timeout after it began.
			if left := time.Until(beganAt().Add(timeout)); left > 0 {
				timer.Reset(left)
				continue
			}
			i := giveUp()
			return i, writeTimedOut(writes[i].Path, writes[i].Value, context.DeadlineExceeded)
		}
	}
}

// RecordedWrite is one write a Recorder saw.
type RecordedWrite struct {
	Path  string `json:"path"`
	Value string `json:"value"`
}

// String renders the write the way a user would type it in a shell.
func (w RecordedWrite) String() string {
	v := w.Value
	if v == "\n" {
		return fmt.Sprintf("echo > %s", w.Path)
	}
	return fmt.Sprintf("echo %s > %s", v, w.Path)
}

// Recorder is the dry-run Writer: it records writes in order and changes nothing.
// If Next is set, writes are also passed on to it (useful to trace a real run).
type Recorder struct {
	Next   Writer
	mu     sync.Mutex
	writes []RecordedWrite
}

// Write records the write and passes it on to Next, if any.
func (r *Recorder) Write(ctx context.Context, path, value string) error {
	r.mu.Lock()
	r.writes = append(r.writes, RecordedWrite{Path: path, Value: value})
	r.mu.Unlock()
	if r.Next != nil {
		return r.Next.Write(ctx, path, value)
	}
	return nil
}

// Writes returns the writes recorded so far, in order.
func (r *Recorder) Writes() []RecordedWrite {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]RecordedWrite(nil), r.writes...)
}

// WaitFor polls cond every interval until it returns true, returns an error, or timeout passes.
// The kernel binds drivers asynchronously to some writes (drivers_probe, sriov_numvfs): callers
// wait for the visible result (the driver link, the virtfn links) rather than sleeping.
func WaitFor(ctx context.Context, timeout time.Duration, cond func() (bool, error)) error {
	// Most waits end at the first look (the kernel completed the write synchronously): no
	// deadline or ticker for those, timers the runtime must arm and stop (issue 19).
	if ok, err := cond(); err != nil || ok {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waited %s: %w", timeout, ErrWriteTimeout)
		case <-tick.C:
		}
		if ok, err := cond(); err != nil || ok {
			return err
		}
	}
}

// WriteFileAtomic writes data to path by writing a temporary file in the same directory,
// syncing it and renaming it over path, so a reader (or a crash) never sees half a file.
// Parent directories are created.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	return WriteFileAtomicVia(filepath.Dir(path), path, data, perm)
}

// WriteFileAtomicVia is WriteFileAtomic with the temporary file (".NAME.tmp*") in tmpDir, which
// must be on path's file system: a writer killed before the rename leaves it there, so a
// directory of many files (the ledger's one file per VM) need not be listed to find it.
func WriteFileAtomicVia(tmpDir, path string, data []byte, perm os.FileMode) error {
	if err := ReplaceFileVia(tmpDir, path, data, perm); err != nil {
		return err
	}
	SyncDir(filepath.Dir(path))
	return nil
}

// ReplaceFileVia is WriteFileAtomicVia without the fsync of path's directory: the file is
// whole and synced before it is renamed over path, but the rename itself may be lost at a
// power loss (the directory is synced by the caller, or the next fsync that commits the file
// system's journal). For a caller to whom the previous version is as good as a lost update.
func ReplaceFileVia(tmpDir, path string, data []byte, perm os.FileMode) error {
	// The directories exist on every write but the first: each is made only when the
	// temporary file cannot be created (tmpDir) or renamed (path's) without it.
	f, err := os.CreateTemp(tmpDir, "."+filepath.Base(path)+".tmp*")
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(tmpDir, 0o755); err != nil {
			return fmt.Errorf("create directory %s: %w", tmpDir, err)
		}
		f, err = os.CreateTemp(tmpDir, "."+filepath.Base(path)+".tmp*")
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	fail := func(err error) error {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		return fail(err)
	}
	if err := f.Chmod(perm); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(fmt.Errorf("sync: %w", err))
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	// rename(2) itself: os.Rename first lstats the target to refuse a directory, which
	// rename(2) refuses too (EISDIR) when the source is a file.
	err = syscall.Rename(tmp, path)
	if err == syscall.ENOENT { // path's directory is not tmpDir and does not exist yet
		dir := filepath.Dir(path)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			os.Remove(tmp)
			return fmt.Errorf("create directory %s: %w", dir, err)
		}
		err = syscall.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, &os.LinkError{Op: "rename", Old: tmp, New: path, Err: err})
	}
	return nil
}

// SyncDir fsyncs directory dir, so a rename or removal in it survives a power loss. It is best
// effort: a file system that cannot sync a directory has nothing to lose by it.
func SyncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}
