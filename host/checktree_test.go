package host_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
)

// TestCheckTree: on the real-kernel snapshot, the roots its user plainly did not mean are
// refused with the tree they meant (its dev or proc, its sys, a directory that holds only the
// snapshot, a sys linked to this machine's), and the scan says so instead of reading a host
// with no devices; the snapshot itself, an empty root and a root holding only state are hosts.
func TestCheckTree(t *testing.T) {
	t.Parallel()
	wrap := t.TempDir()
	snap := filepath.Join(wrap, "snap")
	if err := hosttest.UnpackSnapshot(hosttest.SharedFixture(t, "qemu-q35-iommu-6.1.tar.gz"), snap); err != nil {
		t.Fatal(err)
	}
	linked := t.TempDir()
	if err := os.Symlink("/sys", filepath.Join(linked, "sys")); err != nil {
		t.Fatal(err)
	}
	linkedProc := t.TempDir()
	if err := os.Mkdir(filepath.Join(linkedProc, "sys"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/proc", filepath.Join(linkedProc, "proc")); err != nil {
		t.Fatal(err)
	}
	inside := t.TempDir() // sys a link to a directory inside the tree: fine
	if err := os.Mkdir(filepath.Join(inside, "real-sys"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real-sys", filepath.Join(inside, "sys")); err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	if err := os.MkdirAll(filepath.Join(state, "var/lib/vgpu-host"), 0o755); err != nil {
		t.Fatal(err)
	}
	two := t.TempDir() // two directories, one of them a tree: no guess, a host with nothing
	if err := os.Mkdir(filepath.Join(two, "other"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(snap, filepath.Join(two, "snap-link")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		dir  string
		want string // "" for no error
	}{
		{snap, ""},
		{"/", ""},
		{t.TempDir(), ""},
		{state, ""},
		{inside, ""},
		{two, ""},
		{filepath.Join(snap, "dev"), "it has no sys directory, and " + snap + " next to it has; did you mean --host-root " + snap + "?"},
		{filepath.Join(snap, "proc"), "did you mean --host-root " + snap + "?"},
		{filepath.Join(snap, "sys"), "it is a sys directory itself; pass the directory that holds sys (" + snap + ")"},
		{wrap, "did you mean --host-root " + snap + "?"},
		{linked, filepath.Join(linked, "sys") + " is a symlink to /sys, out of the tree"},
		{linkedProc, filepath.Join(linkedProc, "proc") + " is a symlink to /proc, out of the tree"},
	} {
		r, err := host.NewRoot(c.dir)
		if err != nil {
			t.Fatal(err)
		}
		err = r.CheckTree()
		if c.want == "" {
			if err != nil {
				t.Errorf("%s: %v, want no error", c.dir, err)
			}
			continue
		}
		if !errors.Is(err, host.ErrNotATree) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrNotATree saying %q", c.dir, err, c.want)
		}
		// Every reader of the tree says so too, rather than show a host with nothing.
		if _, err := host.Scan(r); !errors.Is(err, host.ErrNotATree) {
			t.Errorf("%s: Scan: %v, want ErrNotATree", c.dir, err)
		}
		if _, err := host.ListPCIFunctions(r); !errors.Is(err, host.ErrNotATree) {
			t.Errorf("%s: ListPCIFunctions: %v, want ErrNotATree", c.dir, err)
		}
		if _, _, err := host.ReadMdevParents(r); !errors.Is(err, host.ErrNotATree) {
			t.Errorf("%s: ReadMdevParents: %v, want ErrNotATree", c.dir, err)
		}
		if _, err := host.ListMdevInstances(r); !errors.Is(err, host.ErrNotATree) {
			t.Errorf("%s: ListMdevInstances: %v, want ErrNotATree", c.dir, err)
		}
		if _, err := r.Checked(); !errors.Is(err, host.ErrNotATree) {
			t.Errorf("%s: Checked: %v, want ErrNotATree", c.dir, err)
		}
	}
	// A root Checked once is not checked again by the readers (a command checks its root once).
	r, err := host.NewRoot(snap)
	if err != nil {
		t.Fatal(err)
	}
	checked, err := r.Checked()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(snap, "sys"), filepath.Join(snap, "sys.moved")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/sys", filepath.Join(snap, "sys")); err != nil {
		t.Fatal(err)
	}
	if err := checked.CheckTree(); err != nil {
		t.Errorf("the checked root was checked again: %v", err)
	}
	if err := r.CheckTree(); !errors.Is(err, host.ErrNotATree) {
		t.Errorf("the unchecked root, its sys now a link to /sys: %v", err)
	}
}
