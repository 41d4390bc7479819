package clitree

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/vgpu-host/vgpu-host/internal/testenv"
	"github.com/vgpu-host/vgpu-host/lifecycle"
)

// TestExportFormatsLibvirtd exports one shut-off VM's overlay on the real libvirtd in each
// format and checks the files qemu-img sees: qcow2 compressed by default, raw with every block
// allocated, sparse raw with its holes kept. -o json is the result on stdout (never a file
// called json); --dry-run prints the commands and writes nothing; a seal that fails leaves
// neither the destination nor its .partial file; the old --output FILE is a usage error that
// names --to.
func TestExportFormatsLibvirtd(t *testing.T) {
	uri := testenv.Libvirtd(t)
	binary(t) // the libvirt helper
	name := "vgpuhost-test-export"
	root, spec := world(t, uri, name)
	g := []string{"--host-root", root.Dir()}
	cmd := func(args ...string) []string { return append(append([]string{}, g...), args...) }
	if out, code := runCLI(t, cmd("apply", "--connect", uri, "--virt-type", "qemu", "--no-start", spec)...); code != 0 {
		t.Fatalf("apply exit %d:\n%s", code, out)
	}
	t.Cleanup(func() { runCLI(t, cmd("destroy", "--connect", uri, name)...) })
	// Data in the overlay, so a copy has something to allocate: 1 MiB of non-zero bytes at 8 MiB.
	ov, err := filepath.Glob(filepath.Join(root.StateDir("images"), name+"-*.qcow2"))
	if err != nil || len(ov) != 1 {
		t.Fatalf("overlay: %v %v", ov, err)
	}
	if out, err := exec.Command("qemu-io", "-f", "qcow2", "-c", "write -P 0x5a 8M 1M", ov[0]).CombinedOutput(); err != nil {
		t.Fatalf("qemu-io: %v\n%s", err, out)
	}
	dir := t.TempDir()
	wd, _ := os.Getwd()
	export := func(format string, extra ...string) lifecycle.ExportResult {
		t.Helper()
		dst := filepath.Join(dir, name+"."+format)
		args := cmd(append([]string{"-o", "json", "image", "export", "--connect", uri, name, "--to", dst, "--format", format}, extra...)...)
		out, errs, code := runAll(t, args...)
		var r lifecycle.ExportResult
		if err := json.Unmarshal([]byte(out), &r); code != 0 || err != nil {
			t.Fatalf("export --format %s -o json: exit %d (%v)\n%s%s", format, code, err, out, errs)
		}
		if r.VM != name || r.Destination != dst || r.Source != ov[0] || r.Format != format || r.Sealed || r.Duration <= 0 {
			t.Errorf("export --format %s: result %+v", format, r)
		}
		if _, err := os.Stat(dst + ".partial"); err == nil {
			t.Errorf("export --format %s left %s.partial", format, dst)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(dst, &st); err != nil {
			t.Fatal(err)
		}
		if r.Allocated != st.Blocks*512 {
			t.Errorf("export --format %s: allocated_bytes %d, the file has %d", format, r.Allocated, st.Blocks*512)
		}
		return r
	}

	q := export("qcow2")
	if !q.Compressed || q.VirtualSize != 128<<20 || !strings.Contains(q.Commands[0], "qemu-img convert -O qcow2 -c -- ") {
		t.Errorf("qcow2: %+v", q)
	}
	if _, err := os.Stat(filepath.Join(wd, "json")); err == nil {
		t.Errorf("-o json wrote a file called json in %s", wd)
	}
	// qemu-img check counts compressed clusters: the 1 MiB written must be among them.
	chk, _ := exec.Command("qemu-img", "check", "--output", "json", q.Destination).CombinedOutput()
	var c struct {
		Compressed int `json:"compressed-clusters"`
	}
	if json.Unmarshal(chk, &c) != nil || c.Compressed == 0 {
		t.Errorf("qcow2 export has no compressed clusters:\n%s", chk)
	}
	if u := export("qcow2", "--no-compress", "--force"); u.Compressed || strings.Contains(u.Commands[0], " -c ") {
		t.Errorf("qcow2 --no-compress: %+v", u)
	}
	r := export("raw")
	if r.VirtualSize != 128<<20 || r.Allocated < r.VirtualSize {
		t.Errorf("raw: %d bytes allocated of %d: not fully allocated", r.Allocated, r.VirtualSize)
	}
	s := export("sparse")
	if s.VirtualSize != 128<<20 || s.Allocated < 1<<20 || s.Allocated > 16<<20 {
		t.Errorf("sparse: %d bytes allocated of %d: want about the 1 MiB written", s.Allocated, s.VirtualSize)
	}
	if b, _ := os.ReadFile(s.Destination); len(b) != 128<<20 || b[8<<20] != 0x5a || b[9<<20] != 0 {
		t.Errorf("sparse raw does not hold the overlay's data")
	}

	// --dry-run: the exact commands, nothing written.
	dst := filepath.Join(dir, "dry.qcow2")
	out, errs, code := runAll(t, cmd("image", "export", "--connect", uri, name, "--to", dst, "--seal", "--dry-run")...)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 ||
		lines[0] != "qemu-img convert -O qcow2 -c -- "+ov[0]+" "+dst+".partial" ||
		!strings.HasPrefix(lines[1], "LIBGUESTFS_BACKEND=direct virt-sysprep --format qcow2 -a "+dst+".partial --operations machine-id,ssh-hostkeys,") ||
		!strings.Contains(lines[1], " --delete /var/lib/cloud ") || lines[2] != "mv -- "+dst+".partial "+dst {
		t.Errorf("dry run: exit %d\n%s%s", code, out, errs)
	}
	if _, err := os.Stat(dst + ".partial"); err == nil {
		t.Errorf("dry run wrote %s.partial", dst)
	}

	// A seal that fails (the appliance's QEMU is false(1)): no image under either name.
	t.Setenv("LIBGUESTFS_HV", "/bin/false")
	_, errs, code = runAll(t, cmd("image", "export", "--connect", uri, name, "--to", dst, "--seal")...)
	if code == 0 || !strings.Contains(errs, "virt-sysprep") || !strings.Contains(errs, "libguestfs") {
		t.Errorf("failing seal: exit %d\n%s", code, errs)
	}
	for _, f := range []string{dst, dst + ".partial"} {
		if _, err := os.Stat(f); err == nil {
			t.Errorf("failed seal left %s", f)
		}
	}
	// An existing destination is refused (exit 4), and the old --output FILE names --to.
	_, errs, code = runAll(t, cmd("image", "export", "--connect", uri, name, "--to", s.Destination, "--format", "sparse")...)
	if code != exitRefused || !strings.Contains(errs, "--force") {
		t.Errorf("export over an existing file: exit %d\n%s", code, errs)
	}
	_, errs, code = runAll(t, cmd("image", "export", "--connect", uri, name, "--output", dst)...)
	if code != exitUsage || !strings.Contains(errs, "--to") {
		t.Errorf("export --output FILE: exit %d, want %d naming --to\n%s", code, exitUsage, errs)
	}
}
