package clitree

import (
	"errors"
	"os"

	"github.com/vgpu-host/vgpu-host/virt/remote"
)

var errNoAgentBinary = errors.New(AgentBinary + " not found")

// execAgent replaces this process with vgpu-host-agent and the same arguments: same pid, so
// systemd's Type=notify and the socket's peer see one process. It is `vgpu-host agent` in the
// light CLI (a nil Env.Agent), which stays light to start (no net/http server, no Prometheus
// client in every command's init); vgpu-host-agent is the same command tree with the server.
func execAgent() error {
	// Checked and run through one descriptor: a link flipped between the check and the exec
	// cannot run another file as root.
	h, err := remote.OpenHelper(AgentBinary, "VGPU_HOST_AGENT_BIN", "the host agent", errNoAgentBinary)
	if err != nil {
		return err
	}
	defer h.Close()
	return h.Exec(append([]string{h.Path}, os.Args[1:]...), os.Environ())
}
