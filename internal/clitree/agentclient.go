package clitree

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/agent/agentapi"
	"github.com/vgpu-host/vgpu-host/cloudinit"
	"github.com/vgpu-host/vgpu-host/domains"
	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/lifecycle"
	"github.com/vgpu-host/vgpu-host/ops"
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

// agentExit is the exit code of a command the agent ran: its output is already printed, so
// main prints nothing more.
type agentExit int

func (e agentExit) Error() string { return fmt.Sprintf("exit %d (through the agent)", int(e)) }

// ExitCode is the agent's exit code of the command.
func (e agentExit) ExitCode() int { return int(e) }

// agentSocketKey, in the root's Metadata, holds a func(*cli.Command) (socket string, ok bool)
// that picks the agent's socket for a parsed command instead of --agent-socket (the tests that
// run the CLI's tests through agents: one per host root); ok false runs it in-process.
const agentSocketKey = "vgpu-host-agent-socket"

// forwardedKey marks, in the root's Metadata, a run whose command went to the agent (tests).
const forwardedKey = "vgpu-host-forwarded"

// wireAgent makes every command the agent can run go through it when --agent says so: its
// action first offers the parsed command to forward. Commands without a rule are left alone.
func wireAgent(app *cli.Command) {
	var walk func(prefix string, cs []*cli.Command)
	walk = func(prefix string, cs []*cli.Command) {
		for _, c := range cs {
			name := strings.TrimSpace(prefix + " " + c.Name)
			walk(name, c.Commands)
			if c.Action == nil || len(c.Commands) > 0 {
				continue
			}
			if _, ok := agentRules.Get()[name]; !ok {
				continue
			}
			action := c.Action
			c.Action = func(ctx context.Context, cmd *cli.Command) error {
				code, done := forward(ctx, cmd)
				if !done {
					return action(ctx, cmd)
				}
				if code == exitOK {
					return nil
				}
				return agentExit(code)
			}
		}
	}
	walk("", app.Commands)
}

// forward runs the parsed command through the agent when --agent says so and one answers: it
// prints what the command printed there and returns its exit code with done set. The request
// is typed, built from the values urfave/cli parsed here (the agent never sees this command
// line). done is false when the command is to run in-process: --agent never, a file the CLI
// cannot read (it reports that itself), or, in auto mode, no agent.
func forward(ctx context.Context, cmd *cli.Command) (code int, done bool) {
	stdout, stderr := cmd.Root().Writer, cmd.Root().ErrWriter
	mode := cmd.String("agent")
	switch mode {
	case agentNever:
		return 0, false
	case agentAuto, agentAlways:
	case "":
		mode = agentAuto
	default:
		fmt.Fprintf(stderr, "vgpu-host: usage: --agent %q: use auto, always or never\n", mode) // as usageErr words it
		return exitUsage, true
	}
	// The socket first: with --agent auto and no agent (most runs of the CLI), nothing of
	// the request is built or read (issue 32: the command's own start-up cost).
	socket, ok := agentSocket(cmd)
	if !ok {
		return 0, false
	}
	if mode == agentAuto {
		if st, err := os.Stat(socket); err != nil || st.Mode()&os.ModeSocket == 0 {
			return 0, false
		}
	}
	req, ok := agentRequest(cmd)
	if !ok {
		return 0, false
	}
	if cmd.Root().Metadata == nil {
		cmd.Root().Metadata = map[string]any{}
	}
	cmd.Root().Metadata[forwardedKey] = true
	// The answer streamed: the command's progress printed as it happens, as the in-process
	// run prints it (apply --wait-shutdown's wait, a long apply's steps).
	o, _ := outputOf(cmd)
	terminal := isTerminal(os.Stderr)
	res, err := agentapi.Client{Socket: socket}.ExecStream(ctx, req, func(raw json.RawMessage) {
		var e ops.Event
		if json.Unmarshal(raw, &e) == nil {
			printEvent(stderr, o, terminal, e)
		}
	})
	if code, done, ok := agentSocketRefusal(err, mode, stderr); ok {
		if !done {
			delete(cmd.Root().Metadata, forwardedKey)
		}
		return code, done
	}
	var se *agentapi.StatusError
	switch {
	case err == nil:
		io.WriteString(stdout, res.Stdout)
		io.WriteString(stderr, res.Stderr)
		return res.ExitCode, true
	case errors.Is(err, agentapi.ErrUnreachable) && mode == agentAuto:
		delete(cmd.Root().Metadata, forwardedKey)
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

// agentRequest builds the typed request of a parsed command: its full name, every flag set
// (on the command line or from the environment, as urfave/cli resolved it) with its typed
// value, its operands, and the content of the files it reads, read here with the caller's
// permissions; paths the agent cannot resolve from its own working directory are made
// absolute. ok is false when the CLI should run the command itself.
func agentRequest(cmd *cli.Command) (agentapi.ExecRequest, bool) {
	op := opName(cmd)
	rule, ok := agentRules.Get()[op]
	if !ok {
		return agentapi.ExecRequest{}, false // the agent does not run it
	}
	req := agentapi.ExecRequest{Command: op, Flags: map[string]json.RawMessage{}, Operands: cmd.Args().Slice()}
	seen := map[string]bool{}
	for _, c := range cmd.Lineage() {
		for _, f := range c.Flags {
			name := f.Names()[0]
			if seen[name] || cliOnlyFlag(name) || !f.IsSet() {
				continue
			}
			seen[name] = true
			v := f.Get()
			switch x := v.(type) {
			case time.Duration:
				v = x.String()
			case string:
				if x != "" && (name == "host-root" || slices.Contains(rule.absFlags, name)) {
					v = abs(x)
				}
			}
			b, err := json.Marshal(v)
			if err != nil {
				return req, false
			}
			req.Flags[name] = b
		}
	}
	if !cmd.IsSet("host-root") {
		// Always name the root meant, so that an agent serving another (--agent-socket)
		// refuses rather than acting on its own.
		req.Flags["host-root"], _ = json.Marshal(rootDirOf(cmd))
	}
	job, _, err := prepareRequest(cmd.Root(), req)
	if err != nil {
		return req, false // the in-process run reports it
	}
	read := func(name string, limit int64, regular bool) (string, bool) {
		readFile := host.ReadFileLimit // a spec may be a pipe: apply <(generate-spec)
		if regular {
			readFile = host.ReadRegularFileLimit
		}
		b, err := readFile(name, limit)
		return string(b), err == nil
	}
	for _, name := range job.Files {
		if req.Files == nil {
			req.Files = map[string]string{}
		}
		var ok bool
		if req.Files[name], ok = read(name, agentapi.DefaultMaxBody/2, false); !ok {
			return req, false
		}
		if !rule.specs {
			continue
		}
		// The public key files the spec names: read here, as the caller, never by the agent.
		vm, err := domains.Parse([]byte(req.Files[name]))
		if err != nil || vm.Spec.CloudInit == nil {
			continue
		}
		for _, k := range vm.Spec.CloudInit.SSHAuthorizedKeys {
			if cloudinit.IsPublicKey(k) || !filepath.IsAbs(k) {
				continue
			}
			if req.KeyFiles == nil {
				req.KeyFiles = map[string]string{}
			}
			if req.KeyFiles[k], ok = read(k, lifecycle.MaxKeyFileSize, true); !ok {
				return req, false
			}
		}
	}
	return req, true
}

// abs is path v made absolute, or v when it cannot be.
func abs(v string) string {
	if a, err := filepath.Abs(v); err == nil {
		return a
	}
	return v
}

// rootDirOf is the host root a parsed command names, made absolute: / by default.
func rootDirOf(cmd *cli.Command) string {
	if cmd.IsSet("host-root") {
		return abs(cmd.String("host-root"))
	}
	return "/"
}

// agentSocket is the socket of the agent a parsed command goes to: --agent-socket, else the
// one under its host root; ok is false when the CLI should run the command itself.
func agentSocket(cmd *cli.Command) (string, bool) {
	socket := cmd.String("agent-socket")
	if pick, ok := cmd.Root().Metadata[agentSocketKey].(func(*cli.Command) (string, bool)); ok {
		if socket, ok = pick(cmd); !ok {
			return "", false
		}
	}
	if socket == "" {
		root, err := host.NewRoot(rootDirOf(cmd))
		if err != nil {
			return "", false
		}
		socket = agentSocketUnder(root)
	}
	return abs(socket), true
}
