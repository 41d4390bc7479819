package clitree

import (
	"archive/tar"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host/hosttest"
	migremote "github.com/vgpu-host/vgpu-host/mig/remote"
)

// snapshotRoundTrip takes `host snapshot` of root, unpacks it and returns the unpacked root.
func snapshotRoundTrip(t *testing.T, root string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "snap.tar.gz")
	out, code := run(t, "--host-root", root, "host", "snapshot", file)
	if code != 0 {
		t.Fatalf("host snapshot: exit %d\n%s", code, out)
	}
	return hosttest.Snapshot(t, file).Dir()
}

// sameOutput runs args on both roots and fails unless the outputs are byte for byte equal
// (each root's own path, where an output names it, read as ROOT).
func sameOutput(t *testing.T, a, b string, args ...string) {
	t.Helper()
	outA, codeA := run(t, append([]string{"--host-root", a}, args...)...)
	outB, codeB := run(t, append([]string{"--host-root", b}, args...)...)
	outA, outB = strings.ReplaceAll(outA, a, "ROOT"), strings.ReplaceAll(outB, b, "ROOT")
	if codeA != codeB || outA != outB {
		t.Errorf("%s: the snapshot differs from the host it was taken of\nhost (exit %d):\n%s\nsnapshot (exit %d):\n%s", strings.Join(args, " "), codeA, outA, codeB, outB)
	}
}

// A snapshot of the real-kernel fixture reproduces it: inspect, check and placement give the
// same output on the unpacked snapshot, byte for byte, and what must not be there is not.
func TestHostSnapshotRoundTripQEMU(t *testing.T) {
	t.Parallel()
	setNVML(t, migremote.EnvFacts, "")
	setNVML(t, migremote.EnvMock, "")
	root := hosttest.Snapshot(t, hosttest.SharedFixture(t, "qemu-q35-iommu-6.1.tar.gz")).Dir()
	snap := snapshotRoundTrip(t, root)
	sameOutput(t, root, snap, "inspect", "-o", "json")
	sameOutput(t, root, snap, "inspect")
	sameOutput(t, root, snap, "check", "-o", "json")
	sameOutput(t, root, snap, "mdev", "types", "-o", "json")
	sameOutput(t, root, snap, "mdev", "place", "--type", "mdpy-hd", "--count", "1")

	// The nvme's serial is zeroed; a snapshot of the snapshot is the snapshot.
	serial := "sys/devices/pci0000:00/0000:00:0a.0/nvme/nvme0/serial"
	if b, err := os.ReadFile(filepath.Join(snap, serial)); err != nil || strings.Trim(string(b), "0 \n") != "" {
		t.Errorf("%s in the snapshot: %q, %v; want zeroes", serial, b, err)
	}
	again := snapshotRoundTrip(t, snap)
	sameOutput(t, snap, again, "inspect", "-o", "json")
}

// The H200 host from its sysfs snapshot and NVML capture: `host snapshot` takes the facts from
// the (release) NVML helper replaying the capture, and the unpacked result, with
// VGPU_HOST_NVML_FACTS on its nvml-facts.json, gives the same mig show, mig plan, inspect
// and check.
func TestHostSnapshotRoundTripH200(t *testing.T) {
	t.Parallel()
	releaseNVML(t)
	root := hosttest.Snapshot(t, hosttest.SharedFixture(t, "nvidia-h200/sysfs-snapshot.tar.gz")).Dir()
	setNVML(t, migremote.EnvFacts, hosttest.SharedFixture(t, "nvidia-h200/nvml-facts.json"))
	snap := snapshotRoundTrip(t, root)
	facts := filepath.Join(snap, nvmlFactsName)
	if _, err := os.Stat(facts); err != nil {
		t.Fatalf("the snapshot has no %s: %v", nvmlFactsName, err)
	}
	type out struct {
		text string
		code int
	}
	cmds := [][]string{
		{"mig", "show", "-o", "json"},
		{"mig", "show"},
		{"mig", "plan", "--gpu", "0000:00:06.0", "--profiles", "3g.71gb*2"},
		{"inspect", "-o", "json"},
		{"check", "-o", "json"},
	}
	before := map[string]out{}
	for _, c := range cmds {
		o, code := run(t, append([]string{"--host-root", root}, c...)...)
		before[strings.Join(c, " ")] = out{migCacheStamps.ReplaceAllString(strings.ReplaceAll(o, root, "ROOT"), "$1 STAMP"), code}
	}
	setNVML(t, migremote.EnvFacts, facts)
	for _, c := range cmds {
		o, code := run(t, append([]string{"--host-root", snap}, c...)...)
		got, want := out{migCacheStamps.ReplaceAllString(strings.ReplaceAll(o, snap, "ROOT"), "$1 STAMP"), code}, before[strings.Join(c, " ")]
		if got != want {
			t.Errorf("%s: the snapshot differs from the H200\nH200 (exit %d):\n%s\nsnapshot (exit %d):\n%s", strings.Join(c, " "), want.code, want.text, got.code, got.text)
		}
	}
	if o, _ := run(t, "--host-root", snap, "mig", "show"); !strings.Contains(o, "NVIDIA H200") {
		t.Errorf("mig show on the snapshot:\n%s", o)
	}
}

// migCacheStamps are the fields of inspect's MIG section that say when and by whom the MIG
// state cache was written (docs/inspect.md): they differ between any two runs.
var migCacheStamps = regexp.MustCompile(`("read_at":|"age_seconds":|"by":) [^,\n]*`)

// Without NVML describing the root, the snapshot says why it has no facts, and --no-nvml
// leaves them out.
func TestHostSnapshotWithoutNVML(t *testing.T) {
	t.Parallel()
	setNVML(t, migremote.EnvFacts, "")
	setNVML(t, migremote.EnvMock, "")
	tr := fakeHost(t)
	file := filepath.Join(t.TempDir(), "snap.tar")
	out, code := run(t, "--host-root", tr.Dir(), "host", "snapshot", file)
	if code != 0 || !strings.Contains(out, "NVML facts: none: NVML describes this machine") {
		t.Fatalf("host snapshot: exit %d\n%s", code, out)
	}
	f, err := os.Open(file) // .tar: uncompressed
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr2 := tar.NewReader(f)
	n := 0
	for h, err := tr2.Next(); err != io.EOF; h, err = tr2.Next() {
		if err != nil {
			t.Fatalf("%s is not a plain tar: %v", file, err)
		}
		if h.Name == nvmlFactsName {
			t.Errorf("a snapshot of a fake root has NVML facts")
		}
		n++
	}
	if n == 0 {
		t.Errorf("%s is empty", file)
	}
	if out, code := run(t, "--host-root", tr.Dir(), "host", "snapshot", "--no-nvml", "-o", "json", file+".gz"); code != 0 || !strings.Contains(out, `"nvml_error": "left out (--no-nvml)"`) {
		t.Errorf("host snapshot --no-nvml: exit %d\n%s", code, out)
	}
	sameOutput(t, tr.Dir(), hosttest.Snapshot(t, file+".gz").Dir(), "inspect", "-o", "json")
	if out, code := run(t, "--host-root", tr.Dir(), "host", "snapshot"); code != exitUsage {
		t.Errorf("host snapshot without FILE: exit %d\n%s", code, out)
	}
}

// host snapshot runs the NVML helper a variable names from the descriptor it checked (through
// /proc/self/fd), never from the path again: a link flipped between the check and the run
// cannot make root run another file. The helper here is a script, which its interpreter reads
// from the path the kernel was asked to run: that path is what it records.
func TestHostSnapshotRunsTheCheckedHelper(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	facts := hosttest.Capture(t, "nvidia-h100/nvml-facts.json")
	mark := filepath.Join(dir, "ran-as")
	helper := filepath.Join(dir, "vgpu-host-nvml")
	script := "#!/bin/sh\n[ \"$1\" = --facts ] || exit 2\nprintf '%s\\n' \"$0\" >" + mark + "\ncat " + facts + "\n"
	if err := os.WriteFile(helper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	root := hosttest.Snapshot(t, hosttest.Capture(t, "nvidia-h100/sysfs-snapshot.tar.gz")).Dir()
	setNVML(t, migremote.EnvHelper, helper)
	setNVML(t, migremote.EnvFacts, facts)
	snap := snapshotRoundTrip(t, root)
	got, err := os.ReadFile(filepath.Join(snap, nvmlFactsName))
	if err != nil {
		t.Fatalf("the snapshot has no %s: %v", nvmlFactsName, err)
	}
	want, _ := os.ReadFile(facts)
	if string(got) != string(want) {
		t.Errorf("the snapshot's %s is not what the helper wrote", nvmlFactsName)
	}
	ran, err := os.ReadFile(mark)
	if err != nil {
		t.Fatalf("the helper did not run: %v", err)
	}
	if s := strings.TrimSpace(string(ran)); !strings.HasPrefix(s, "/proc/self/fd/") {
		t.Errorf("the helper ran from %s, not from the descriptor vgpu-host checked (/proc/self/fd/N)", s)
	}
}
