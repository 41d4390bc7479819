package hosttest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
)

// UnpackSnapshot unpacks a sysfs snapshot (a .tar.gz of sys/, proc/, dev/ with symlinks kept,
// such as host/testdata/lab-snapshot.tar.gz) into dir, refusing entries that would escape it.
// Snapshot does the same into a test's temporary directory.
func UnpackSnapshot(tarball, dir string) error { return unpack(tarball, dir) }

// Adopt returns a Tree over an existing host root — an unpacked real-kernel snapshot — so that
// test setup such as Bind works on it as on a generated tree: it learns each PCI function's
// directory from sys/bus/pci/devices and its uevent (less the DRIVER line, which Bind writes)
// from the function itself, and its native driver (the one bound now), so a Kernel can emulate
// writes on it. Nothing in the tree is changed until a setup call changes it.
func Adopt(tb testing.TB, dir string) *Tree {
	tb.Helper()
	t := &Tree{tb: tb, dir: dir, devPath: map[host.Address]string{}, native: map[host.Address]string{}, vfSpec: map[host.Address]VFSpec{}, uevent: map[host.Address]string{}}
	base, err := filepath.EvalSymlinks(dir)
	if err != nil {
		tb.Fatalf("hosttest: adopt %s: %v", dir, err)
	}
	ents, err := os.ReadDir(filepath.Join(dir, "sys/bus/pci/devices"))
	if err != nil {
		tb.Fatalf("hosttest: adopt %s: %v", dir, err)
	}
	for _, e := range ents {
		a, err := host.ParseAddress(e.Name())
		if err != nil {
			continue
		}
		link := filepath.Join("sys/bus/pci/devices", e.Name())
		target, err := filepath.EvalSymlinks(filepath.Join(dir, link))
		if err != nil {
			tb.Fatalf("hosttest: adopt %s: %v", link, err)
		}
		rel, err := filepath.Rel(base, target)
		if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			tb.Fatalf("hosttest: adopt %s: %s leads out of the root", link, target)
		}
		t.devPath[a] = rel
		// The native driver is the one bound now: what a probe without driver_override
		// binds again, so the kernel emulator can restore it.
		t.native[a] = t.Driver(a)
		if b, err := os.ReadFile(filepath.Join(target, "uevent")); err == nil {
			var lines []string
			for _, l := range strings.SplitAfter(string(b), "\n") {
				if l != "" && !strings.HasPrefix(l, "DRIVER=") {
					lines = append(lines, l)
				}
			}
			t.uevent[a] = strings.Join(lines, "")
		}
	}
	if t.Root, err = host.NewRoot(dir); err != nil {
		tb.Fatal(err)
	}
	return t
}
