package clitree

import (
	"net"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/virt"
)

// TestAgentProcessTellsSystemd: under a Type=notify unit (deploy/systemd/vgpu-host-agent.service)
// the agent process says what it is doing on $NOTIFY_SOCKET, here a unixgram socket in a
// temporary directory as systemd's: the boot reconcile while it runs (systemctl status shows it
// while the unit is activating), READY=1 with the reconcile's summary once it is done, and
// STOPPING=1 at SIGTERM while it finishes the requests in flight. It then exits 0.
func TestAgentProcessTellsSystemd(t *testing.T) {
	t.Parallel()
	bin := binary(t)
	tr := hosttest.New(t)
	dir := tr.Dir()
	uri := virt.FileScheme + "://" + filepath.Join(dir, "libvirt.json")
	sock := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	msgs := make(chan string, 16)
	go func() {
		defer close(msgs)
		buf := make([]byte, 4096)
		for {
			n, _, err := conn.ReadFromUnix(buf)
			if err != nil {
				return
			}
			msgs <- string(buf[:n])
		}
	}()
	cmd, logs := startAgentProcess(t, bin, dir, uri, "NOTIFY_SOCKET="+sock)
	next := func(what string) string {
		t.Helper()
		select {
		case m := <-msgs:
			return m
		case <-time.After(10 * time.Second):
			t.Fatalf("no %s on NOTIFY_SOCKET from the agent:\n%s", what, logs.String())
		}
		return ""
	}
	if m := next("status"); m != "STATUS=boot reconcile: restoring the stored host layout, VFs, vGPU instances and vfio-pci bindings" {
		t.Errorf("first notification %q, want the boot reconcile's status line", m)
	}
	if m := next("READY=1"); !strings.HasPrefix(m, "READY=1\nSTATUS=") || strings.Count(m, "\n") != 1 {
		t.Errorf("second notification %q, want READY=1 and the reconcile's summary", m)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if m := next("STOPPING=1"); m != "STOPPING=1\nSTATUS=stopping: finishing the requests in flight" {
		t.Errorf("notification at SIGTERM %q, want STOPPING=1 and its status line", m)
	}
	if code := exitOf(t, cmd); code != 0 {
		t.Fatalf("the agent exited %d after SIGTERM, want 0:\n%s", code, logs.String())
	}
}
