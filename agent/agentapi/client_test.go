package agentapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// serveHTTP serves h with net/http's server (what the agent runs) on a unix socket.
func serveHTTP(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return sock
}

// TestClientAgainstNetHTTP: the client's HTTP/1.1 against net/http's server: a body that
// outgrows the server's buffer comes chunked, a small one with its length, a refusal is a
// *StatusError with the agent's JSON, a request body arrives whole with its length, an early
// 413 on a body larger than the socket's buffers is still read, and a caller that leaves
// closes the connection.
func TestClientAgainstNetHTTP(t *testing.T) {
	big := strings.Repeat("0123456789abcdef", 64<<10) // 1 MiB: chunked
	left := make(chan struct{})
	sock := serveHTTP(t, func(w http.ResponseWriter, r *http.Request) {
		var req ExecRequest
		switch r.URL.Path {
		case "/v1/exec":
			if r.ContentLength < 0 || r.Header.Get("Content-Type") != "application/json" {
				http.Error(w, "no length", 400)
				return
			}
			if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
				http.Error(w, err.Error(), 400)
				return
			}
			out := req.Command
			if out == "big" {
				out = big
			}
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(ExecResult{Stdout: out, Stderr: req.Files["f"], ExitCode: 3})
		case "/v1/refuse":
			w.WriteHeader(403)
			io.WriteString(w, `{"error":"uid 1000 may not","exit_code":4}`)
		case "/v1/limit":
			w.Header().Set("Connection", "close")
			w.WriteHeader(413)
			io.WriteString(w, `{"error":"over 1024 bytes","exit_code":2}`)
		case "/v1/slow":
			<-r.Context().Done() // the client closed the connection
			close(left)
		}
	})
	c := Client{Socket: sock}
	ctx := context.Background()
	for _, arg := range []string{"small", "big"} {
		res, err := c.Exec(ctx, ExecRequest{Command: arg, Files: map[string]string{"f": "naïve\n"}})
		want := arg
		if arg == "big" {
			want = big
		}
		if err != nil || res.Stdout != want || res.Stderr != "naïve\n" || res.ExitCode != 3 {
			t.Fatalf("%s: %d bytes, %q, %d, %v", arg, len(res.Stdout), res.Stderr, res.ExitCode, err)
		}
	}
	var se *StatusError
	if err := c.Do(ctx, "GET", "/v1/refuse", nil, nil); !errors.As(err, &se) || se.Status != 403 || se.Body.Error != "uid 1000 may not" || se.Body.ExitCode != 4 {
		t.Errorf("refusal: %v", err)
	}
	if err := c.Do(ctx, "POST", "/v1/limit", []byte(strings.Repeat("x", 8<<20)), nil); !errors.As(err, &se) || se.Status != 413 || se.Body.Error != "over 1024 bytes" {
		t.Errorf("early 413: %v", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := c.Do(cctx, "GET", "/v1/slow", nil, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("caller leaving: %v", err)
	}
	select {
	case <-left:
	case <-time.After(5 * time.Second):
		t.Error("the server did not see the caller leave")
	}
	if err := (Client{Socket: sock + ".none"}).Do(ctx, "GET", "/v1/version", nil, nil); !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), sock+".none") {
		t.Errorf("no agent: %v", err)
	}
}
