package clitree

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host/hosttest"
)

// TestWrongHostRootRefused: --host-root given a snapshot's dev (the snapshot unpacked, one
// level too deep) is a usage error naming the snapshot, for every command that reads the
// host or keeps state under it, before anything is read or written; the snapshot itself
// answers. Before, each command read it as a host with no devices and exited 0 (inspect: "0
// GPU(s)", check: enable VT-d in the firmware).
func TestWrongHostRootRefused(t *testing.T) {
	t.Parallel()
	snap := t.TempDir()
	if err := hosttest.UnpackSnapshot(hosttest.SharedFixture(t, "qemu-q35-iommu-6.1.tar.gz"), snap); err != nil {
		t.Fatal(err)
	}
	spec := hosttest.RepoFile(t, "examples/virtio-gpu-fallback.yaml")
	for _, args := range append(append([][]string{}, hostileTreeCommands...),
		[]string{"bind", "0000:01:00.0"}, []string{"host", "snapshot", filepath.Join(t.TempDir(), "out")},
		[]string{"plan", "--connect", "test:///default", spec}, []string{"status", "--connect", "test:///default"}) {
		argv := append([]string{"--host-root", filepath.Join(snap, "dev"), "--agent", "never"}, args...)
		outw, errw, code := asMain(argv)
		want := "vgpu-host: usage: host root " + filepath.Join(snap, "dev") + ": not a host tree: it has no sys directory, and " + snap + " next to it has; did you mean --host-root " + snap + "?\n"
		if code != exitUsage || errw != want || outw != "" {
			t.Errorf("%v: exit %d\n%s%s\nwant exit %d and only\n%s", args, code, outw, errw, exitUsage, want)
		}
	}
	if out, code := run(t, "--host-root", snap, "--agent", "never", "inspect"); code != 0 || !strings.Contains(out, "0000:01:00.0") {
		t.Errorf("the snapshot itself: exit %d\n%s", code, out)
	}
}

// TestMissingAddressOneWording: an address with no device is told the same way by every
// command that takes one (inspect said "it may have been removed" of a mistyped address, bind
// "check the address with lspci -D", host release-quarantine "it still fails its check
// (gone)", exit 4, host health showed it FAILED, exit 0).
// It runs on a generated tree and on the real-kernel snapshot, where no health file may appear.
func TestMissingAddressOneWording(t *testing.T) {
	t.Parallel()
	snap := t.TempDir()
	if err := hosttest.UnpackSnapshot(hosttest.SharedFixture(t, "qemu-q35-iommu-6.1.tar.gz"), snap); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{fakeHost(t).Dir(), snap} {
		want := "device 0000:99:00.0: no " + filepath.Join(dir, "sys/bus/pci/devices/0000:99:00.0") + ": not found (check the address with lspci -D)\n"
		for _, args := range [][]string{{"inspect", "0000:99:00.0"}, {"inspect", "-o", "json", "0000:99:00.0"}, {"bind", "--dry-run", "0000:99:00.0"}, {"unbind", "--dry-run", "0000:99:00.0"},
			{"vf", "enable", "--dry-run", "--count", "2", "0000:99:00.0"}, {"vf", "disable", "--dry-run", "0000:99:00.0"}, {"host", "release-quarantine", "0000:99:00.0"}, {"host", "health", "0000:99:00.0"}} {
			argv := append([]string{"--host-root", dir, "--agent", "never"}, args...)
			outw, errw, code := asMain(argv)
			if code != exitNotFound || !strings.HasSuffix(errw, want) {
				t.Errorf("%s: %v: exit %d\n%s%s\nwant exit %d ending\n%s", dir, args, code, outw, errw, exitNotFound, want)
			}
		}
		if _, err := os.Lstat(filepath.Join(dir, "var/lib/vgpu-host/health/0000:99:00.0.json")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: a health file was written for an address with no device: %v", dir, err)
		}
	}
}

// TestSpecOperandUnreadable: a spec or layout file named on the command line that is missing,
// a directory or the other kind of file is a bad command line (exit 2, docs/apply.md), said
// once, for render, plan and host layout apply alike (a missing spec exited 1, "failed", a
// missing layout 2).
func TestSpecOperandUnreadable(t *testing.T) {
	t.Parallel()
	tr := fakeHost(t)
	dir := t.TempDir()
	missing := filepath.Join(dir, "nosuch.yaml")
	layouts, spec := hosttest.RepoFile(t, "examples/host-layouts.yaml"), hosttest.RepoFile(t, "examples/passthrough.yaml")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"render", missing}, "read spec: open " + missing + ": no such file or directory: invalid input\n"},
		{[]string{"render", dir}, "read spec: read " + dir + ": is a directory, not a file: invalid input\n"},
		{[]string{"plan", "--connect", "test:///default", missing}, "read spec: open " + missing + ": no such file or directory: invalid input\n"},
		{[]string{"host", "layout", "apply", "--dry-run", missing}, "read layout: open " + missing + ": no such file or directory: invalid input\n"},
		{[]string{"host", "layout", "apply", "--dry-run", dir}, "read layout: read " + dir + ": is a directory, not a file: invalid input\n"},
		// One kind of file given where the other belongs (render said "unknown field configs").
		{[]string{"render", layouts}, layouts + ": parse spec: line 10: kind HostLayout, not VirtualMachine: this file is for vgpu-host host layout plan or apply FILE: invalid input\n"},
		{[]string{"host", "layout", "apply", "--dry-run", spec}, spec + ": parse layout: line 11: kind VirtualMachine, not HostLayout: this file is for vgpu-host render, plan or apply FILE: invalid input\n"},
	} {
		argv := append([]string{"--host-root", tr.Dir(), "--agent", "never"}, c.args...)
		outw, errw, code := asMain(argv)
		if code != exitUsage || errw != "vgpu-host: "+c.want {
			t.Errorf("%v: exit %d\n%s%s\nwant exit %d and\nvgpu-host: %s", c.args, code, outw, errw, exitUsage, c.want)
		}
	}
}

// asMain runs argv (no program name) as main runs it: main's tree, the error line printed by
// execute; it returns stdout, stderr and the exit code.
func asMain(argv []string) (stdout, stderr string, code int) {
	var outw, errw bytes.Buffer
	app := newAppFor(testEnv(), argv)
	app.Writer, app.ErrWriter = &outw, &errw
	code = execute(app, append([]string{"vgpu-host"}, argv...), &errw)
	return outw.String(), errw.String(), code
}

// TestSnapshotLinksStayInRoot: the real-kernel snapshot with its sound-card GPU's bus entry
// (sys/bus/pci/devices/0000:01:00.0) made an absolute link to a copy of the function outside the
// tree that claims to be an NVIDIA H200, and the second GPU's an absolute link to its own
// directory in the tree (/sys/devices/..., as a copy made with absolute links has it). Before,
// every read followed the links as this machine would: inspect listed the H200 at 0000:01:00.0
// and could not read 0000:02:00.0 (this machine has no such path). Now every read resolves
// inside the root, as if it were "/": no command shows the decoy, and the in-tree absolute link
// reads the tree's own function.
func TestSnapshotLinksStayInRoot(t *testing.T) {
	t.Parallel()
	snap := t.TempDir()
	if err := hosttest.UnpackSnapshot(hosttest.SharedFixture(t, "qemu-q35-iommu-6.1.tar.gz"), snap); err != nil {
		t.Fatal(err)
	}
	decoy := filepath.Join(t.TempDir(), "h200")
	src := filepath.Join(snap, "sys/devices/pci0000:00/0000:00:04.0/0000:01:00.0")
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(decoy, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(to, 0o755)
		case d.Type()&fs.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(l, to)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(to, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	uevent, err := os.ReadFile(filepath.Join(decoy, "uevent"))
	if err != nil {
		t.Fatal(err)
	}
	ue := strings.NewReplacer("PCI_CLASS=30000", "PCI_CLASS=30200", "PCI_ID=1002:5046", "PCI_ID=10DE:2335").Replace(string(uevent))
	if ue == string(uevent) {
		t.Fatalf("the snapshot's uevent changed: %q", uevent)
	}
	for name, v := range map[string]string{"vendor": "0x10de", "device": "0x2335", "class": "0x030200", "uevent": ue} {
		if err := os.WriteFile(filepath.Join(decoy, name), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bus := filepath.Join(snap, "sys/bus/pci/devices")
	for addr, target := range map[string]string{"0000:01:00.0": decoy, "0000:02:00.0": "/sys/devices/pci0000:00/0000:00:05.0/0000:02:00.0"} {
		if err := os.Remove(filepath.Join(bus, addr)); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(bus, addr)); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range append(append([][]string{}, hostileTreeCommands...), []string{"inspect", "0000:02:00.0"}) {
		stdout, stderr, code := asMain(append([]string{"--host-root", snap, "--agent", "never"}, args...))
		// The tree's path is left out: a temporary directory's name may hold the digits.
		out := strings.ToLower(strings.ReplaceAll(stdout+stderr, snap, "ROOT"))
		if strings.Contains(out, "10de") || strings.Contains(out, "2335") || strings.Contains(out, "h200") {
			t.Errorf("%v read the decoy out of the tree: exit %d\n%s%s", args, code, stdout, stderr)
		}
	}
	stdout, stderr, code := asMain([]string{"--host-root", snap, "--agent", "never", "inspect", "-o", "json"})
	if code != 0 || !strings.Contains(stdout, `"address": "0000:02:00.0"`) || !strings.Contains(stdout, `"vendor_id": "1002"`) {
		t.Errorf("inspect -o json: exit %d, want 0000:02:00.0 read through its in-tree absolute link\n%s%s", code, stdout, stderr)
	}
}
