package clitree

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/internal/testenv"
	"github.com/vgpu-host/vgpu-host/lifecycle"
	"github.com/vgpu-host/vgpu-host/virt"
)

// runAll runs the CLI in-process and returns stdout, stderr (with the error, as main prints
// it) and the exit code.
func runAll(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errw bytes.Buffer
	err := runInTest(t, args, &out, &errw)
	if err != nil {
		errw.WriteString("vgpu-host: " + err.Error() + "\n")
	}
	return out.String(), errw.String(), exitCode(err)
}

// TestStatusVerifyExportOutputsLibvirtd checks status, verify and image export as a user sees
// them on the real libvirtd: tables, JSON and exit codes for a defined VM, a running one, a
// shut-off one and names vgpu-host does not know.
func TestStatusVerifyExportOutputsLibvirtd(t *testing.T) {
	uri := testenv.Libvirtd(t)
	binary(t) // the libvirt helper
	name := "vgpuhost-test-out"
	root, spec := world(t, uri, name)
	g := []string{"--host-root", root.Dir()}
	cmd := func(args ...string) []string { return append(append([]string{}, g...), args...) }

	if out, code := runCLI(t, cmd("apply", "--connect", uri, "--virt-type", "qemu", "--no-start", spec)...); code != 0 {
		t.Fatalf("apply exit %d:\n%s", code, out)
	}

	// status: table and JSON of a defined, shut-off VM; by name; an unknown name is exit 6.
	out, _, code := runAll(t, cmd("status", "--connect", uri)...)
	if code != 0 || !regexp.MustCompile(`(?m)^VM\s+STATE\s+PHASE\s+DEVICES$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^`+name+`\s+shutoff\s+applied\s+virtio-gpu \(fallback\)$`).MatchString(out) {
		t.Fatalf("status exit %d:\n%s", code, out)
	}
	out, _, code = runAll(t, cmd("-o", "json", "status", "--connect", uri, name)...)
	var st []map[string]any
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || len(st) != 1 {
		t.Fatalf("status -o json exit %d (%v):\n%s", code, err, out)
	}
	if s := st[0]; s["name"] != name || s["state"] != "shutoff" || s["phase"] != "applied" || s["uri"] != uri ||
		len(s["fallback"].([]any)) != 1 || s["journal_steps"] != float64(4) || s["updated_at"] == "" {
		t.Errorf("status JSON: %v", s)
	}
	if c, ok := st[0]["claims"].([]any); !ok || len(c) != 0 {
		t.Errorf("status JSON claims: %v, want []", st[0]["claims"])
	}
	out, errs, code := runAll(t, cmd("status", "--connect", uri, "vgpuhost-test-nosuch")...)
	if code != exitNotFound || !strings.Contains(errs, `"vgpuhost-test-nosuch"`) || strings.Contains(out, name) {
		t.Errorf("status of an unknown VM: exit %d, want %d naming it\nstdout:\n%s\nstderr:\n%s", code, exitNotFound, out, errs)
	}

	// verify: a shut-off domain has no guest to ask; an unknown one is exit 6.
	_, errs, code = runAll(t, cmd("verify", "--connect", uri, name)...)
	if code != exitFailure || !strings.Contains(errs, "the domain is shutoff: verify asks the running guest, so start it first") {
		t.Errorf("verify of a shut-off VM: exit %d\n%s", code, errs)
	}
	_, errs, code = runAll(t, cmd("verify", "--connect", uri, "vgpuhost-test-nosuch")...)
	if code != exitNotFound || !strings.Contains(errs, "vgpuhost-test-nosuch") {
		t.Errorf("verify of an unknown VM: exit %d, want %d\n%s", code, exitNotFound, errs)
	}

	// Running: verify's table finds the virtio GPU under its alias; export refuses.
	if out, code := runCLI(t, cmd("apply", "--connect", uri, "--virt-type", "qemu", spec)...); code != 0 || !strings.Contains(out, "running") {
		t.Fatalf("start exit %d:\n%s", code, out)
	}
	out, errs, code = runAll(t, cmd("verify", "--connect", uri, name)...)
	if code != 0 || !regexp.MustCompile(`(?m)^ok\s+video0\s+virtio-gpu\s+[0-9a-f]{2}:[0-9a-f]{2}\.[0-7] 1af4:1050$`).MatchString(out) {
		t.Errorf("verify table exit %d:\n%s\n%s", code, out, errs)
	}
	out, _, code = runAll(t, cmd("-o", "json", "verify", "--connect", uri, name)...)
	var vr lifecycle.VerifyResult
	if err := json.Unmarshal([]byte(out), &vr); code != 0 || err != nil || !vr.OK || vr.VM != name || len(vr.Checks) != 1 || !vr.Checks[0].Found || vr.Checks[0].Kind != "virtio-gpu" {
		t.Errorf("verify -o json exit %d (%v):\n%s", code, err, out)
	}
	out, errs, code = runAll(t, cmd("status", "--connect", uri, name)...)
	if code != 0 || !regexp.MustCompile(`(?m)^`+name+`\s+running\s+applied\s`).MatchString(out) {
		t.Errorf("status of the running VM exit %d:\n%s%s", code, out, errs)
	}
	img := filepath.Join(t.TempDir(), "golden.qcow2")
	_, errs, code = runAll(t, cmd("image", "export", "--connect", uri, name, "--to", img)...)
	if code != exitBusy || !strings.Contains(errs, "the domain is running; shut it down first") {
		t.Errorf("export of a running VM: exit %d, want %d with a clear message\n%s", code, exitBusy, errs)
	}
	if _, err := exec.Command("test", "-e", img).CombinedOutput(); err == nil {
		t.Errorf("the refused export wrote %s", img)
	}

	// Shut off: export flattens the overlay into a standalone qcow2.
	if out, err := virsh(uri, "destroy", name); err != nil {
		t.Fatalf("virsh destroy: %v\n%s", err, out)
	}
	out, errs, code = runAll(t, cmd("image", "export", "--connect", uri, name, "--to", img)...)
	if code != 0 || !strings.Contains(out, name+": exported ") || !strings.Contains(out, " to "+img) {
		t.Fatalf("export exit %d:\n%s%s", code, out, errs)
	}
	info, err := exec.Command("qemu-img", "info", "--output", "json", img).CombinedOutput()
	var qi map[string]any
	if err != nil || json.Unmarshal(info, &qi) != nil {
		t.Fatalf("qemu-img info: %v\n%s", err, info)
	}
	if qi["format"] != "qcow2" || qi["virtual-size"] != float64(128<<20) || qi["backing-filename"] != nil || qi["full-backing-filename"] != nil {
		t.Errorf("exported image is not a standalone 128 MiB qcow2:\n%s", info)
	}
	// An existing output file is kept unless --force.
	before, _ := os.ReadFile(img)
	_, errs, code = runAll(t, cmd("image", "export", "--connect", uri, name, "--to", img)...)
	if after, _ := os.ReadFile(img); code != exitRefused || !strings.Contains(errs, "--force") || !bytes.Equal(before, after) {
		t.Errorf("export over an existing file: exit %d, want %d and the file untouched\n%s", code, exitRefused, errs)
	}
	if out, errs, code := runAll(t, cmd("image", "export", "--connect", uri, name, "--to", img, "--force")...); code != 0 {
		t.Errorf("export --force over an existing file: exit %d\n%s%s", code, out, errs)
	}
	_, errs, code = runAll(t, cmd("image", "export", "--connect", uri, "vgpuhost-test-nosuch", "--to", img+".2")...)
	if code != exitNotFound {
		t.Errorf("export of an unknown VM: exit %d, want %d\n%s", code, exitNotFound, errs)
	}

	if out, code := runCLI(t, cmd("destroy", "--connect", uri, name)...); code != 0 {
		t.Fatalf("destroy exit %d:\n%s", code, out)
	}
	assertClean(t, uri, root, name)
	// With no VM left, status prints the header only and JSON [].
	if out, _, code := runAll(t, cmd("-o", "json", "status", "--connect", uri)...); code != 0 || strings.TrimSpace(out) != "[]" {
		t.Errorf("status of an empty ledger exit %d:\n%s", code, out)
	}
}

// TestVerifyMissingDeviceCLI: a running domain whose PCI hostdev the guest does not show
// (QMP query-pci lists only the virtio GPU) fails verify with exit 1, naming the device in
// the error, the table (MISSING) and the JSON (found: false). The real libvirtd cannot run a
// guest without its device, so a fake connection answers QMP here.
func TestVerifyMissingDeviceCLI(t *testing.T) {
	fake := virt.NewFake("qemu")
	name := "vgpuhost-test-missing"
	fake.AddForeignDomain(name, `<domain type="qemu"><name>`+name+`</name><memory unit="MiB">64</memory><os><type arch="x86_64">hvm</type></os><devices>
  <hostdev mode="subsystem" type="pci" managed="yes"><source><address domain="0x0000" bus="0x41" slot="0x00" function="0x0"/></source><alias name="hostdev0"/></hostdev>
  <video><model type="virtio"/><alias name="video0"/></video>
</devices></domain>`, true)
	fake.QMPFunc = func(_, _, _ string) (string, error) {
		return `{"return":[{"bus":0,"devices":[{"bus":0,"slot":1,"function":0,"class_info":{"class":768},"id":{"vendor":6900,"device":4176},"qdev_id":"video0","regions":[]}]}]}`, nil
	}
	withConn(t, fake.URI(), fake)
	t.Setenv("VGPU_HOST_CONNECT", fake.URI())
	root := t.TempDir()

	out, errs, code := runAll(t, "--host-root", root, "verify", name)
	if code != exitFailure || !strings.Contains(errs, "hostdev0") || !strings.Contains(errs, "41:00.0") {
		t.Errorf("verify exit %d, want %d naming the missing hostdev:\n%s", code, exitFailure, errs)
	}
	if !regexp.MustCompile(`(?m)^MISSING hostdev0\s+hostdev-pci\s+41:00\.0\s*$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^ok\s+video0\s+virtio-gpu\s+00:01\.0 1af4:1050$`).MatchString(out) {
		t.Errorf("verify table:\n%s", out)
	}
	out, _, code = runAll(t, "--host-root", root, "-o", "json", "verify", name)
	var vr lifecycle.VerifyResult
	if err := json.Unmarshal([]byte(out), &vr); err != nil || code != exitFailure || vr.OK || len(vr.Checks) != 2 {
		t.Fatalf("verify -o json exit %d (%v):\n%s", code, err, out)
	}
	for _, c := range vr.Checks {
		if c.Found != (c.Device == "video0") {
			t.Errorf("check %+v", c)
		}
	}
}

// shellQuote quotes args for sh -c.
func shellQuote(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// TestWaitShutdownProgressLibvirtd runs `apply --wait-shutdown` on a pseudo-terminal (script
// (1)): the table format prints progress while it waits, and the guest powering off (here
// virsh destroy, as the blank-disk guest never powers itself off) ends it with exit 0 and
// state shutoff. In JSON the same run prints nothing but the JSON document, even on a
// terminal. A guest that does not power off in --timeout is an error that says so.
func TestWaitShutdownProgressLibvirtd(t *testing.T) {
	uri := testenv.Libvirtd(t)
	bin := binary(t)
	testenv.RequireTool(t, "script", "util-linux")
	name := "vgpuhost-test-wait"
	root, spec := world(t, uri, name)

	onPTY := func(args ...string) (string, error) {
		c := exec.Command("script", "-qec", shellQuote(append([]string{bin, "--host-root", root.Dir()}, args...)), "/dev/null")
		done := make(chan struct{})
		go func() {
			// Power the guest off once apply has started it and waited a little.
			defer close(done)
			deadline := time.Now().Add(60 * time.Second)
			for time.Now().Before(deadline) {
				if s, _ := virsh(uri, "domstate", name); strings.TrimSpace(s) == "running" {
					time.Sleep(2 * time.Second)
					virsh(uri, "destroy", name)
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		}()
		out, err := c.CombinedOutput()
		<-done
		return strings.ReplaceAll(string(out), "\r\n", "\n"), err
	}

	out, err := onPTY("apply", "--connect", uri, "--virt-type", "qemu", "--wait-shutdown", "--timeout", "60s", spec)
	if err != nil || !strings.Contains(out, "\r"+name+": waiting for the guest to power off (") || !strings.Contains(out, name+": applied, shutoff") {
		t.Fatalf("apply --wait-shutdown on a terminal: %v\n%q", err, out)
	}
	if out, code := runCLI(t, "--host-root", root.Dir(), "destroy", "--connect", uri, name); code != 0 {
		t.Fatalf("destroy exit %d:\n%s", code, out)
	}

	out, err = onPTY("-o", "json", "apply", "--connect", uri, "--virt-type", "qemu", "--wait-shutdown", "--timeout", "60s", spec)
	var rs []lifecycle.VMApplyResult
	if err != nil || json.Unmarshal([]byte(out), &rs) != nil || len(rs) != 1 || rs[0].State != "shutoff" {
		t.Fatalf("apply -o json --wait-shutdown on a terminal printed more than its JSON (%v):\n%q", err, out)
	}

	// Started again, it never powers off: the wait ends at --timeout and says so.
	out2, errs, code := runAll(t, "--host-root", root.Dir(), "apply", "--connect", uri, "--virt-type", "qemu", "--wait-shutdown", "--timeout", "1s", spec)
	if code == 0 || !strings.Contains(errs, name+" did not power off within 1s") {
		t.Errorf("wait past --timeout: exit %d\nstdout:\n%s\nstderr:\n%s", code, out2, errs)
	}
	if out, code := runCLI(t, "--host-root", root.Dir(), "destroy", "--connect", uri, name); code != 0 {
		t.Fatalf("destroy exit %d:\n%s", code, out)
	}
	assertClean(t, uri, root, name)
}
