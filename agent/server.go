package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vgpu-host/vgpu-host/agent/agentapi"
	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/internal/buildinfo"
	"github.com/vgpu-host/vgpu-host/virt"
)

// DefaultSocketMode is the socket's mode unless Server.SocketMode says otherwise (the other
// defaults of the Server's limits are agentapi's, but for those of connections below).
const DefaultSocketMode = 0o660

// Limits on connections (docs/agent.md, Limits), which keep one local user from exhausting
// the agent's file descriptors and memory with connections that send nothing, or a body a
// byte at a time. Root's connections are never counted nor refused: root can always reach
// /v1/health.
const (
	// DefaultMaxConnsPerUID bounds the open connections of one non-root uid.
	DefaultMaxConnsPerUID = 32
	// DefaultMaxConns bounds the open connections of all non-root uids together.
	DefaultMaxConns = 256
	// DefaultBodyTimeout bounds the reading of a request's body, from the end of its headers
	// (read within HeaderTimeout).
	DefaultBodyTimeout = 30 * time.Second
	// HeaderTimeout bounds the reading of a request's headers.
	HeaderTimeout = 10 * time.Second
	// IdleTimeout closes a connection that sends no new request for this long.
	IdleTimeout = time.Minute
	// MaxHeaderBytes bounds a request's headers.
	MaxHeaderBytes = 64 << 10
)

// Server is the agent: it owns the socket, checks every caller, queues mutations and runs
// every operation through its Runner. Set the fields, then call Listen and Serve.
type Server struct {
	// Root is the host root the agent serves (for /v1/version and logs).
	Root host.Root
	// Socket is the absolute path of the unix socket.
	Socket string
	// SocketMode is the socket's permission bits (DefaultSocketMode when 0).
	SocketMode os.FileMode
	// GID is the group that owns the socket and whose members may change the host; -1 for
	// none (root only). GroupName names it in messages.
	GID       int
	GroupName string
	// ProcRoot is where the peers' /proc is read (the real root when zero): peers are
	// processes of this machine even when Root is a fake tree.
	ProcRoot host.Root
	// Runner runs the command tree.
	Runner Runner
	// Log receives one line per request and per host change (slog.Default when nil).
	Log *slog.Logger
	// MaxBody bounds a request body (DefaultMaxBody when 0); larger bodies get 413.
	MaxBody int64
	// RequestTimeout bounds one operation, from the time it starts (DefaultRequestTimeout when 0).
	RequestTimeout time.Duration
	// ShutdownTimeout bounds how long a stopping agent waits for the operation in flight
	// (DefaultShutdownTimeout when 0).
	ShutdownTimeout time.Duration
	// BodyTimeout bounds the reading of a request's body (DefaultBodyTimeout when 0).
	BodyTimeout time.Duration
	// MaxConnsPerUID and MaxConns bound the open connections of one non-root uid and of all
	// non-root uids together (DefaultMaxConnsPerUID, DefaultMaxConns when 0); a connection
	// over either is answered 503 and closed at once.
	MaxConnsPerUID, MaxConns int

	// URI is the libvirt URI the agent's commands use.
	URI string
	// OpenConn, when set, opens the one libvirt connection the agent holds for its life
	// (lazily, on the first operation that needs it; retried after a failure). Commands
	// get it instead of opening their own.
	OpenConn func(uri string) (virt.Conn, error)
	// Observe, when set, is called after every operation with its name, duration and
	// error (nil when it exited 0).
	Observe func(op string, d time.Duration, err error)
	// Metrics, when set, is served at /metrics.
	Metrics http.Handler
	// Ready, when set, runs once before the first mutation (boot reconcile); until it
	// returns /v1/health says not ready, and after, its error.
	Ready func(ctx context.Context) error
	// Drifts, when set, lists the disagreements between the ledger and libvirt the agent's
	// watcher sees now (GET /v1/drift, and a count in /v1/health).
	Drifts func() []any
	// Libvirt, when set, says whether libvirt is reachable ("connected", "unreachable since
	// …: why"), shown in /v1/health. It does not decide readiness: on a KubeVirt node or a
	// container host there is no libvirt to reach, and the agent's work there (MIG, VFs,
	// vfio, mdevs) does not need it (docs/agent.md).
	Libvirt func() string

	ln      *net.UnixListener
	conns   *capListener
	http    *http.Server
	started time.Time

	qmu    sync.Mutex
	queue  chan *task
	closed bool
	worker sync.WaitGroup

	stateMu  sync.Mutex
	ready    bool
	readyErr error

	connMu sync.Mutex
	conn   virt.Conn
}

// task is one mutation waiting for, or running on, the worker.
type task struct {
	run  func(ctx context.Context)
	ctx  context.Context // the request's: a task whose caller left before it started is skipped
	done chan struct{}
	skip func()
}

func (s *Server) log() *slog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return slog.Default()
}

// Listen creates the socket. A socket file nobody answers on is stale (left by a killed
// agent) and is replaced; one another agent answers on is not touched, and the error (wrapping
// host.ErrBusy) names that agent's pid. Anything else at the path is refused.
//
// The socket's directory is created if need be, never through a link out of the host root
// (ROOT/run -> /elsewhere), and must be trusted (agentapi.CheckSocketDirTrusted: root's or
// the agent's own, not writable by group or others, nor any directory above it): otherwise
// whoever controls it could swap in a socket of their own and receive the callers' commands.
// Both refusals wrap host.ErrRefused.
func (s *Server) Listen() error {
	if !filepath.IsAbs(s.Socket) {
		return fmt.Errorf("agent socket %q: want an absolute path: %w", s.Socket, host.ErrInvalid)
	}
	dir := filepath.Dir(s.Socket)
	if err := s.checkInRoot(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create the agent socket's directory %s: %w", dir, err)
	}
	if err := s.checkInRoot(dir); err != nil {
		return err
	}
	if err := agentapi.CheckSocketDirTrusted(dir, s.trustedUIDs()...); err != nil {
		return refused{fmt.Errorf("refuse to serve: %w", err)}
	}
	if err := s.removeStale(); err != nil {
		return err
	}
	// Bind under a temporary name, set mode and owner, then rename into place: the socket is
	// never reachable with looser permissions than asked.
	tmp := filepath.Join(dir, fmt.Sprintf(".%s.%d.tmp", filepath.Base(s.Socket), os.Getpid()))
	os.Remove(tmp)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return fmt.Errorf("listen on %s: %w", tmp, err)
	}
	ln.SetUnlinkOnClose(false)
	fail := func(err error) error {
		ln.Close()
		os.Remove(tmp)
		return err
	}
	mode := s.SocketMode
	if mode == 0 {
		mode = DefaultSocketMode
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return fail(fmt.Errorf("set the mode of %s: %w", tmp, err))
	}
	if s.GID >= 0 {
		if err := os.Chown(tmp, 0, s.GID); err != nil {
			return fail(fmt.Errorf("give %s to root and group %s (gid %d): %w", tmp, s.GroupName, s.GID, err))
		}
	}
	if err := os.Rename(tmp, s.Socket); err != nil {
		return fail(fmt.Errorf("move the agent socket into place at %s: %w", s.Socket, err))
	}
	s.ln = ln
	return nil
}

// checkInRoot refuses a socket directory under the host root that symlinks lead out of it:
// a fake tree's run -> /run would otherwise have the agent create and serve a socket on the
// real host (host.Root.CheckInside). A socket named outside the root (--socket) is the
// operator's choice, and only checked for trust.
func (s *Server) checkInRoot(dir string) error {
	if s.Root.IsReal() {
		return nil
	}
	rel, err := filepath.Rel(s.Root.Dir(), dir)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return nil
	}
	if err := s.Root.CheckInside(dir); err != nil {
		return fmt.Errorf("agent socket %s: %w", s.Socket, err)
	}
	return nil
}

// trustedUIDs may own the socket's directory: root, and the agent's own uid.
func (s *Server) trustedUIDs() []uint32 { return []uint32{0, uint32(os.Geteuid())} }

// refused is a refusal by a safety check (exit 4) whose text is its own.
type refused struct{ error }

func (e refused) Unwrap() error        { return e.error }
func (e refused) Is(target error) bool { return target == host.ErrRefused }

// Close removes the socket Listen created, for an agent that stops before Serve (Serve
// removes it itself).
func (s *Server) Close() error {
	if s.ln == nil {
		return nil
	}
	err := s.ln.Close()
	s.ln = nil
	if rerr := os.Remove(s.Socket); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		return fmt.Errorf("remove the agent socket %s: %w", s.Socket, rerr)
	}
	return err
}

// removeStale removes a socket left by an agent that is gone.
func (s *Server) removeStale() error {
	st, err := os.Lstat(s.Socket)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("agent socket %s: %w", s.Socket, err)
	}
	if st.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("agent socket %s: a %s is there, not a socket: remove it or choose another --socket: %w", s.Socket, st.Mode().Type(), host.ErrInvalid)
	}
	c, err := net.DialTimeout("unix", s.Socket, time.Second)
	if err == nil {
		who := "another agent"
		if p, perr := peerCred(c); perr == nil {
			who = fmt.Sprintf("another agent (pid %d)", p.PID)
		}
		c.Close()
		return fmt.Errorf("agent socket %s: %s answers on it: stop it first, or choose another --socket: %w", s.Socket, who, host.ErrBusy)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("agent socket %s: cannot tell whether an agent answers on it: %w", s.Socket, err)
	}
	if err := os.Remove(s.Socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove the stale agent socket %s: %w", s.Socket, err)
	}
	s.log().Info("removed a stale socket (no agent answered on it)", "socket", s.Socket)
	return nil
}

// Handler returns the API's HTTP handler (without the socket: tests may serve it elsewhere,
// but the permission checks need a peer in the request context).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	s.routes(mux)
	return s.logRequests(mux)
}

// Serve serves the API on the socket Listen created until ctx ends (SIGTERM), then stops
// accepting, lets the operation in flight and those queued finish (bounded by
// ShutdownTimeout), removes the socket and returns nil.
func (s *Server) Serve(ctx context.Context) error {
	if s.ln == nil {
		return errors.New("agent: Serve before Listen")
	}
	s.started = time.Now()
	s.queue = make(chan *task, 1024)
	perUID, total := s.connCaps()
	s.conns = newCapListener(s.ln, perUID, total, s.log())
	s.http = &http.Server{
		Handler:           s.boundBodies(s.Handler()),
		ReadHeaderTimeout: HeaderTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			p := unknownPeer
			if pc, ok := c.(*peerConn); ok {
				p = pc.peer
			}
			return context.WithValue(ctx, peerKey{}, p)
		},
		ErrorLog: slog.NewLogLogger(s.log().Handler(), slog.LevelWarn),
	}
	if s.Ready == nil {
		s.setReady(nil)
	}
	s.worker.Add(1)
	go s.work(ctx)
	errc := make(chan error, 1)
	go func() { errc <- s.http.Serve(s.conns) }()
	s.log().Info("agent serving", "socket", s.Socket, "root", s.Root.Dir(), "group", s.GroupName, "version", buildinfo.Version())

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	s.log().Info("agent stopping: no new connections; waiting for the operations in flight", "timeout", s.shutdownTimeout().String())
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.shutdownTimeout())
	defer cancel()
	if err := s.http.Shutdown(sctx); err != nil {
		s.log().Warn("agent stopping: connections still open after the timeout", "err", err)
	}
	s.qmu.Lock()
	s.closed = true
	close(s.queue)
	s.qmu.Unlock()
	wdone := make(chan struct{})
	go func() { s.worker.Wait(); close(wdone) }()
	select {
	case <-wdone:
	case <-sctx.Done():
		s.log().Error("agent stopping: an operation is still running after the timeout; exiting anyway (the next start converges it from the journal)")
	}
	if err := os.Remove(s.Socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.log().Warn("remove the agent socket", "socket", s.Socket, "err", err)
	}
	s.connMu.Lock()
	if s.conn != nil {
		s.conn.Close()
		s.conn = nil
	}
	s.connMu.Unlock()
	s.log().Info("agent stopped")
	if errors.Is(serveErr, http.ErrServerClosed) {
		serveErr = nil
	}
	return serveErr
}

func (s *Server) shutdownTimeout() time.Duration {
	if s.ShutdownTimeout > 0 {
		return s.ShutdownTimeout
	}
	return DefaultShutdownTimeout
}

func (s *Server) requestTimeout() time.Duration {
	if s.RequestTimeout > 0 {
		return s.RequestTimeout
	}
	return DefaultRequestTimeout
}

func (s *Server) maxBody() int64 {
	if s.MaxBody > 0 {
		return s.MaxBody
	}
	return DefaultMaxBody
}

// work is the one worker: it runs Ready, then every mutation in arrival order.
func (s *Server) work(ctx context.Context) {
	defer s.worker.Done()
	if s.Ready != nil {
		start := time.Now()
		err := s.Ready(context.WithoutCancel(ctx))
		s.log().Info("ready check done", "duration_ms", ms(time.Since(start)), "err", err)
		s.setReady(err)
	}
	for t := range s.queue {
		if t.ctx.Err() != nil {
			t.skip()
			close(t.done)
			continue
		}
		t.run(context.WithoutCancel(t.ctx))
		close(t.done)
	}
}

func (s *Server) setReady(err error) {
	s.stateMu.Lock()
	s.ready, s.readyErr = true, err
	s.stateMu.Unlock()
}

// enqueue hands t to the worker; false when the agent is stopping.
func (s *Server) enqueue(t *task) bool {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	if s.closed {
		return false
	}
	s.queue <- t
	return true
}

// sharedConn returns the agent's libvirt connection, opening it on first use.
func (s *Server) sharedConn() (virt.Conn, error) {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	if s.conn != nil {
		return s.conn, nil
	}
	c, err := s.OpenConn(s.URI)
	if err != nil {
		return nil, err
	}
	s.conn = c
	return c, nil
}

// statusWriter remembers the status code a handler wrote, for the request log.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

// reqInfo is what execute learns about a request, for its log line.
type reqInfo struct {
	op       string
	exitCode int
}

type reqInfoKey struct{}

// logRequests logs one line per request: method, path, caller, the operation and its exit
// code (when it ran one), status, duration.
func (s *Server) logRequests(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		info := &reqInfo{exitCode: -1}
		h.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), reqInfoKey{}, info)))
		p, _ := PeerOf(r.Context())
		attrs := []any{"method", r.Method, "path", r.URL.Path, "uid", p.UID, "pid", p.PID}
		if info.op != "" {
			attrs = append(attrs, "op", info.op, "exit_code", info.exitCode)
		}
		s.log().Info("request", append(attrs, "status", sw.code, "duration_ms", ms(time.Since(start)))...)
	})
}

// writeJSON answers with v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// writeError answers with an ErrorBody.
func writeError(w http.ResponseWriter, status, exitCode int, format string, a ...any) {
	writeJSON(w, status, ErrorBody{Error: fmt.Sprintf(format, a...), ExitCode: exitCode})
}

// errorText is the error of a command's stderr without vgpu-host's prefix: its last
// "vgpu-host: " line and the indented lines that go on from it (the refusals a safety check
// lists, the fix), as the CLI words them.
func errorText(stderr string) string {
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if msg, ok := strings.CutPrefix(lines[i], "vgpu-host: "); ok {
			return strings.Join(append([]string{msg}, lines[i+1:]...), "\n")
		}
	}
	return strings.TrimSpace(stderr)
}

// ms is d in milliseconds, for logs.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// Unwrap lets http.ResponseController reach the connection's writer (a streamed answer
// flushes each line).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
