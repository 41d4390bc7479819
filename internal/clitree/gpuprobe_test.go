package clitree

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host/hosttest"
)

// fakeSMI is an nvidia-smi that answers the probe's read commands and, asked anything else,
// leaves a mark: the probe must never get that far.
const fakeSMI = `#!/bin/sh
case "$*" in
  "-q") printf 'GPU 00000000:00:06.0\n    Serial Number                         : 1650123456789\n    GPU UUID                              : GPU-5f3c9a1b-0d2e-4f60-8a7b-1c2d3e4f5a6b\n    GPU PDI                               : 0x3c51029d5f34408e\n        Chassis Serial Number             : N/A\n' ;;
  "mig -lgip"|"mig -lgipp") echo "fake nvidia-smi $*" ;;
  *) touch "$(dirname "$0")/WROTE"; exit 1 ;;
esac
`

// probeEnv puts the release vgpu-host (releaseBinary) in DIR/bin (where the probe looks
// first) when build is set, the fake nvidia-smi in DIR/path, and returns DIR.
func probeEnv(t *testing.T, build bool) string {
	t.Helper()
	dir := t.TempDir()
	if !build {
		return fakeSMIPath(t, dir)
	}
	b, err := os.ReadFile(releaseBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bin", "vgpu-host"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	return fakeSMIPath(t, dir)
}

func fakeSMIPath(t *testing.T, dir string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "path"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "path", "nvidia-smi"), []byte(fakeSMI), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func probeScript(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs("../../scripts/gpu-probe.sh")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// scripts/gpu-probe.sh on the real-kernel fixture (VGPU_HOST_ROOT), with no NVML and a fake
// nvidia-smi: it writes the snapshot, vgpu-host's answers and nvidia-smi's (serials and UUIDs
// zeroed), and its inspect.json is the snapshot's inspect.
func TestGPUProbe(t *testing.T) {
	t.Parallel()
	dir := probeEnv(t, true)
	root := hosttest.Snapshot(t, hosttest.SharedFixture(t, "qemu-q35-iommu-6.1.tar.gz")).Dir()
	out := filepath.Join(dir, "probe")
	cmd := exec.Command("bash", probeScript(t), out)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "VGPU_HOST_ROOT="+root, "PATH="+filepath.Join(dir, "path")+":/usr/bin:/bin",
		"VGPU_HOST_NVML_FACTS=", "VGPU_HOST_NVML_MOCK=", "VGPU_HOST_AGENT=never")
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("gpu-probe: %v\n%s", err, b)
	}
	summary, _ := os.ReadFile(filepath.Join(out, "summary.txt"))
	for _, want := range []string{"snapshot               exit 0", "inspect                exit 0", "nvidia-smi -q          exit 0", "read-only"} {
		if !strings.Contains(string(summary), want) {
			t.Errorf("summary lacks %q:\n%s", want, summary)
		}
	}
	q, _ := os.ReadFile(filepath.Join(out, "nvidia-smi-q.txt"))
	for _, want := range []string{": 0000000000000\n", "GPU-00000000-0000-0000-0000-000000000000\n", ": 0x0000000000000000\n", "Chassis Serial Number             : N/A\n"} {
		if !strings.Contains(string(q), want) {
			t.Errorf("nvidia-smi -q not scrubbed as it should be (no %q):\n%s", want, q)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "path", "WROTE")); err == nil {
		t.Error("the probe ran nvidia-smi with other arguments than its read commands")
	}
	snap := hosttest.Snapshot(t, filepath.Join(out, "snapshot.tar.gz")).Dir()
	probed, _ := os.ReadFile(filepath.Join(out, "inspect.json"))
	again, code := run(t, "--host-root", snap, "-o", "json", "inspect")
	if code != 0 || strings.ReplaceAll(again, snap, "ROOT") != strings.ReplaceAll(string(probed), root, "ROOT") {
		t.Errorf("inspect of the probe's snapshot differs from the probe's inspect.json\nprobe:\n%s\nsnapshot:\n%s", probed, again)
	}
}

// scrub_ids zeroes the GPU and MIG UUIDs NVML reports in vgpu-host's JSON, and keeps an mdev
// UUID, which its owner chose.
func TestGPUProbeScrubsIDs(t *testing.T) {
	t.Parallel()
	f := filepath.Join(t.TempDir(), "inspect.json")
	in := `{"uuid": "GPU-7fdb91d4-baa3-1672-a22a-e9591e769932", "mdev": "66666666-7777-8888-9999-000000000000", "mig": "MIG-5f3c9a1b-0d2e-4f60-8a7b-1c2d3e4f5a6b"}`
	if err := os.WriteFile(f, []byte(in), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command("bash", "-c", `source "$1"; scrub_ids "$2"`, "gpu-probe-test", probeScript(t), f).CombinedOutput(); err != nil {
		t.Fatalf("scrub_ids: %v\n%s", err, b)
	}
	got, _ := os.ReadFile(f)
	want := `{"uuid": "GPU-00000000-0000-0000-0000-000000000000", "mdev": "66666666-7777-8888-9999-000000000000", "mig": "MIG-00000000-0000-0000-0000-000000000000"}`
	if string(got) != want {
		t.Errorf("scrub_ids:\n got %s\nwant %s", got, want)
	}
}

// The probe's guard runs only its read commands: MIG mode, instances, reset, unbind and any
// vgpu-host command that changes the host are refused before they run.
func TestGPUProbeRefusesWrites(t *testing.T) {
	t.Parallel()
	dir := probeEnv(t, false)
	for _, args := range []string{
		"nvidia-smi -mig 1", "nvidia-smi -i 0 -mig 1", "nvidia-smi mig -cgi 9,9 -C", "nvidia-smi mig -dgi",
		"nvidia-smi -r", "nvidia-smi --gpu-reset -i 0", "nvidia-smi -pm 1",
		"bin/vgpu-host unbind 0000:01:00.0", "bin/vgpu-host mig apply --gpu 0 --profiles 7g.141gb",
		"bin/vgpu-host host snapshot a b", "sh -c 'echo 0 > /sys/bus/pci/devices/0000:00:06.0/remove'",
	} {
		// $0 is not the script, so sourcing it defines ro and runs no probe.
		cmd := exec.Command("bash", "-c", `source "$1"; ro `+args, "gpu-probe-test", probeScript(t))
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "PATH="+filepath.Join(dir, "path")+":/usr/bin:/bin")
		b, err := cmd.CombinedOutput()
		if exitCode(err) != 126 || !strings.Contains(string(b), "refused") {
			t.Errorf("ro %s: %v\n%s", args, err, b)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "path", "WROTE")); err == nil {
		t.Error("a refused nvidia-smi command ran")
	}
	if _, err := os.Stat(filepath.Join(dir, "gpu-probe-OUT")); err == nil {
		t.Error("sourcing the probe for its guard ran the probe")
	}
}
