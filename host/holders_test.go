package host_test

import (
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
