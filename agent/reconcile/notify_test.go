package reconcile

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// notifySocket listens on a real unixgram socket in a temporary directory, as systemd does for
// a Type=notify unit, and points $NOTIFY_SOCKET at it.
func notifySocket(t *testing.T) *net.UnixConn {
	t.Helper()
	p := filepath.Join(t.TempDir(), "notify.sock")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: p, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	t.Setenv("NOTIFY_SOCKET", p)
	return c
}

func readDatagram(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	buf := make([]byte, 4096)
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("no notification: %v", err)
	}
	return string(buf[:n])
}

func TestNotifyReadyAndStatus(t *testing.T) {
	c := notifySocket(t)
	r := Result{Duration: 84 * time.Millisecond, Steps: make([]Step, 5), Applied: 3, Already: 1, Failed: 1}
	sent, err := NotifyResult(r)
	if err != nil || !sent {
		t.Fatalf("NotifyResult: sent=%v %v", sent, err)
	}
	got := readDatagram(t, c)
	if want := "READY=1\nSTATUS=reconciled 5 steps in 84ms: 3 applied, 1 already, 0 skipped, 1 failed"; got != want {
		t.Errorf("datagram %q, want %q", got, want)
	}
	// A status line stays one line, whatever it is given.
	if sent, err := NotifyStatus("watching\ndomains"); err != nil || !sent {
		t.Fatalf("NotifyStatus: %v %v", sent, err)
	}
	if got := readDatagram(t, c); got != "STATUS=watching domains" {
		t.Errorf("status datagram %q", got)
	}
	if _, err := NotifyStopping("SIGTERM"); err != nil {
		t.Fatal(err)
	}
	if got := readDatagram(t, c); !strings.HasPrefix(got, "STOPPING=1\n") {
		t.Errorf("stopping datagram %q", got)
	}
}

// TestNotifyWithoutSystemd: outside systemd nothing is sent and nothing fails.
func TestNotifyWithoutSystemd(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	if sent, err := NotifyReady("ready"); sent || err != nil {
		t.Fatalf("sent=%v err=%v without NOTIFY_SOCKET", sent, err)
	}
	// A socket that is not there is an error the agent can log.
	t.Setenv("NOTIFY_SOCKET", filepath.Join(t.TempDir(), "missing.sock"))
	if _, err := NotifyReady("ready"); err == nil {
		t.Fatal("no error for a missing notify socket")
	}
}
