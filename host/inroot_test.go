package host

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSysfsWriterStaysInRoot: under a fake --host-root, a sysfs attribute that is a symlink
// out of the root (absolute, or relative with enough "..") used to send the write to the real
// file. Now every path resolves inside the root, with openat2 and with the fallback walk.
func TestSysfsWriterStaysInRoot(t *testing.T) {
	t.Parallel()
	for _, fallback := range []bool{false, true} {
		name := "openat2"
		if fallback {
			name = "walk"
		}
		t.Run(name, func(t *testing.T) {
			outside := filepath.Join(t.TempDir(), "victim")
			if err := os.WriteFile(outside, []byte("precious\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			root, err := NewRoot(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			root.walk = fallback
			dev := root.Sys("bus", "pci", "devices", "0000:01:00.0")
			if err := os.MkdirAll(dev, 0o755); err != nil {
				t.Fatal(err)
			}
			rel, _ := filepath.Rel(dev, outside)
			links := map[string]string{"abs_override": outside, "rel_override": rel}
			// The same file inside the root, where an in-root resolution lands.
			inRoot := root.Path(outside)
			if err := os.MkdirAll(filepath.Dir(inRoot), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(inRoot, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			w := SysfsWriter{Root: root}
			for link, target := range links {
				p := filepath.Join(dev, link)
				if err := os.Symlink(target, p); err != nil {
					t.Fatal(err)
				}
				_ = w.Write(context.Background(), p, "vfio-pci")
				if b, _ := os.ReadFile(outside); string(b) != "precious\n" {
					t.Fatalf("%s -> %s: the write left the root: %q", link, target, b)
				}
			}
			if b, _ := os.ReadFile(inRoot); string(b) != "vfio-pci" {
				t.Errorf("the absolute link did not resolve inside the root: %q", b)
			}
			// Ordinary relative links inside the tree (driver, iommu_group, ...) still work.
			real := root.Sys("devices", "pci0000:00", "attr")
			if err := os.MkdirAll(filepath.Dir(real), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(real, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("../../../../devices/pci0000:00/attr", filepath.Join(dev, "attr")); err != nil {
				t.Fatal(err)
			}
			if err := w.Write(context.Background(), filepath.Join(dev, "attr"), "1"); err != nil {
				t.Fatal(err)
			}
			if b, _ := os.ReadFile(real); string(b) != "1" {
				t.Errorf("in-root link: %q", b)
			}
			// A path outside the root is refused outright.
			if err := w.Write(context.Background(), outside, "x"); err == nil {
				t.Error("a path outside the root was written")
			}
			// A missing attribute is not created.
			if err := w.Write(context.Background(), filepath.Join(dev, "missing"), "1"); err == nil || Exists(filepath.Join(dev, "missing")) {
				t.Errorf("missing attribute: %v", err)
			}
		})
	}
}

// TestStateWritesStayInRoot: a tree whose etc is a symlink to a directory outside it (a
// snapshot of a host where /etc links elsewhere, or a hostile one) had state files written
// through the link. Root.WriteFileAtomic refuses a path that leads out of the root.
func TestStateWritesStayInRoot(t *testing.T) {
	t.Parallel()
	outside := t.TempDir()
	root, err := NewRoot(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, root.Path("etc")); err != nil {
		t.Fatal(err)
	}
	err = root.WriteFileAtomic(root.Etc("vgpu-host", "sriov.json"), []byte("{}"), 0o644)
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "outside the host root") {
		t.Fatalf("write through etc -> %s: %v", outside, err)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Fatalf("written outside the root: %v", ents)
	}
	// Links inside the root are fine, and so is a path that does not exist yet.
	if err := os.MkdirAll(root.Path("var", "real"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real", root.Path("var", "lib")); err != nil {
		t.Fatal(err)
	}
	if err := root.WriteFileAtomic(root.StateDir("new", "x.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(root.Path("var", "real", "vgpu-host", "new", "x.json")); string(b) != "{}" {
		t.Fatalf("in-root link: %q", b)
	}
}

// TestRemoveStaysInRoot: removing a persisted file (a driverctl override, an mdev definition)
// through a tree whose etc links out of it must not delete the real host's file.
func TestRemoveStaysInRoot(t *testing.T) {
	t.Parallel()
	outside := t.TempDir()
	victim := filepath.Join(outside, "override")
	if err := os.WriteFile(victim, []byte("vfio-pci\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	root, err := NewRoot(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, root.Path("etc")); err != nil {
		t.Fatal(err)
	}
	err = root.Remove(root.Etc("override"))
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "outside the host root") {
		t.Fatalf("remove through etc -> %s: %v", outside, err)
	}
	if _, err := os.Stat(victim); err != nil {
		t.Fatalf("the file outside the root is gone: %v", err)
	}
	inside := root.Path("x")
	if err := os.WriteFile(inside, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := root.Remove(inside); err != nil || Exists(inside) {
		t.Fatalf("remove inside: %v", err)
	}
}
