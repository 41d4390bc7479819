package clitree

import (
	"context"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/agent/agentapi"
)

// AgentBinary is the agent's binary, found beside vgpu-host (make build and make install put
// them together), else on PATH, or named by $VGPU_HOST_AGENT_BIN.
const AgentBinary = "vgpu-host-agent"

func agentCommand() *cli.Command {
	return &cli.Command{
		Name:  "agent",
		Usage: "run the host agent: a JSON API over a unix socket that runs every command for its callers (docs/agent.md)",
		Description: "Serves /v1/ on --socket (mode 0660, root and --group). Reads are open to whoever can\n" +
			"connect; changes need root or the group, run one at a time in arrival order, and are\n" +
			"logged with the caller's uid and pid. The CLI uses the agent when one answers (--agent).\n" +
			"SIGTERM finishes the operation in flight, removes the socket and exits 0. Exit codes:\n" +
			"0 stopped, 1 failed, 2 usage, 4 the socket's directory is not trusted (not root's, or writable by\n" +
			"others, or a link out of --host-root), 5 another agent answers on the socket.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "socket", Usage: "the socket `PATH` (default " + agentapi.DefaultSocket + " under --host-root)"},
			&cli.StringFlag{Name: "group", Value: agentapi.DefaultGroup, Usage: "the `GROUP` that owns the socket and may change the host (the default is used only if it exists; empty: root only)"},
			connectFlag(),
			&cli.DurationFlag{Name: "request-timeout", Value: agentapi.DefaultRequestTimeout, Usage: "bound each operation by `DURATION`"},
			&cli.DurationFlag{Name: "shutdown-timeout", Value: agentapi.DefaultShutdownTimeout, Usage: "on SIGTERM, wait at most `DURATION` for the operations in flight"},
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "`LEVEL`: debug, info, warn or error"},
			&cli.StringFlag{Name: "metrics-listen", Usage: "also serve /metrics over TCP on `ADDR` (host:port; the socket always serves it)"},
		},
		// The server in vgpu-host-agent (Env.Agent, internal/agentcmd); vgpu-host, which
		// links no server, replaces itself with vgpu-host-agent (agent_light.go).
		Action: func(ctx context.Context, cmd *cli.Command) error { return envOf(cmd).runAgent(ctx, cmd) },
	}
}
