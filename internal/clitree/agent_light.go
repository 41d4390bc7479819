//go:build !agent

package clitree

import (
	"context"
	"errors"
	"os"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/virt/remote"
)

var errNoAgentBinary = errors.New(AgentBinary + " not found")

// execAgent replaces this process with vgpu-host-agent and the same arguments: same pid, so
// systemd's Type=notify and the socket's peer see one process.
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

// runAgent replaces vgpu-host with vgpu-host-agent: this binary stays light to start (no
// net/http server, no Prometheus client in every command's init), and the agent is the same
// command tree built with -tags agent.
func runAgent(context.Context, *cli.Command) error { return execAgent() }
