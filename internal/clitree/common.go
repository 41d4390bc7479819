package clitree

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v3"
	"gopkg.in/yaml.v3"

	"github.com/vgpu-host/vgpu-host/agent/agentapi"
	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/internal/jsonindent"
	"github.com/vgpu-host/vgpu-host/internal/termsafe"
	"github.com/vgpu-host/vgpu-host/ops"
)

// Exit codes, documented in the README. Scripts can rely on them (package ops owns them).
const (
	exitOK          = ops.ExitOK
	exitFailure     = ops.ExitFailure
	exitUsage       = ops.ExitUsage
	exitNotReady    = ops.ExitNotReady
	exitRefused     = ops.ExitRefused
	exitBusy        = ops.ExitBusy
	exitNotFound    = ops.ExitNotFound
	exitUnsupported = ops.ExitUnsupported
)

// exitCode maps an error to the documented exit code: the command line's own mistakes here,
// everything else as ops.ExitCode decides.
func exitCode(err error) int {
	var ec cli.ExitCoder
	switch {
	case err == nil:
		return exitOK
	case isFlagError(err): // before ExitCoder: the cli says 3 for "No help topic"
		return exitUsage
	case errors.As(err, &ec):
		return ec.ExitCode()
	}
	return ops.ExitCode(err)
}

// usageErr reports a command-line mistake (exit 2): ops.ErrUsage, so that an operation's
// usage errors and the CLI's are one.
func usageErr(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ops.ErrUsage, fmt.Sprintf(format, a...))
}

func isFlagError(err error) bool {
	s := err.Error()
	return strings.Contains(s, "flag provided but not defined") || strings.Contains(s, "invalid value") ||
		strings.Contains(s, "No help topic") || strings.Contains(s, "Required flag")
}

func globalFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{
			Name:    "host-root",
			Value:   "/",
			Usage:   "resolve every host path (/sys, /proc, /dev, /etc, /var/lib) under `DIR`",
			Sources: cli.EnvVars("VGPU_HOST_ROOT"),
		},
		&cli.StringFlag{
			Name:    "output",
			Aliases: []string{"o"},
			Value:   "table",
			Usage:   "output format: table, json or yaml",
			Sources: cli.EnvVars("VGPU_HOST_OUTPUT"),
		},
		&cli.StringFlag{
			Name:    "agent",
			Value:   agentAuto,
			Usage:   "run the command through the host agent (`MODE`): auto (when one answers on its socket), always or never (docs/agent.md)",
			Sources: cli.EnvVars("VGPU_HOST_AGENT"),
		},
		&cli.StringFlag{
			Name:    "agent-socket",
			Usage:   "the agent's socket `PATH` (default " + agentapi.DefaultSocket + " under --host-root)",
			Sources: cli.EnvVars("VGPU_HOST_AGENT_SOCKET"),
		},
	}
}

// rootOf returns the validated --host-root of the invocation.
func rootOf(cmd *cli.Command) (host.Root, error) {
	if cmd.IsSet("host-root") && cmd.String("host-root") == "" {
		// An empty --host-root (or VGPU_HOST_ROOT=) is a mistake, never the real root.
		return host.Root{}, usageErr("--host-root is empty: name a directory (/ for this machine)")
	}
	r, err := host.NewRoot(cmd.String("host-root"))
	if err == nil {
		r, err = r.Checked() // a snapshot's sys given for the snapshot: refused here, exit 2
	}
	if err != nil {
		return host.Root{}, fmt.Errorf("%w: %w", ops.ErrUsage, err)
	}
	return r, nil
}

// outputOf returns the validated --output format.
func outputOf(cmd *cli.Command) (string, error) {
	return outputFormat(cmd.String("output"))
}

// outputFormat returns the --output format o, validated.
func outputFormat(o string) (string, error) {
	switch o {
	case "table", "json", "yaml":
		return o, nil
	}
	return "", usageErr("unknown output format %q: use table, json or yaml", o)
}

// emit writes v as JSON or YAML, or calls table for the human format.
func emit(cmd *cli.Command, v any, table func(w io.Writer) error) error {
	o, err := outputOf(cmd)
	if err != nil {
		return err
	}
	return emitTo(cmd.Root().Writer, o, v, table)
}

// emitTo writes v to w in output format o (checked by outputOf): as JSON or YAML, or through
// table for the human format. It is emit without the command: a command's renderer uses it.
func emitTo(w io.Writer, o string, v any, table func(w io.Writer) error) error {
	if o == "table" {
		// Buffered: tabwriter writes each cell on its own, and unbuffered each was a
		// write(2) (~290 for a 16-instance mdev create's table, costly under TCG in the lab).
		// Through termsafe: a cell read from a hostile host tree (an mdev type named ESC [ 2 J)
		// shows its control characters escaped instead of driving the terminal.
		bw := bufio.NewWriter(w)
		if err := table(termsafe.Writer{W: bw}); err != nil {
			bw.Flush()
			return err
		}
		return bw.Flush()
	}
	return encodeAs(w, o, v)
}

// encodeAs writes v as JSON (o == "json") or YAML (o == "yaml") with the JSON field names.
func encodeAs(w io.Writer, o string, v any) error {
	switch o {
	case "json":
		// json.Encoder's indented bytes, without its slow indenter (issue 19: a third of
		// `inspect -o json` on a 64-GPU host).
		return jsonindent.Encode(w, v)
	case "yaml":
		// Round-trip through JSON so YAML uses the same (json-tagged) field names.
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		var generic any
		if err := json.Unmarshal(b, &generic); err != nil {
			return err
		}
		enc := yaml.NewEncoder(w)
		enc.SetIndent(2)
		defer enc.Close()
		return enc.Encode(generic)
	}
	return fmt.Errorf("encode as %q: %w", o, ops.ErrUsage)
}
