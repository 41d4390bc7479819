package clitree

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/internal/testenv"
	"github.com/vgpu-host/vgpu-host/ledger"
	"github.com/vgpu-host/vgpu-host/virt"
	"github.com/vgpu-host/vgpu-host/virt/direct"
	"github.com/vgpu-host/vgpu-host/virt/remote"
)

// journalTail returns "action/status" of name's last n journal steps.
func journalTail(t *testing.T, root host.Root, name string, n int) string {
	t.Helper()
	b, err := ledger.Open(root).Read()
	if err != nil {
		t.Fatal(err)
	}
	e := b.VM(name)
	if e == nil {
		t.Fatalf("%s is not in the ledger", name)
	}
	j := e.Journal
	if len(j) > n {
		j = j[len(j)-n:]
	}
	var out []string
	for _, s := range j {
		out = append(out, s.Action+"/"+s.Status)
	}
	return strings.Join(out, " ")
}

// videos counts the virtio video devices of the domain's live and persistent XML.
func videos(t *testing.T, uri, name string) (live, config int) {
	t.Helper()
	for i, args := range [][]string{{"dumpxml", name}, {"dumpxml", "--inactive", name}} {
		x, err := virsh(uri, args...)
		if err != nil {
			t.Fatalf("virsh %v: %v\n%s", args, err, x)
		}
		n, err := virt.CountDevice(x, "video:virtio")
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			live = n
		} else {
			config = n
		}
	}
	return live, config
}

// TestHotplugLibvirtd attaches and detaches a virtio-gpu to a running TCG guest of a real
// libvirtd, with the ledger checked after each step; libvirt's refusal of a live video is
// what vgpu-host says; the reserved root ports are free in the running guest; and an attach
// killed (exit 137, as after kill -9) after and before its libvirt call is undone by the next
// detach or attach, then destroy leaves nothing.
func TestHotplugLibvirtd(t *testing.T) {
	uri := testenv.Libvirtd(t)
	bin := binary(t)
	name := "vgpuhost-test-hotplug"
	root, spec := world(t, uri, name)
	b, _ := os.ReadFile(spec)
	if err := os.WriteFile(spec, append(b, "  hotplugSlots: 2\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	g := []string{"--host-root", root.Dir()}
	c := []string{"--connect", uri}
	if out, code := runCLI(t, append(g, "apply", "--connect", uri, "--virt-type", "qemu", spec)...); code != 0 {
		t.Fatalf("apply exit %d:\n%s", code, out)
	}
	ctx := context.Background()
	// The reserved ports are empty in the running guest, whatever libvirt placed itself.
	lx, err := virsh(uri, "dumpxml", name)
	if err != nil {
		t.Fatal(err)
	}
	free, err := virt.FreeRootPorts(lx)
	if err != nil || len(free) < 2 {
		t.Fatalf("free root ports of the running guest: %v %v\n%s", free, err, lx)
	}
	t.Logf("free root ports: %v", free)
	// libvirt 9.0 cannot hotplug a video device: both adapters say so in the same words.
	dc, err := direct.Open(uri)
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	hc, err := opened(remote.Start(uri, remote.OpenOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	for _, conn := range []virt.Conn{dc, hc} {
		err := conn.AttachDevice(ctx, name, "<video><model type='virtio'/></video>", virt.DeviceLive)
		if !errors.Is(err, virt.ErrDeviceNotHotpluggable) {
			t.Fatalf("%T: live attach of a video: %v, want ErrDeviceNotHotpluggable", conn, err)
		}
	}
	tail := journalTail(t, root, name, 1)

	// Live: refused with the reason (exit 7), nothing changed.
	out, code := runCLI(t, append(g, append(append([]string{"attach"}, c...), name, "--virtio")...)...)
	if code != 7 {
		t.Fatalf("attach --virtio to a running VM: exit %d, want 7:\n%s", code, out)
	}
	if got := journalTail(t, root, name, 1); got != tail {
		t.Fatalf("a refused attach changed the journal: %s", got)
	}
	// --config: the definition gets a second virtio-gpu, the guest keeps one.
	out, code = runCLI(t, append(g, append(append([]string{"-o", "json", "attach"}, c...), name, "--virtio", "--config")...)...)
	if code != 0 || !strings.Contains(out, `"changed": true`) || !strings.Contains(out, `"scope": "config"`) {
		t.Fatalf("attach --virtio --config: exit %d:\n%s", code, out)
	}
	if l, cf := videos(t, uri, name); l != 1 || cf != 2 {
		t.Fatalf("after attach: %d live and %d config virtio videos, want 1 and 2", l, cf)
	}
	if got := journalTail(t, root, name, 2); got != "hotplug/done attach-device/done" {
		t.Fatalf("journal after attach: %s", got)
	}
	out, code = runCLI(t, append(g, append(append([]string{"attach"}, c...), name, "--virtio", "--config")...)...)
	if code != 0 || !strings.Contains(out, "already attached") {
		t.Fatalf("second attach: exit %d:\n%s", code, out)
	}
	out, code = runCLI(t, append(g, append(append([]string{"detach"}, c...), name, "virtio-gpu")...)...)
	if code != 0 {
		t.Fatalf("detach: exit %d:\n%s", code, out)
	}
	if l, cf := videos(t, uri, name); l != 1 || cf != 1 {
		t.Fatalf("after detach: %d live and %d config virtio videos, want 1 and 1", l, cf)
	}
	if got := journalTail(t, root, name, 2); got != "hotplug/undone attach-device/undone" {
		t.Fatalf("journal after detach: %s", got)
	}

	// Killed after and before its libvirt call; then detach or attach converges.
	for _, k := range []struct {
		before bool
		then   string
	}{{false, "detach"}, {true, "detach"}, {false, "attach"}} {
		cmd := exec.Command(bin, append(g, append(append([]string{"attach"}, c...), name, "--virtio", "--config")...)...)
		cmd.Env = append(os.Environ(), envCrashAt+"=1", envCrashBefore+"="+map[bool]string{true: "1", false: "0"}[k.before])
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 137 {
			t.Fatalf("attach did not crash: %v\n%s", err, out)
		}
		if got := journalTail(t, root, name, 2); got != "hotplug/started attach-device/started" {
			t.Fatalf("journal after the crash: %s", got)
		}
		want := 2
		if k.before {
			want = 1
		}
		if _, cf := videos(t, uri, name); cf != want {
			t.Fatalf("crash before=%v: %d config videos, want %d", k.before, cf, want)
		}
		args := []string{name, "virtio-gpu"}
		if k.then == "attach" {
			args = []string{name, "--virtio", "--config"}
		}
		out2, code := runCLI(t, append(g, append(append([]string{"-o", "json", k.then}, c...), args...)...)...)
		if k.then == "detach" {
			// The interrupted attach is undone; the device was never attached, so detach then
			// says it is gone.
			if code != 0 || !strings.Contains(out2, `"converged"`) || !strings.Contains(out2, "detached already") {
				t.Fatalf("detach after the crash: exit %d:\n%s", code, out2)
			}
			if _, cf := videos(t, uri, name); cf != 1 {
				t.Fatalf("after converging: %d config videos, want 1", cf)
			}
			if got := journalTail(t, root, name, 2); got != "hotplug/undone attach-device/undone" {
				t.Fatalf("journal after converging: %s", got)
			}
			continue
		}
		if code != 0 || !strings.Contains(out2, `"converged"`) || !strings.Contains(out2, `"changed": true`) {
			t.Fatalf("attach after the crash: exit %d:\n%s", code, out2)
		}
		if _, cf := videos(t, uri, name); cf != 2 {
			t.Fatalf("after attach: %d config videos, want 2", cf)
		}
	}
	if out, code := runCLI(t, append(g, "destroy", "--connect", uri, name)...); code != 0 {
		t.Fatalf("destroy exit %d:\n%s", code, out)
	}
	assertClean(t, uri, root, name)
}
