package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"
)

// outcome is what running a request came to: a result, or a refusal before anything ran
// (status is then not 200 and err says why).
type outcome struct {
	res    ExecResult
	status int
	err    string
}

// execute runs one typed request for the caller in ctx: Prepare (the request checked and
// classified on its typed values), the permission check on that class, the caller's files
// checked against the files the command reads (checkFiles), then the Runner, on the worker
// for mutations. Every operation of the API goes through here.
// progress, when set, receives the run's progress events as they happen (a streamed answer).
func (s *Server) execute(ctx context.Context, req ExecRequest, progress func(any)) outcome {
	peer, ok := PeerOf(ctx)
	if !ok {
		return outcome{status: http.StatusForbidden, err: "no peer credentials on this connection"}
	}
	job, err := s.Runner.Prepare(req)
	info, _ := ctx.Value(reqInfoKey{}).(*reqInfo)
	if info == nil {
		info = &reqInfo{}
	}
	info.op = job.Op
	if err != nil {
		return outcome{status: http.StatusOK, res: ExecResult{Stderr: "vgpu-host: " + err.Error() + "\n", ExitCode: 2}}
	}
	if err := authorize(peer, job.Class, s.GID, s.GroupName, s.ProcRoot); err != nil {
		s.log().Warn("refused", "op", job.Op, "class", job.Class.String(), "uid", peer.UID, "pid", peer.PID, "err", err)
		return outcome{status: http.StatusForbidden, err: err.Error()}
	}
	if err := checkFiles(job, req.Files); err != nil {
		return outcome{status: http.StatusOK, res: ExecResult{Stderr: "vgpu-host: " + err.Error() + "\n", ExitCode: 2}}
	}
	env := RunEnv{Peer: peer, Progress: progress}
	if s.OpenConn != nil {
		env.Conn = s.sharedConn
	}
	run := func(ctx context.Context) ExecResult {
		ctx, cancel := context.WithTimeout(ctx, s.requestTimeout())
		defer cancel()
		start := time.Now()
		res := s.Runner.Run(ctx, job, env)
		d := time.Since(start)
		if s.Observe != nil {
			var oerr error
			if res.ExitCode != 0 {
				oerr = fmt.Errorf("exit %d: %s", res.ExitCode, errorText(res.Stderr))
			}
			s.Observe(job.Op, d, oerr)
		}
		if job.Class != Read {
			s.log().Info("operation", "op", job.Op, "flags", flagsOf(job.Request), "operands", job.Request.Operands,
				"uid", peer.UID, "pid", peer.PID, "duration_ms", ms(d), "exit_code", res.ExitCode)
		}
		return res
	}
	var res ExecResult
	status, msg := s.schedule(ctx, job.Op, peer, job.Class == Read, func(ctx context.Context) int {
		res = run(ctx)
		return res.ExitCode
	})
	if status == http.StatusOK {
		info.exitCode = res.ExitCode
	}
	return outcome{status: status, err: msg, res: res}
}

// schedule runs one authorized operation for peer; run returns its exit code. A read runs at
// once, under the request's context. A change runs on the worker, with a context detached
// from the request, so that a caller that leaves does not stop it half-way; it waits for the
// operations before it. The status is 200 when it ran (what run set may be read then), else
// msg says why not.
func (s *Server) schedule(ctx context.Context, op string, peer Peer, read bool, run func(ctx context.Context) int) (status int, msg string) {
	if read {
		run(ctx)
		return http.StatusOK, ""
	}
	t := &task{ctx: ctx, done: make(chan struct{})}
	t.run = func(wctx context.Context) {
		code := run(wctx)
		if ctx.Err() != nil {
			s.log().Warn("the caller left before the operation ended; it ran to the end", "op", op, "uid", peer.UID, "pid", peer.PID, "exit_code", code)
		}
	}
	t.skip = func() {
		s.log().Warn("the caller left before the operation started; not run", "op", op, "uid", peer.UID, "pid", peer.PID)
	}
	if !s.enqueue(t) {
		return http.StatusServiceUnavailable, "the agent is stopping: run the command again when it is back, or with --agent never"
	}
	select {
	case <-t.done:
		return http.StatusOK, ""
	case <-ctx.Done():
		return 499, "the caller left"
	}
}

// flagsOf is a request's flags for the log: each name with its JSON value.
func flagsOf(req ExecRequest) map[string]string {
	m := make(map[string]string, len(req.Flags))
	for k, v := range req.Flags {
		m[k] = string(v)
	}
	return m
}

// checkFiles checks the caller's files against the job's: every file the command reads comes
// with its content (the agent opens no path a caller names, root's included: the CLI reads
// them as the caller, and the operation reads the content from the request), and nothing else
// is sent.
func checkFiles(job Job, files map[string]string) error {
	if len(job.Files) == 0 {
		if len(files) > 0 {
			return fmt.Errorf("files were sent but %s reads none", job.Op)
		}
		return nil
	}
	for _, name := range job.Files {
		if _, ok := files[name]; !ok {
			return fmt.Errorf("%s reads %s: send its content in the request's files (the agent opens no file a caller names)", job.Op, name)
		}
	}
	for name := range files {
		if !slices.Contains(job.Files, name) {
			return fmt.Errorf("file %q was sent but is not a file argument of %s", name, job.Op)
		}
	}
	return nil
}

// Internal runs a request as the agent itself (uid 0) through the same path and the same
// queue as a caller's: the drift watcher's releases use it, so they never interleave with a
// caller's change. A non-zero exit is an error with the command's message.
func (s *Server) Internal(ctx context.Context, req ExecRequest) (ExecResult, error) {
	ctx = context.WithValue(ctx, peerKey{}, Peer{UID: 0, GID: 0, PID: int32(os.Getpid())})
	what := strings.TrimSpace(req.Command + " " + strings.Join(req.Operands, " "))
	o := s.execute(ctx, req, nil)
	if o.err != "" {
		return o.res, fmt.Errorf("%s: %s", what, o.err)
	}
	if o.res.ExitCode != 0 {
		return o.res, fmt.Errorf("%s: exit %d: %s", what, o.res.ExitCode, errorText(o.res.Stderr))
	}
	return o.res, nil
}

// opOutcome is what running a typed operation came to: the value its JSON output is (nil:
// none), its exit code and error text; or a refusal before it ran (status not 200, msg).
type opOutcome struct {
	value  any
	code   int
	errMsg string
	status int
	msg    string
}

// runOperation runs one typed operation for the caller in ctx: its class decided by the
// Operator on the operation's typed values, the permission check on that class, then the
// operation itself, on the worker for changes, as execute does for a command request; no
// command line is built or parsed on the way. progress, when set, receives its progress events
// as they happen (a streamed answer).
func (s *Server) runOperation(ctx context.Context, o Operator, op Operation, progress func(any)) opOutcome {
	peer, ok := PeerOf(ctx)
	if !ok {
		return opOutcome{status: http.StatusForbidden, msg: "no peer credentials on this connection"}
	}
	name, class := op.Op(), o.Class(op)
	info, _ := ctx.Value(reqInfoKey{}).(*reqInfo)
	if info == nil {
		info = &reqInfo{}
	}
	info.op = name
	if err := authorize(peer, class, s.GID, s.GroupName, s.ProcRoot); err != nil {
		s.log().Warn("refused", "op", name, "class", class.String(), "uid", peer.UID, "pid", peer.PID, "err", err)
		return opOutcome{status: http.StatusForbidden, msg: err.Error()}
	}
	env := RunEnv{Peer: peer, Progress: progress}
	if s.OpenConn != nil {
		env.Conn = s.sharedConn
	}
	var out opOutcome
	status, msg := s.schedule(ctx, name, peer, class == Read, func(ctx context.Context) int {
		ctx, cancel := context.WithTimeout(ctx, s.requestTimeout())
		defer cancel()
		start := time.Now()
		out = s.doOperation(ctx, o, op, env)
		d := time.Since(start)
		if s.Observe != nil {
			var oerr error
			if out.code != 0 {
				oerr = fmt.Errorf("exit %d: %s", out.code, out.errMsg)
			}
			s.Observe(name, d, oerr)
		}
		if class != Read {
			s.log().Info("operation", "op", name, "request", fmt.Sprintf("%+v", op),
				"uid", peer.UID, "pid", peer.PID, "duration_ms", ms(d), "exit_code", out.code)
		}
		return out.code
	})
	if status != http.StatusOK {
		return opOutcome{status: status, msg: msg}
	}
	info.exitCode = out.code
	out.status = http.StatusOK
	return out
}

// doOperation calls the Operator; a panic in the operation is a bug, answered as the CLI
// answers one (exit 1), never the agent's end.
func (s *Server) doOperation(ctx context.Context, o Operator, op Operation, env RunEnv) (out opOutcome) {
	defer func() {
		if r := recover(); r != nil {
			s.log().Error("internal error", "op", op.Op(), "panic", fmt.Sprint(r))
			out = opOutcome{code: 1, errMsg: fmt.Sprintf("internal error (a bug in vgpu-host, please report it; docs/security.md says how): %v", r)}
		}
	}()
	v, err := o.Do(ctx, op, env)
	out.value = v
	if err != nil {
		out.code = 1
		var ec interface{ ExitCode() int }
		if errors.As(err, &ec) {
			out.code = ec.ExitCode()
		}
		// The words the CLI prints after "vgpu-host: ", as errorText takes them from its stderr.
		out.errMsg = errorText("vgpu-host: " + err.Error() + "\n")
	}
	return out
}
