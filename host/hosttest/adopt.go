package hosttest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
)

// Adopt returns the Tree of an existing host root (a real-kernel snapshot unpacked by
// Snapshot, or a tree written earlier), so that a Kernel can emulate writes on it: every PCI
// function under sys/bus/pci/devices is known by its canonical directory, and its native
// driver is the one bound now (what a probe without driver_override binds again). IOMMU
// groups new mdevs get are numbered after the highest one present.
func Adopt(tb testing.TB, dir string) *Tree {
	tb.Helper()
	t := &Tree{tb: tb, dir: dir, devPath: map[host.Address]string{}, native: map[host.Address]string{},
		vfSpec: map[host.Address]VFSpec{}, uevent: map[host.Address]string{}}
	ents, err := os.ReadDir(filepath.Join(dir, "sys/bus/pci/devices"))
	if err != nil {
		tb.Fatalf("hosttest: adopt %s: %v", dir, err)
	}
	for _, e := range ents {
		a, err := host.ParseAddress(e.Name())
		if err != nil {
			continue
		}
		real, err := filepath.EvalSymlinks(filepath.Join(dir, "sys/bus/pci/devices", e.Name()))
		if err != nil {
			tb.Fatalf("hosttest: adopt %s: %v", dir, err)
		}
		rel, err := filepath.Rel(dir, real)
		if err != nil || strings.HasPrefix(rel, "..") {
			tb.Fatalf("hosttest: adopt %s: %s points out of the tree", dir, e.Name())
		}
		t.devPath[a] = rel
		t.native[a] = t.Driver(a)
		if b, err := os.ReadFile(filepath.Join(real, "uevent")); err == nil {
			var keep []string
			for _, l := range strings.SplitAfter(string(b), "\n") {
				if l != "" && !strings.HasPrefix(l, "DRIVER=") {
					keep = append(keep, l)
				}
			}
			t.uevent[a] = strings.Join(keep, "")
		}
	}
	r, err := host.NewRoot(dir)
	if err != nil {
		tb.Fatal(err)
	}
	t.Root = r
	return t
}
