package hosttest

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
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

// TestAdoptKernelLabSnapshot: the kernel emulator on the real-kernel lab snapshot (Adopt), as the
// Cockpit page's browser test uses it through the fakekernel agent: binding the GPU's group
// (its audio taken from snd_hda_intel) makes the group viable, with its /dev/vfio node; an
// mdev created on a sample parent takes one instance and gives it back on remove; unbinding
// with an empty override brings the audio's native driver back.
func TestAdoptKernelLabSnapshot(t *testing.T) {
	p := RepoFile(t, "host/testdata/lab-snapshot.tar.gz")
	if p == "" {
		t.Fatal("host/testdata/lab-snapshot.tar.gz is missing: make lab-snapshot captures it")
	}
	tr := Adopt(t, Snapshot(t, p).Dir())
	k := NewKernel(tr)
	ctx := context.Background()
	r := tr.Root
	must := func(p, v string) {
		t.Helper()
		if err := k.Write(ctx, p, v); err != nil {
			t.Fatal(err)
		}
	}
	gpu, _ := host.ParseAddress("0000:01:00.0")
	audio, _ := host.ParseAddress("0000:01:00.1")
	group := func() host.Group {
		t.Helper()
		inv, err := host.Scan(r)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range inv.Groups {
			for _, m := range g.Members {
				if m.Address == gpu {
					return g
				}
			}
		}
		t.Fatalf("no group holds %s", gpu)
		return host.Group{}
	}
	if g := group(); g.Viable || len(g.Blockers) != 1 || g.Blockers[0].Address != audio {
		t.Fatalf("before: group %+v, want not viable, blocked by %s", g, audio)
	}
	if tr.Driver(audio) != "snd_hda_intel" {
		t.Fatalf("audio driver %q", tr.Driver(audio))
	}
	must(r.PCIDevice(gpu, "driver_override"), "vfio-pci")
	must(r.Sys("bus/pci/drivers_probe"), gpu.String())
	must(r.PCIDevice(audio, "driver_override"), "vfio-pci")
	must(r.Sys("bus/pci/drivers/snd_hda_intel/unbind"), audio.String())
	must(r.Sys("bus/pci/drivers_probe"), audio.String())
	g := group()
	if !g.Viable || len(g.Blockers) != 0 || tr.Driver(gpu) != "vfio-pci" || tr.Driver(audio) != "vfio-pci" {
		t.Fatalf("after bind: group %+v, drivers %q %q", g, tr.Driver(gpu), tr.Driver(audio))
	}
	if _, err := os.Stat(filepath.Join(tr.Dir(), "dev/vfio", strconv.Itoa(g.ID))); err != nil {
		t.Errorf("no /dev/vfio node for group %d: %v", g.ID, err)
	}

	typeDir := r.Sys("class/mdev_bus/mbochs/mdev_supported_types/mbochs-small")
	before := tr.ReadFile(filepath.Join("sys/class/mdev_bus/mbochs/mdev_supported_types/mbochs-small/available_instances"))
	const uuid = "0af92917-caeb-4040-9dd1-7bf865c8daca"
	must(filepath.Join(typeDir, "create"), uuid)
	if _, err := os.Lstat(r.Sys("bus/mdev/devices", uuid)); err != nil {
		t.Fatalf("mdev not created: %v", err)
	}
	must(r.Sys("bus/mdev/devices", uuid, "remove"), "1")
	if after := tr.ReadFile(filepath.Join("sys/class/mdev_bus/mbochs/mdev_supported_types/mbochs-small/available_instances")); after != before {
		t.Errorf("available_instances %q after create+remove, want %q", after, before)
	}

	must(r.PCIDevice(audio, "driver_override"), "\n")
	must(r.Sys("bus/pci/drivers/vfio-pci/unbind"), audio.String())
	must(r.Sys("bus/pci/drivers_probe"), audio.String())
	if tr.Driver(audio) != "snd_hda_intel" {
		t.Errorf("audio after unbind and probe: %q, want its native snd_hda_intel", tr.Driver(audio))
	}
}
