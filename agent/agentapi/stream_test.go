package agentapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestExecStreamAgainstNetHTTP: ExecStream reads net/http's chunked stream line by line as it
// arrives: the event reaches the caller while the server still holds the result back (the
// server sends it only once the test saw the event), a result larger than the server's buffer
// comes whole after it; an agent that does not stream answers with one body, taken as the
// result; a refusal is a *StatusError; a stream cut before its result is an error.
func TestExecStreamAgainstNetHTTP(t *testing.T) {
	big := strings.Repeat("0123456789abcdef", 64<<10) // 1 MiB: several chunks
	seen := make(chan struct{})
	sock := serveHTTP(t, func(w http.ResponseWriter, r *http.Request) {
		var req ExecRequest
		json.NewDecoder(r.Body).Decode(&req)
		if req.Command == "refuse" {
			w.WriteHeader(403)
			io.WriteString(w, `{"error":"uid 1000 may not","exit_code":4}`)
			return
		}
		if r.Header.Get("Accept") != NDJSON || req.Command == "old" {
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(ExecResult{Stdout: "whole", ExitCode: 3})
			return
		}
		w.Header().Set("Content-Type", NDJSON)
		enc := json.NewEncoder(w)
		enc.Encode(StreamLine{Event: json.RawMessage(`{"kind":"step","message":"vm1: define domain vm1"}`)})
		http.NewResponseController(w).Flush()
		if req.Command == "cut" {
			return
		}
		code := 0
		select {
		case <-seen:
		case <-time.After(5 * time.Second):
			code = 99 // the client did not see the event before the result was sent
		}
		enc.Encode(StreamLine{Result: &ExecResult{Stdout: big, Stderr: "done\n", ExitCode: code}})
	})
	c := Client{Socket: sock}
	var events []string
	res, err := c.ExecStream(context.Background(), ExecRequest{Command: "apply"}, func(e json.RawMessage) {
		events = append(events, string(e))
		close(seen)
	})
	if err != nil || res.ExitCode != 0 || res.Stdout != big || res.Stderr != "done\n" || len(events) != 1 || !strings.Contains(events[0], "define domain") {
		t.Fatalf("ExecStream: %v, exit %d, %d bytes of stdout, events %q", err, res.ExitCode, len(res.Stdout), events)
	}
	res, err = c.ExecStream(context.Background(), ExecRequest{Command: "old"}, func(json.RawMessage) { t.Error("an event from a whole answer") })
	if err != nil || res.Stdout != "whole" || res.ExitCode != 3 {
		t.Errorf("a whole answer: %v %+v", err, res)
	}
	var se *StatusError
	if _, err = c.ExecStream(context.Background(), ExecRequest{Command: "refuse"}, nil); !errors.As(err, &se) || se.Status != 403 || se.Body.ExitCode != 4 {
		t.Errorf("a refusal: %v", err)
	}
	if _, err = c.ExecStream(context.Background(), ExecRequest{Command: "cut"}, func(json.RawMessage) {}); err == nil || !strings.Contains(err.Error(), "ended before its result") {
		t.Errorf("a stream cut before its result: %v", err)
	}
}
