package host_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
)

func TestDeviceNodes(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	gpu, audio := tr.ConsumerGPU("0000:00:01.0", "0000:01:00.0", "nvidia")
	tr.WriteFile("sys/bus/pci/devices/0000:01:00.0/drm/card1/dev", "226:1\n")
	tr.WriteFile("sys/bus/pci/devices/0000:01:00.0/graphics/fb0/dev", "29:0\n")
	g := tr.Root
	if got, want := host.DeviceNodes(g, gpu, "nvidia", 7), []string{"/dev/dri/card1", "/dev/fb0", "/dev/nvidia*", "/dev/vfio/7"}; !slices.Equal(got, want) {
		t.Errorf("GPU nodes %q, want %q", got, want)
	}
	if got, want := host.DeviceNodes(g, audio, "snd_hda_intel", -1), []string{"/dev/snd/controlC0", "/dev/snd/pcmC0D*", "/dev/snd/hwC0D*"}; !slices.Equal(got, want) {
		t.Errorf("HDA nodes %q, want %q", got, want)
	}
	tr.HoldOpen(77, "Xorg", "/dev/fb0")
	tr.HoldOpen(78, "pulseaudio", "/dev/snd/pcmC0D7p")
	tr.HoldOpen(79, "other", "/dev/snd/pcmC10D7p")
	hs := host.Holders(g, append(host.DeviceNodes(g, gpu, "nvidia", -1), host.DeviceNodes(g, audio, "", -1)...))
	if len(hs) != 2 || hs[0].PID != 77 || hs[1].PID != 78 || hs[1].Comm != "pulseaudio" {
		t.Errorf("holders %+v, want pids 77 and 78 (card 10's node is another card)", hs)
	}
}

// TestHoldersRealProc runs the holder search on this machine's own procfs, where it stops
// reading a process's descriptors at the first directory read that leaves room for more: this
// process holds a file at the end of more descriptors than one read returns, and the search
// must still find it (and find nothing for a path nobody holds). It only opens files in a
// temporary directory.
func TestHoldersRealProc(t *testing.T) {
	root, err := host.NewRoot("/")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var files []*os.File
	t.Cleanup(func() {
		for _, f := range files {
			f.Close()
		}
	})
	// 1,000 descriptors take about 24 KiB of directory entries (24 bytes each): more than one 16 KiB read.
	for i := 0; i < 1000; i++ {
		f, err := os.Open(dir)
		if err != nil {
			t.Fatalf("cannot open 1,000 descriptors (RLIMIT_NOFILE?): %v", err)
		}
		files = append(files, f)
	}
	target := filepath.Join(dir, "held")
	if err := os.WriteFile(target, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(target)
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, f)
	hs := host.Holders(root, []string{target})
	if len(hs) != 1 || hs[0].PID != os.Getpid() || hs[0].Path != target || hs[0].Comm == "" {
		t.Errorf("holders of %s: %+v, want this process (pid %d) alone", target, hs, os.Getpid())
	}
	if hs := host.Holders(root, []string{filepath.Join(dir, "nobody*")}); len(hs) != 0 {
		t.Errorf("holders of a path nobody holds: %+v", hs)
	}
}
