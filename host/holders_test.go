package host_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
)

// gpuWithNodes is a fake host with a consumer GPU on nvidia and its HDMI audio function, the
// GPU with DRM card 1 and framebuffer 0, and DRM render node 128 when render is set.
func gpuWithNodes(t *testing.T, render bool) (tr *hosttest.Tree, gpu, audio host.Address) {
	tr = hosttest.New(t)
	gpu, audio = tr.ConsumerGPU("0000:00:01.0", "0000:01:00.0", "nvidia")
	tr.WriteFile("sys/bus/pci/devices/0000:01:00.0/drm/card1/dev", "226:1\n")
	if render {
		tr.WriteFile("sys/bus/pci/devices/0000:01:00.0/drm/renderD128/dev", "226:128\n")
	}
	tr.WriteFile("sys/bus/pci/devices/0000:01:00.0/graphics/fb0/dev", "29:0\n")
	return tr, gpu, audio
}

func TestDeviceNodes(t *testing.T) {
	t.Parallel()
	tr, gpu, audio := gpuWithNodes(t, false)
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

// TestDeviceNodeFamiliesCoverDeviceNodes: every node DeviceNodes names for a function on a host
// driver (DRM card and render node, framebuffer, ALSA card, NVIDIA) falls under one of
// DeviceNodeFamilies, so a search for the families finds every holder a search for the nodes
// finds; and the families leave out what is no device's node.
func TestDeviceNodeFamiliesCoverDeviceNodes(t *testing.T) {
	t.Parallel()
	tr, gpu, audio := gpuWithNodes(t, true)
	fams := host.DeviceNodeFamilies(tr.Root)
	var nodes []string
	nodes = append(nodes, host.DeviceNodes(tr.Root, gpu, "nvidia", -1)...)
	nodes = append(nodes, host.DeviceNodes(tr.Root, audio, "snd_hda_intel", -1)...)
	if len(nodes) != 7 {
		t.Fatalf("DeviceNodes = %q, want 7 nodes (card, render node, fb, nvidia, three ALSA)", nodes)
	}
	for _, n := range nodes {
		if !host.MatchesAny(strings.TrimSuffix(n, "*")+"0", fams) {
			t.Errorf("node %s is under none of the families %q", n, fams)
		}
	}
	for _, other := range []string{"/dev/null", "/dev/vfio/7", "/dev/sda", "/dev/ttyS0", "/proc/1/fd"} {
		if host.MatchesAny(other, fams) {
			t.Errorf("%s is under the families %q", other, fams)
		}
	}
	// A family search finds what the node search finds, and more (another card's nodes).
	tr.HoldOpen(77, "Xorg", "/dev/fb0")
	tr.HoldOpen(78, "pulseaudio", "/dev/snd/pcmC0D7p")
	tr.HoldOpen(79, "other", "/dev/snd/pcmC10D7p")
	tr.HoldOpen(80, "shell", "/dev/null")
	exact, all := host.Holders(tr.Root, nodes), host.Holders(tr.Root, fams)
	var kept []host.Holder
	for _, h := range all {
		if host.MatchesAny(h.Path, nodes) {
			kept = append(kept, h)
		}
	}
	if len(all) != 3 || !slices.Equal(kept, exact) || len(exact) != 2 {
		t.Errorf("family search %+v, filtered %+v; node search %+v: want pids 77-79, filtered to the node search's 77 and 78", all, kept, exact)
	}
}
