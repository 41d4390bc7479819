package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/agent/agentapi"
	"github.com/vgpu-host/vgpu-host/host"
)

// --agent values.
const (
	agentAuto   = "auto"
	agentAlways = "always"
	agentNever  = "never"
)

// agentSocketUnder is the agent's default socket under root.
func agentSocketUnder(root host.Root) string {
	return root.Path(strings.Split(strings.TrimPrefix(agentapi.DefaultSocket, "/"), "/")...)
}

// forward runs the command line through the agent when --agent says so and one answers:
// it prints what the command printed there and returns its exit code with done set. done is
// false when the command is to run in-process: --agent never, a command that never goes
// through the agent (agent, completion, version, help, the Kubernetes plugins), a usage
// error the CLI reports itself, a file the CLI cannot read (it reports that itself), or, in
// auto mode, no agent.
func forward(app *cli.Command, args []string, stdout, stderr io.Writer) (code int, done bool) {
	if len(args) == 0 {
		return 0, false
	}
	p := parseArgv(app, args)
	if p.help || p.unknown || len(p.path) == 1 {
		return 0, false
	}
	mode, ok := p.value(args, "agent")
	if !ok {
		mode, ok = os.LookupEnv("VGPU_HOST_AGENT")
	}
	if !ok || mode == "" {
		mode = agentAuto
	}
	switch mode {
	case agentNever:
		return 0, false
	case agentAuto, agentAlways:
	default:
		fmt.Fprintf(stderr, "vgpu-host: --agent %q: use auto, always or never\n", mode)
		return exitUsage, true
	}
	job, err := jobOf(p, args)
	if err != nil {
		return 0, false // not a command for the agent
	}
	req, socket, ok := agentRequest(p, job, args)
	if !ok {
		return 0, false
	}
	if mode == agentAuto {
		if st, err := os.Stat(socket); err != nil || st.Mode()&os.ModeSocket == 0 {
			return 0, false
		}
	}
	res, err := agentapi.Client{Socket: socket}.Exec(context.Background(), req)
	var se *agentapi.StatusError
	switch {
	case err == nil:
		io.WriteString(stdout, res.Stdout)
		io.WriteString(stderr, res.Stderr)
		return res.ExitCode, true
	case errors.Is(err, agentapi.ErrUnreachable) && mode == agentAuto:
		return 0, false
	case errors.Is(err, agentapi.ErrUnreachable):
		fmt.Fprintf(stderr, "vgpu-host: --agent always: %v: start it (vgpu-host agent), name its socket with --agent-socket, or run with --agent never\n", err)
		return exitFailure, true
	case errors.As(err, &se) && se.Status == 403:
		fmt.Fprintf(stderr, "vgpu-host: %s (run it as root, or join the agent's group)\n", se.Body.Error)
		return exitRefused, true
	case errors.As(err, &se):
		fmt.Fprintf(stderr, "vgpu-host: the agent at %s: %s (HTTP %d)\n", socket, se.Body.Error, se.Status)
		return exitFailure, true
	}
	fmt.Fprintf(stderr, "vgpu-host: the agent at %s: %v\n", socket, err)
	return exitFailure, true
}

// agentRequest builds the exec request of a command line: the caller's files read here (with
// the caller's permissions), paths the agent cannot resolve from its own working directory
// made absolute, and the caller's values of the environment variables the command reads.
// It returns the agent's socket too; ok is false when the CLI should run the command itself.
func agentRequest(p parsedArgs, job agentapi.Job, args []string) (agentapi.ExecRequest, string, bool) {
	req := agentapi.ExecRequest{Args: slices.Clone(args), Env: map[string]string{}}
	abs := func(v string) string {
		if a, err := filepath.Abs(v); err == nil {
			return a
		}
		return v
	}
	for _, c := range p.path {
		for _, f := range c.Flags {
			if src := flagSources(f); src != nil {
				for _, k := range src.EnvKeys() {
					if v, ok := os.LookupEnv(k); ok {
						req.Env[k] = v
					}
				}
			}
		}
	}
	rootDir := "/"
	if v, ok := req.Env["VGPU_HOST_ROOT"]; ok && v != "" {
		req.Env["VGPU_HOST_ROOT"] = abs(v)
		rootDir = abs(v)
	}
	absFlags := append([]string{"host-root"}, agentRules[p.name()].absFlags...)
	for _, name := range absFlags {
		if v, ok := p.flags[name]; ok && !v.set {
			val := abs(strings.TrimPrefix(args[v.index], v.prefix))
			req.Args[v.index] = v.prefix + val
			if name == "host-root" {
				rootDir = val
			}
		}
	}
	if _, ok := p.flags["host-root"]; !ok {
		// Always name the root meant, so that an agent serving another (--agent-socket)
		// refuses rather than acting on its own.
		req.Env["VGPU_HOST_ROOT"] = rootDir
	}
	if len(job.Files) > 0 {
		req.Files = map[string]string{}
	}
	for _, f := range job.Files {
		name := strings.TrimPrefix(args[f.Index], f.Prefix)
		b, err := host.ReadFileLimit(name, agentapi.DefaultMaxBody/2)
		if err != nil {
			return req, "", false
		}
		req.Files[name] = string(b)
	}
	socket, ok := p.value(args, "agent-socket")
	if !ok {
		socket = os.Getenv("VGPU_HOST_AGENT_SOCKET")
	}
	if socket == "" {
		root, err := host.NewRoot(rootDir)
		if err != nil {
			return req, "", false
		}
		socket = agentSocketUnder(root)
	}
	return req, abs(socket), true
}
