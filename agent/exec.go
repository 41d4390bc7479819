package agent

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
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
// classified on its typed values), the permission check on that class, the caller's files,
// then the Runner, on the worker for mutations. Every operation of the API goes through here.
func (s *Server) execute(ctx context.Context, req ExecRequest) outcome {
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
	tmp, paths, restore, err := materialize(job, req.Files)
	if err != nil {
		return outcome{status: http.StatusOK, res: ExecResult{Stderr: "vgpu-host: " + err.Error() + "\n", ExitCode: 2}}
	}
	env := RunEnv{Paths: paths, Peer: peer}
	if s.OpenConn != nil {
		env.Conn = s.sharedConn
	}
	run := func(ctx context.Context) ExecResult {
		ctx, cancel := context.WithTimeout(ctx, s.requestTimeout())
		defer cancel()
		start := time.Now()
		res := s.Runner.Run(ctx, job, env)
		d := time.Since(start)
		res.Stdout, res.Stderr = restore.Replace(res.Stdout), restore.Replace(res.Stderr)
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
	if job.Class == Read {
		defer os.RemoveAll(tmp)
		res := run(ctx)
		info.exitCode = res.ExitCode
		return outcome{status: http.StatusOK, res: res}
	}
	// A mutation runs on the worker, with a context detached from the request: a caller
	// that leaves does not stop it half-way. It waits for the operations before it.
	var res ExecResult
	t := &task{ctx: ctx, done: make(chan struct{})}
	t.run = func(wctx context.Context) {
		defer os.RemoveAll(tmp)
		res = run(wctx)
		if ctx.Err() != nil {
			s.log().Warn("the caller left before the operation ended; it ran to the end", "op", job.Op, "uid", peer.UID, "pid", peer.PID, "exit_code", res.ExitCode)
		}
	}
	t.skip = func() {
		os.RemoveAll(tmp)
		s.log().Warn("the caller left before the operation started; not run", "op", job.Op, "uid", peer.UID, "pid", peer.PID)
	}
	if !s.enqueue(t) {
		os.RemoveAll(tmp)
		return outcome{status: http.StatusServiceUnavailable, err: "the agent is stopping: run the command again when it is back, or with --agent never"}
	}
	select {
	case <-t.done:
		info.exitCode = res.ExitCode
		return outcome{status: http.StatusOK, res: res}
	case <-ctx.Done():
		return outcome{status: 499, err: "the caller left"}
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

// replacer maps the private copies of the caller's files back to the names the caller gave,
// so that messages name the caller's files.
type replacer [][2]string

// Replace rewrites every private path in s to the caller's name.
func (r replacer) Replace(s string) string {
	for _, p := range r {
		s = strings.ReplaceAll(s, p[0], p[1])
	}
	return s
}

// materialize writes the caller's files into a private directory and returns where each of
// the job's file arguments now is. Every file argument must come with its content: the agent
// opens no path a caller names, root's included (the CLI reads them as the caller).
func materialize(job Job, files map[string]string) (string, map[string]string, replacer, error) {
	if len(job.Files) == 0 {
		if len(files) > 0 {
			return "", nil, nil, fmt.Errorf("files were sent but %s reads none", job.Op)
		}
		return "", nil, nil, nil
	}
	tmp, err := os.MkdirTemp("", "vgpu-host-agent-")
	if err != nil {
		return "", nil, nil, fmt.Errorf("make a private directory for the request's files: %w", err)
	}
	var rep replacer
	paths := map[string]string{}
	for i, orig := range job.Files {
		if _, done := paths[orig]; done {
			continue
		}
		content, ok := files[orig]
		if !ok {
			os.RemoveAll(tmp)
			return "", nil, nil, fmt.Errorf("%s reads %s: send its content in the request's files (the agent opens no file a caller names)", job.Op, orig)
		}
		dir := filepath.Join(tmp, strconv.Itoa(i))
		base := filepath.Base(orig)
		if base == "/" || base == "." || base == ".." {
			base = "file"
		}
		p := filepath.Join(dir, base)
		if err := os.Mkdir(dir, 0o700); err == nil {
			err = os.WriteFile(p, []byte(content), 0o600)
		}
		if err != nil {
			os.RemoveAll(tmp)
			return "", nil, nil, fmt.Errorf("write the caller's %s to %s: %w", orig, p, err)
		}
		paths[orig] = p
		rep = append(rep, [2]string{p, orig})
	}
	for name := range files {
		if _, ok := paths[name]; !ok {
			os.RemoveAll(tmp)
			return "", nil, nil, fmt.Errorf("file %q was sent but is not a file argument of %s", name, job.Op)
		}
	}
	return tmp, paths, rep, nil
}

// Internal runs a request as the agent itself (uid 0) through the same path and the same
// queue as a caller's: the drift watcher's releases use it, so they never interleave with a
// caller's change. A non-zero exit is an error with the command's message.
func (s *Server) Internal(ctx context.Context, req ExecRequest) (ExecResult, error) {
	ctx = context.WithValue(ctx, peerKey{}, Peer{UID: 0, GID: 0, PID: int32(os.Getpid())})
	what := strings.TrimSpace(req.Command + " " + strings.Join(req.Operands, " "))
	o := s.execute(ctx, req)
	if o.err != "" {
		return o.res, fmt.Errorf("%s: %s", what, o.err)
	}
	if o.res.ExitCode != 0 {
		return o.res, fmt.Errorf("%s: exit %d: %s", what, o.res.ExitCode, errorText(o.res.Stderr))
	}
	return o.res, nil
}
