package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/internal/testenv"
)

// scriptRunner is a Runner whose commands are the test's: "read NAME", "change NAME",
// "slow NAME" (a change that waits for release), "file PATH" (a read of a file argument,
// printing its content). It records what ran and how many ran at once.
type scriptRunner struct {
	release chan struct{} // closed to let "slow" finish
	started chan string   // receives NAME when a command starts

	mu            sync.Mutex
	finished      []string
	running, maxR atomic.Int32
	runningChange atomic.Int32
	maxChange     atomic.Int32
	ctxErrs       []error
}

func (r *scriptRunner) Prepare(req ExecRequest) (Job, error) {
	if len(req.Operands) != 1 {
		return Job{}, fmt.Errorf("want VERB NAME, got %q %q", req.Command, req.Operands)
	}
	j := Job{Request: req, Op: req.Command}
	switch req.Command {
	case "read":
	case "change", "slow":
		j.Class = Mutation
	case "root":
		j.Class = RootMutation
	case "file":
		j.Files = []string{req.Operands[0]}
	default:
		return Job{}, fmt.Errorf("%s cannot run through the agent", req.Command)
	}
	return j, nil
}

func (r *scriptRunner) Run(ctx context.Context, j Job, env RunEnv) ExecResult {
	name := j.Request.Operands[0]
	if r.started != nil {
		r.started <- name
	}
	n := r.running.Add(1)
	defer r.running.Add(-1)
	for m := r.maxR.Load(); n > m && !r.maxR.CompareAndSwap(m, n); m = r.maxR.Load() {
	}
	if j.Class != Read {
		c := r.runningChange.Add(1)
		defer r.runningChange.Add(-1)
		for m := r.maxChange.Load(); c > m && !r.maxChange.CompareAndSwap(m, c); m = r.maxChange.Load() {
		}
	}
	out := ""
	switch j.Request.Command {
	case "slow":
		<-r.release
	case "read", "change":
		time.Sleep(20 * time.Millisecond)
	case "file":
		b, ok := j.Request.Files[name]
		if !ok {
			return ExecResult{Stderr: "vgpu-host: " + name + " was not sent\n", ExitCode: 1}
		}
		out = b
	}
	r.mu.Lock()
	r.finished = append(r.finished, name)
	r.ctxErrs = append(r.ctxErrs, ctx.Err())
	r.mu.Unlock()
	return ExecResult{Stdout: out + name + " done\n"}
}

// serve starts a Server on a socket in a new directory and returns it with its stop function
// (which returns Serve's error).
func serve(t *testing.T, r Runner, mod func(*Server)) (*Server, func() error) {
	t.Helper()
	dir, err := os.MkdirTemp("", "agent-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	root, _ := host.NewRoot(dir)
	procRoot, _ := host.NewRoot("/")
	s := &Server{Root: root, Socket: filepath.Join(dir, "run", "agent.sock"), GID: -1, ProcRoot: procRoot, Runner: r,
		Log: discardLogger(), ShutdownTimeout: 10 * time.Second}
	if mod != nil {
		mod(s)
	}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	var once sync.Once
	var serr error
	stop := func() error {
		once.Do(func() { cancel(); serr = <-done })
		return serr
	}
	t.Cleanup(func() { stop() })
	return s, stop
}

// socketHTTP is net/http's client on the agent's socket, for the answers the tests read raw.
func socketHTTP(socket string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
		DisableKeepAlives: true,
	}}
}

// cmdReq is the request for a scriptRunner command: VERB NAME.
func cmdReq(args ...string) ExecRequest {
	return ExecRequest{Command: args[0], Operands: args[1:]}
}

func discardLogger() *slog.Logger { l, _ := NewLogger(io.Discard, "debug", false); return l }

func execArgs(t *testing.T, s *Server, args ...string) ExecResult {
	t.Helper()
	res, err := Client{Socket: s.Socket}.Exec(context.Background(), cmdReq(args...))
	if err != nil {
		t.Fatalf("exec %v: %v", args, err)
	}
	return res
}

// TestMutationsOneAtATimeReadsTogether: 8 changes and 8 reads sent at once: no two changes
// ever run together, reads do overlap, and every one ran.
func TestMutationsOneAtATimeReadsTogether(t *testing.T) {
	r := &scriptRunner{}
	s, _ := serve(t, r, nil)
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			verb := "change"
			if i%2 == 1 {
				verb = "read"
			}
			if res := execArgs(t, s, verb, fmt.Sprint(i)); res.ExitCode != 0 {
				t.Errorf("%s %d: %+v", verb, i, res)
			}
		}()
	}
	wg.Wait()
	if len(r.finished) != 16 {
		t.Fatalf("%d ran, want 16", len(r.finished))
	}
	if m := r.maxChange.Load(); m != 1 {
		t.Errorf("%d changes ran at once, want 1", m)
	}
	if m := r.maxR.Load(); m < 2 {
		t.Errorf("at most %d commands ran at once: reads did not overlap", m)
	}
}

// TestShutdownFinishesTheOperation: SIGTERM (the context ending) while a change runs: the
// agent stops accepting, the change runs to its end and its caller gets the answer, then the
// socket is gone and Serve returns nil.
func TestShutdownFinishesTheOperation(t *testing.T) {
	r := &scriptRunner{release: make(chan struct{}), started: make(chan string, 1)}
	s, stop := serve(t, r, nil)
	resc := make(chan ExecResult, 1)
	go func() { resc <- execArgs(t, s, "slow", "op1") }()
	<-r.started
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	// New connections are refused once it is stopping.
	deadline := time.Now().Add(5 * time.Second)
	for (Client{Socket: s.Socket}).Dial() == nil {
		if time.Now().After(deadline) {
			t.Fatal("the agent still accepts connections while stopping")
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case err := <-stopped:
		t.Fatalf("Serve returned (%v) with the operation in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(r.release)
	if res := <-resc; res.ExitCode != 0 || res.Stdout != "op1 done\n" {
		t.Errorf("the caller got %+v", res)
	}
	if err := <-stopped; err != nil {
		t.Errorf("Serve: %v", err)
	}
	if _, err := os.Lstat(s.Socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left behind: %v", err)
	}
	if r.ctxErrs[0] != nil {
		t.Errorf("the operation's context ended: %v", r.ctxErrs[0])
	}
}

// TestCallerLeavingDoesNotStopAChange: the caller of a change disconnects while it runs; it
// runs to its end with a live context. A change still queued when its caller leaves is not run.
func TestCallerLeavingDoesNotStopAChange(t *testing.T) {
	r := &scriptRunner{release: make(chan struct{}), started: make(chan string, 4)}
	s, _ := serve(t, r, nil)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 2)
	go func() {
		_, err := Client{Socket: s.Socket}.Exec(ctx, cmdReq("slow", "running"))
		errc <- err
	}()
	<-r.started
	go func() {
		_, err := Client{Socket: s.Socket}.Exec(ctx, cmdReq("change", "queued"))
		errc <- err
	}()
	time.Sleep(100 * time.Millisecond) // "queued" waits behind "running"
	cancel()
	for range 2 {
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Errorf("the callers' requests: %v, want canceled", err)
		}
	}
	// The server notices a closed connection by reading from it in the background: give it
	// that moment before "running" ends and the worker looks at "queued".
	time.Sleep(200 * time.Millisecond)
	close(r.release)
	// The next change runs after "running" ended, and "queued" never ran.
	if res := execArgs(t, s, "change", "after"); res.ExitCode != 0 {
		t.Fatalf("after: %+v", res)
	}
	<-r.started // "after"
	r.mu.Lock()
	defer r.mu.Unlock()
	if strings.Join(r.finished, ",") != "running,after" {
		t.Errorf("ran %v, want running then after (queued skipped)", r.finished)
	}
	if r.ctxErrs[0] != nil {
		t.Errorf("the running change's context ended when its caller left: %v", r.ctxErrs[0])
	}
}

// TestBodyLimit: a body over MaxBody is refused with 413 and a JSON error.
func TestBodyLimit(t *testing.T) {
	s, _ := serve(t, &scriptRunner{}, func(s *Server) { s.MaxBody = 1024 })
	_, err := Client{Socket: s.Socket}.Exec(context.Background(), cmdReq("read", strings.Repeat("x", 2000)))
	var se *StatusError
	if !errors.As(err, &se) || se.Status != http.StatusRequestEntityTooLarge || !strings.Contains(se.Body.Error, "1024") {
		t.Fatalf("over the limit: %v", err)
	}
	if res := execArgs(t, s, "read", "small"); res.ExitCode != 0 {
		t.Fatalf("under the limit: %+v", res)
	}
}

// TestStaleSocketReplacedLiveOneRefused: a socket file nobody answers on (an agent killed
// with -9) is replaced; a socket another agent answers on is refused (busy, naming its pid);
// a file that is not a socket is refused and left alone.
func TestStaleSocketReplacedLiveOneRefused(t *testing.T) {
	s, _ := serve(t, &scriptRunner{}, nil)
	second := &Server{Socket: s.Socket, GID: -1, Log: discardLogger()}
	err := second.Listen()
	if !errors.Is(err, host.ErrBusy) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Fatalf("second agent on a live socket: %v", err)
	}

	dir := t.TempDir()
	stale := filepath.Join(dir, "agent.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close() // the file stays, nobody listens: as after kill -9
	third := &Server{Socket: stale, GID: -1, Log: discardLogger()}
	if err := third.Listen(); err != nil {
		t.Fatalf("stale socket: %v", err)
	}
	third.ln.Close()
	st, err := os.Stat(stale)
	if err != nil || st.Mode().Perm() != DefaultSocketMode || st.Mode()&os.ModeSocket == 0 {
		t.Fatalf("new socket: %v %v", st.Mode(), err)
	}

	plain := filepath.Join(dir, "plain")
	os.WriteFile(plain, []byte("keep"), 0o644)
	if err := (&Server{Socket: plain, GID: -1, Log: discardLogger()}).Listen(); !errors.Is(err, host.ErrInvalid) {
		t.Fatalf("a regular file at the socket path: %v", err)
	}
	if b, _ := os.ReadFile(plain); string(b) != "keep" {
		t.Fatal("the regular file was touched")
	}
}

// TestAuthorize: reads are open; changes need uid 0 or the group (primary, or supplementary
// as /proc/PID/status lists it); root-only changes need uid 0.
func TestAuthorize(t *testing.T) {
	dir := t.TempDir()
	root, _ := host.NewRoot(dir)
	os.MkdirAll(filepath.Join(dir, "proc", "77"), 0o755)
	os.WriteFile(filepath.Join(dir, "proc", "77", "status"), []byte("Gid:\t100\t100\t100\t100\nGroups:\t100 998\n"), 0o644)
	for _, c := range []struct {
		p     Peer
		class Class
		ok    bool
	}{
		{Peer{UID: 1000, GID: 100, PID: 77}, Read, true},
		{Peer{UID: 0, GID: 0, PID: 1}, Mutation, true},
		{Peer{UID: 0, GID: 0, PID: 1}, RootMutation, true},
		{Peer{UID: 1000, GID: 998, PID: 99}, Mutation, true},  // primary group
		{Peer{UID: 1000, GID: 100, PID: 77}, Mutation, true},  // supplementary group
		{Peer{UID: 1000, GID: 100, PID: 78}, Mutation, false}, // no such process: not a member
		{Peer{UID: 1000, GID: 998, PID: 77}, RootMutation, false},
	} {
		err := authorize(c.p, c.class, 998, "vgpu-host", root)
		if (err == nil) != c.ok {
			t.Errorf("%+v %s: %v, want ok=%v", c.p, c.class, err, c.ok)
		}
		if err != nil && (!errors.Is(err, ErrPermission) || !strings.Contains(err.Error(), fmt.Sprintf("uid %d", c.p.UID))) {
			t.Errorf("%+v: the refusal does not name the uid: %v", c.p, err)
		}
	}
	if err := authorize(Peer{UID: 1000, GID: 998, PID: 77}, Mutation, -1, "", root); err == nil || !strings.Contains(err.Error(), "needs root") {
		t.Errorf("no group: %v", err)
	}
}

// envClient makes the test binary, run as another user, a client of the socket in it.
const envClient = "VGPU_HOST_AGENT_TEST_CLIENT"

// TestMain lets the test binary act as a non-root client for TestNonRootPeer.
func TestMain(m *testing.M) {
	if sock := os.Getenv(envClient); sock != "" {
		os.Exit(clientMain(sock))
	}
	os.Exit(m.Run())
}

// clientMain sends the requests of TestNonRootPeer and prints one JSON line per answer.
func clientMain(sock string) int {
	c := Client{Socket: sock}
	enc := json.NewEncoder(os.Stdout)
	for _, req := range []ExecRequest{
		cmdReq("read", "r"),
		cmdReq("change", "c"),
		cmdReq("file", os.Getenv("SECRET")),
		{Command: "file", Operands: []string{"mine.yaml"}, Files: map[string]string{"mine.yaml": "uploaded "}},
	} {
		res, err := c.Exec(context.Background(), req)
		var se *StatusError
		status := 200
		if errors.As(err, &se) {
			status = se.Status
			res.Stderr = se.Body.Error
		} else if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		enc.Encode(map[string]any{"status": status, "exit": res.ExitCode, "stdout": res.Stdout, "stderr": res.Stderr})
	}
	return 0
}

// runClientAs runs the test binary as a client of s with the given credentials and returns
// its answers (see clientMain).
func runClientAs(t *testing.T, s *Server, cred *syscall.Credential) []map[string]any {
	t.Helper()
	dir := filepath.Dir(filepath.Dir(s.Socket))
	os.Chmod(dir, 0o755)
	os.Chmod(filepath.Dir(s.Socket), 0o755)
	secret := filepath.Join(dir, "secret.yaml")
	os.WriteFile(secret, []byte("root only"), 0o600)
	// The test binary, where the other user may run it.
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "client.test")
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Dir = dir
	cmd.Env = []string{envClient + "=" + s.Socket, "SECRET=" + secret}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("client as uid %d: %v\n%s", cred.Uid, err, out)
	}
	var got []map[string]any
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			t.Fatal(err)
		}
		got = append(got, m)
	}
	if len(got) != 4 {
		t.Fatalf("answers: %s", out)
	}
	return got
}

// TestNonRootPeer: a real client process running as nobody (uid 65534), its credentials
// taken from the socket by the kernel: it may read, is refused a change with 403 naming its
// uid, cannot make the agent read a root-only file for it, and can send a file's content.
func TestNonRootPeer(t *testing.T) {
	testenv.RequireRoot(t)
	r := &scriptRunner{}
	s, _ := serve(t, r, func(s *Server) { s.SocketMode = 0o666 })
	got := runClientAs(t, s, &syscall.Credential{Uid: 65534, Gid: 65534})
	if got[0]["status"] != 200.0 || got[0]["exit"] != 0.0 {
		t.Errorf("read as nobody: %v", got[0])
	}
	if got[1]["status"] != 403.0 || !strings.Contains(got[1]["stderr"].(string), "uid 65534") {
		t.Errorf("change as nobody: %v", got[1])
	}
	if got[2]["exit"] != 2.0 || strings.Contains(got[2]["stdout"].(string), "root only") || !strings.Contains(got[2]["stderr"].(string), "send its content") {
		t.Errorf("a root-only file named by nobody: %v", got[2])
	}
	if got[3]["exit"] != 0.0 || got[3]["stdout"] != "uploaded mine.yaml done\n" {
		t.Errorf("an uploaded file: %v", got[3])
	}
	for _, f := range r.finished {
		if f == "c" {
			t.Error("the refused change ran")
		}
	}
}

// TestGroupMemberPeer: the socket belongs to the agent's group (nogroup, gid 65534, mode
// 0660); a client whose primary group is another but who has the group among its
// supplementary groups (read from its /proc/PID/status) may connect and change the host.
func TestGroupMemberPeer(t *testing.T) {
	testenv.RequireRoot(t)
	r := &scriptRunner{}
	s, _ := serve(t, r, func(s *Server) { s.GID, s.GroupName = 65534, "nogroup" })
	st, err := os.Stat(s.Socket)
	if err != nil {
		t.Fatal(err)
	}
	if sys := st.Sys().(*syscall.Stat_t); sys.Gid != 65534 || sys.Uid != 0 || st.Mode().Perm() != 0o660 {
		t.Fatalf("socket owner %d:%d mode %v, want 0:65534 0660", sys.Uid, sys.Gid, st.Mode().Perm())
	}
	got := runClientAs(t, s, &syscall.Credential{Uid: 65534, Gid: 1, Groups: []uint32{65534}})
	if got[1]["status"] != 200.0 || got[1]["exit"] != 0.0 {
		t.Errorf("change by a member of the group: %v", got[1])
	}
	if len(r.finished) == 0 || !strings.Contains(strings.Join(r.finished, ","), "c") {
		t.Errorf("the change did not run: %v", r.finished)
	}
}

// TestHooks: Ready runs before the first change (reads are served meanwhile, /v1/health
// says why it is not ready, then its error); Observe sees every operation; Metrics is
// served at /metrics.
func TestHooks(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var observed []string
	r := &scriptRunner{}
	s, _ := serve(t, r, func(s *Server) {
		s.Ready = func(context.Context) error { <-release; return errors.New("reconcile: mdev 1234 failed") }
		s.Observe = func(op string, _ time.Duration, err error) {
			mu.Lock()
			defer mu.Unlock()
			observed = append(observed, fmt.Sprintf("%s:%v", op, err != nil))
		}
		s.Metrics = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "vgpuhost_up 1\n") })
	})
	c := Client{Socket: s.Socket}
	var h healthInfo
	err := c.Do(context.Background(), "GET", "/v1/health", nil, &h)
	var se *StatusError
	if !errors.As(err, &se) || se.Status != http.StatusServiceUnavailable {
		t.Fatalf("health while starting: %v", err)
	}
	if res := execArgs(t, s, "read", "r1"); res.ExitCode != 0 {
		t.Fatalf("a read while starting: %+v", res)
	}
	changed := make(chan ExecResult, 1)
	go func() { changed <- execArgs(t, s, "change", "c1") }()
	select {
	case res := <-changed:
		t.Fatalf("a change ran before Ready returned: %+v", res)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if res := <-changed; res.ExitCode != 0 {
		t.Fatalf("the change after Ready: %+v", res)
	}
	hreq, _ := http.NewRequest("GET", "http://agent/v1/health", nil)
	hresp, err := socketHTTP(c.Socket).Do(hreq)
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(hresp.Body).Decode(&h)
	hresp.Body.Close()
	if hresp.StatusCode != http.StatusServiceUnavailable || h.Ready || h.Reason != "reconcile: mdev 1234 failed" {
		t.Fatalf("health after a failed Ready: %d %+v", hresp.StatusCode, h)
	}
	req, _ := http.NewRequest("GET", "http://agent/metrics", nil)
	resp, err := socketHTTP(c.Socket).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "vgpuhost_up 1\n" {
		t.Errorf("/metrics: %q", b)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(observed, ",") != "read:false,change:false" {
		t.Errorf("observed %v", observed)
	}
}

// TestErrorTextKeepsReasons: a refusal's error keeps the lines that say why and the fix (the
// typed endpoints answered only its first line, "refused by a safety check ...:", before).
func TestErrorTextKeepsReasons(t *testing.T) {
	stderr := "progress: bind 0000:00:02.0\nvgpu-host: bind: refused by a safety check:\n  - [boot-vga] 0000:00:02.0: is the boot VGA\n  (re-run with --force)\n"
	want := "bind: refused by a safety check:\n  - [boot-vga] 0000:00:02.0: is the boot VGA\n  (re-run with --force)"
	if got := errorText(stderr); got != want {
		t.Fatalf("errorText = %q, want %q", got, want)
	}
	if got := errorText("vgpu-host: not found\n"); got != "not found" {
		t.Fatalf("errorText = %q", got)
	}
}
