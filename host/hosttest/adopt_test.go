package hosttest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
)

// TestAdoptLabSnapshot: a Tree adopted over the unpacked real-kernel snapshot binds one of its
// GPUs as over a generated tree — the driver links, DRIVER= in uevent with the snapshot's own
// lines kept, the group's /dev/vfio node — and Scan reads the result.
func TestAdoptLabSnapshot(t *testing.T) {
	tarball := RepoFile(t, "host/testdata/lab-snapshot.tar.gz")
	if tarball == "" {
		t.Fatal("host/testdata/lab-snapshot.tar.gz is missing")
	}
	dir := t.TempDir()
	if err := UnpackSnapshot(tarball, dir); err != nil {
		t.Fatal(err)
	}
	tr := Adopt(t, dir)
	gpu := host.MustParseAddress("0000:02:00.0")
	if len(tr.Addresses()) < 10 || tr.Driver(gpu) != "" {
		t.Fatalf("adopted %d functions, %s on %q", len(tr.Addresses()), gpu, tr.Driver(gpu))
	}
	tr.Bind(gpu, "vfio-pci")
	g := tr.Group(gpu)
	if _, err := os.Stat(filepath.Join(dir, "dev/vfio", "11")); g != 11 || err != nil {
		t.Errorf("group %d, /dev/vfio/11: %v", g, err)
	}
	ue := tr.ReadFile(filepath.Join(tr.devPath[gpu], "uevent"))
	if !strings.HasPrefix(ue, "DRIVER=vfio-pci\n") || !strings.Contains(ue, "PCI_ID=1002:5046\n") {
		t.Errorf("uevent %q", ue)
	}
	inv, err := host.Scan(tr.Root)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, d := range inv.Devices {
		if d.Address == gpu {
			found = true
			if d.Driver != "vfio-pci" {
				t.Errorf("scanned %s on %q", gpu, d.Driver)
			}
		}
	}
	if !found {
		t.Errorf("scan has no %s", gpu)
	}
}
