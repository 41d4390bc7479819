//go:build !agent

package main

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/agent"
	"github.com/vgpu-host/vgpu-host/agent/drift"
	"github.com/vgpu-host/vgpu-host/virt/remote"
)

// agentBuiltIn: this is vgpu-host, which leaves the agent to vgpu-host-agent.
const agentBuiltIn = false

// AgentBinary is the agent's binary, found beside vgpu-host (make build and make install put
// them together), else on PATH, or named by $VGPU_HOST_AGENT_BIN.
const AgentBinary = "vgpu-host-agent"

var errNoAgentBinary = errors.New(AgentBinary + " not found")

// execAgent replaces this process with vgpu-host-agent and the same arguments: same pid, so
// systemd's Type=notify and the socket's peer see one process.
func execAgent() error {
	p, err := remote.FindHelper(AgentBinary, "VGPU_HOST_AGENT_BIN", "the host agent", errNoAgentBinary)
	if err != nil {
		return err
	}
	if err := syscall.Exec(p, append([]string{p}, os.Args[1:]...), os.Environ()); err != nil {
		return fmt.Errorf("run %s: %w", p, err)
	}
	return nil
}

// agentParts is vgpu-host-agent's (agent_full.go); this binary never runs the agent itself.
func agentParts(*cli.Command, *agent.Server) (*drift.Watcher, chan struct{}, error) {
	return nil, nil, errors.New("the agent runs as " + AgentBinary)
}
