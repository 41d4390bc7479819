package reconcile

import (
	"fmt"
	"strings"

	"github.com/coreos/go-systemd/v22/daemon"
)

// systemd's notification protocol (sd_notify(3)): a Type=notify unit is "started" only when
// the service sends READY=1 to the datagram socket in $NOTIFY_SOCKET, so units ordered after
// it (libvirtd, libvirt-guests) wait until the boot reconcile is done. STATUS= is the line
// `systemctl status` shows. Without $NOTIFY_SOCKET (not under systemd) nothing is sent and
// the helpers return false, nil.

// NotifyReady sends READY=1 with status as the unit's status line.
func NotifyReady(status string) (bool, error) {
	return notify(daemon.SdNotifyReady, status)
}

// NotifyStatus updates the unit's status line only.
func NotifyStatus(status string) (bool, error) {
	return notify("", status)
}

// NotifyStopping sends STOPPING=1 (the agent is shutting down) with status.
func NotifyStopping(status string) (bool, error) {
	return notify(daemon.SdNotifyStopping, status)
}

// NotifyResult reports a reconcile to systemd: READY=1 and its Summary as the status line.
// The agent is ready after a reconcile with failed steps too (its API shows them); the status
// line says how many failed.
func NotifyResult(r Result) (bool, error) {
	return NotifyReady(r.Summary())
}

func notify(state, status string) (bool, error) {
	var lines []string
	if state != "" {
		lines = append(lines, state)
	}
	if status != "" {
		// One line: a newline would start another assignment in the datagram.
		lines = append(lines, "STATUS="+strings.Join(strings.Fields(status), " "))
	}
	ok, err := daemon.SdNotify(false, strings.Join(lines, "\n"))
	if err != nil {
		return ok, fmt.Errorf("sd_notify %q: %w", strings.Join(lines, "; "), err)
	}
	return ok, nil
}
