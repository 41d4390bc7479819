package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/agent"
	"github.com/vgpu-host/vgpu-host/host"
)

func agentCommand() *cli.Command {
	return &cli.Command{
		Name:  "agent",
		Usage: "run the host agent: a JSON API over a unix socket that runs every command for its callers (docs/agent.md)",
		Description: "Serves /v1/ on --socket (mode 0660, root and --group). Reads are open to whoever can\n" +
			"connect; changes need root or the group, run one at a time in arrival order, and are\n" +
			"logged with the caller's uid and pid. The CLI uses the agent when one answers (--agent).\n" +
			"SIGTERM finishes the operation in flight, removes the socket and exits 0. Exit codes:\n" +
			"0 stopped, 1 failed, 2 usage, 5 another agent answers on the socket.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "socket", Usage: "the socket `PATH` (default " + agent.DefaultSocket + " under --host-root)"},
			&cli.StringFlag{Name: "group", Value: agent.DefaultGroup, Usage: "the `GROUP` that owns the socket and may change the host (the default is used only if it exists; empty: root only)"},
			connectFlag(),
			&cli.DurationFlag{Name: "request-timeout", Value: agent.DefaultRequestTimeout, Usage: "bound each operation by `DURATION`"},
			&cli.DurationFlag{Name: "shutdown-timeout", Value: agent.DefaultShutdownTimeout, Usage: "on SIGTERM, wait at most `DURATION` for the operations in flight"},
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "`LEVEL`: debug, info, warn or error"},
			&cli.StringFlag{Name: "metrics-listen", Usage: "also serve /metrics over TCP on `ADDR` (host:port; the socket always serves it)"},
		},
		Action: runAgent,
	}
}

// agentServer builds the agent for the invocation; runAgent listens and serves it. This is
// where optional parts (metrics, boot reconcile, drift) are attached to the Server.
func agentServer(cmd *cli.Command) (*agent.Server, error) {
	if cmd.Args().Len() > 0 {
		return nil, usageErr("agent takes no arguments, got %q", cmd.Args().First())
	}
	root, err := rootOf(cmd)
	if err != nil {
		return nil, err
	}
	uri, err := connURI(cmd, root)
	if err != nil {
		return nil, err
	}
	log, err := agent.NewLogger(cmd.Root().ErrWriter, cmd.String("log-level"), isTerminal(os.Stderr))
	if err != nil {
		return nil, usageErr("--log-level: %v", err)
	}
	socket := agentSocketUnder(root)
	if cmd.IsSet("socket") {
		if socket, err = filepath.Abs(cmd.String("socket")); err != nil || cmd.String("socket") == "" {
			return nil, usageErr("--socket %q: name the socket's path", cmd.String("socket"))
		}
	}
	gid, group := -1, cmd.String("group")
	if group != "" {
		g, err := user.LookupGroup(group)
		switch {
		case err == nil:
			gid, _ = strconv.Atoi(g.Gid)
		case cmd.IsSet("group"):
			return nil, usageErr("--group %s: %v (create it with groupadd, or pass --group '' for root only)", group, err)
		default:
			group = ""
		}
	}
	procRoot, _ := host.NewRoot("/")
	return &agent.Server{
		Root:            root,
		Socket:          socket,
		GID:             gid,
		GroupName:       group,
		ProcRoot:        procRoot,
		Runner:          &cliRunner{root: root, uri: uri, log: log},
		Log:             log,
		RequestTimeout:  cmd.Duration("request-timeout"),
		ShutdownTimeout: cmd.Duration("shutdown-timeout"),
		URI:             uri,
		OpenConn:        openConn,
	}, nil
}

func runAgent(ctx context.Context, cmd *cli.Command) error {
	if !agentBuiltIn {
		// This binary stays light to start (no Prometheus client in every command's init):
		// the agent is the same command tree built with -tags agent, vgpu-host-agent.
		return execAgent()
	}
	srv, err := agentServer(cmd)
	if err != nil {
		return err
	}
	if srv.RequestTimeout <= 0 || srv.ShutdownTimeout <= 0 {
		return usageErr("--request-timeout and --shutdown-timeout must be positive")
	}
	if err := srv.Listen(); err != nil {
		if errors.Is(err, host.ErrBusy) {
			return err
		}
		return fmt.Errorf("agent: %w", err)
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	watcher, ready, err := agentParts(cmd, srv)
	if err != nil {
		return err
	}
	go func() {
		select {
		case <-ready:
			_ = watcher.Run(ctx)
		case <-ctx.Done():
		}
	}()
	return srv.Serve(ctx)
}
