package clitree

import (
	"bytes"
	"context"
	"fmt"
	"io"

	"github.com/vgpu-host/vgpu-host/agent/agentapi"
	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/internal/buildinfo"
	"github.com/vgpu-host/vgpu-host/internal/termsafe"
	"github.com/vgpu-host/vgpu-host/ops"
	"github.com/vgpu-host/vgpu-host/virt"
)

// How the agent's POST /v1/exec runs a command backed by an operation: the request's checked
// typed values (execFlags) → the command's request builder → the operation → the command's
// renderer into stdout, errors as the CLI prints them, the exit code exitCode gives. No command
// line is built or parsed on the way (issue 28).

// operationOf returns the operation-backed command a checked request names (for plan
// --migrate, the migration's plan) and the request's flag values; ok is false when the command
// has no operation (a bug: every command the agent runs has one, TestCommandLineCommands).
func operationOf(cl checkedRequest, req agentapi.ExecRequest) (opCommand, execFlags, bool) {
	if _, ok := opCommandNamed(req.Command); !ok {
		return opCommand{}, execFlags{}, false
	}
	f := execFlags{set: make(map[string]any, len(cl.flags)), defs: cl.defs, operands: req.Operands, files: req.Files}
	for _, tf := range cl.flags {
		f.set[tf.name] = tf.v
	}
	return opCommandOf(req.Command, f), f, true
}

// runOperation runs the job's operation for the caller in env: the typed request Prepare
// built (the one authorized), its result rendered as --output says. Progress events go to
// env.Progress when the caller streams them, else onto stderr as the CLI prints them when
// its stderr is not a terminal.
func (r *cliRunner) runOperation(ctx context.Context, job agentapi.Job, env agentapi.RunEnv, oc opCommand, f execFlags) (res agentapi.ExecResult) {
	var out, errw bytes.Buffer
	defer func() {
		if p := recover(); p != nil {
			res = agentapi.ExecResult{Stdout: out.String(), Stderr: errw.String() + internalErrorLine(p, panicSite()), ExitCode: exitFailure}
		}
	}()
	o, _ := outputFormat(f.String("output"))
	progress := env.Progress
	if progress == nil {
		progress = func(ev any) {
			if e, ok := ev.(ops.Event); ok {
				printEvent(&errw, o, false, e)
			}
		}
	}
	site := agentSite{r: r, run: env, job: job, progress: progress}
	var pre ops.Request
	if op, ok := job.Operation.(ops.Request); ok {
		pre = op
	}
	err := runOpCommand(ctx, job.Op, oc, f, site, &out, &errw, pre)
	if err != nil {
		fmt.Fprintf(&errw, "vgpu-host: %s\n", termsafe.String(err.Error())) // as Main prints it
	}
	return agentapi.ExecResult{Stdout: out.String(), Stderr: errw.String(), ExitCode: exitCode(err)}
}

// internalErrorLine is what a command that panicked with p at site prints (main's words).
func internalErrorLine(p any, site string) string {
	return fmt.Sprintf("vgpu-host: internal error (a bug in vgpu-host %s, please report it with the command line; docs/security.md says how): %v at %s\n",
		buildinfo.Version(), p, site)
}

// agentSite is the agent as an opSite: its root and libvirt, which --host-root and --connect
// may only repeat, its host writes logged, the key files the caller sent.
type agentSite struct {
	r        *cliRunner
	run      agentapi.RunEnv
	job      agentapi.Job
	progress func(any)
}

func (s agentSite) root(f flagValues) (host.Root, error) { return agentRoot(f, s.r.root) }

func (s agentSite) connURI(f flagValues, _ host.Root) (string, error) { return agentURI(f, s.r.uri) }

func (s agentSite) oneShot() bool { return false }

func (s agentSite) liveProgress() bool { return s.run.Progress != nil }

func (s agentSite) env(f flagValues, _ connKind, _ host.Root, _ string) ops.Env {
	e := s.r.opsEnv(s.job.Op, s.run, s.job.Request.KeyFiles, s.progress)
	open := e.OpenConn
	e.OpenConn = func() (virt.Conn, error) {
		if _, err := agentURI(f, s.r.uri); err != nil {
			return nil, err
		}
		return open()
	}
	return e
}

// printEvent prints a progress event on w as the CLI prints it with output format o: warnings
// always, steps with table output, a wait's line redrawn in place only for a human on a
// terminal.
func printEvent(w io.Writer, o string, terminal bool, e ops.Event) {
	switch {
	case e.Kind == ops.EventStep && o != "table":
		return
	case e.Kind == ops.EventTick:
		if o == "table" && terminal {
			if e.Message == "" {
				fmt.Fprintln(w)
			} else {
				fmt.Fprintf(w, "\r%s", termsafe.String(e.Message))
			}
		}
		return
	}
	fmt.Fprint(w, termsafe.String(e.Message)) // a warning quotes names read from the host
	if !e.Partial {
		fmt.Fprintln(w)
	}
}
