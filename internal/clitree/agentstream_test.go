package clitree

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/agent/agentapi"
	"github.com/vgpu-host/vgpu-host/ops"
)

// streamLines posts req to path of the agent serving dir asking for a stream, and returns each
// line with the time it arrived.
func streamLines(t *testing.T, dir, path string, body []byte) ([]agentapi.StreamLine, []time.Time, *http.Response) {
	t.Helper()
	c := agentClient(t, dir)
	req, _ := http.NewRequest("POST", "http://agent"+path, bytes.NewReader(body))
	req.Header.Set("Accept", agentapi.NDJSON)
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", c.Socket)
	}}}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	var lines []agentapi.StreamLine
	var at []time.Time
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l agentapi.StreamLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("POST %s: line %q: %v", path, sc.Text(), err)
		}
		lines, at = append(lines, l), append(at, time.Now())
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return lines, at, resp
}

// TestAgentStreamsProgress: POST /v1/exec with Accept: application/x-ndjson answers each of
// apply --wait-shutdown's events as it happens (the first arrives while the wait goes on,
// seconds before the last line), then its result, whose stderr holds the error and not the
// events again; a typed endpoint streams its events then its OperationDone; the CLI's
// forwarding (which streams) prints what the in-process run prints.
func TestAgentStreamsProgress(t *testing.T) {
	t.Parallel()
	tr := agentHost(t)
	dir := tr.Dir()
	uri, _ := startAgentWith(t, dir, nil)
	path := deviceFreeVM(t, dir, "streamvm")
	spec, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	flags := map[string]json.RawMessage{"host-root": json.RawMessage(`"` + dir + `"`), "wait-shutdown": json.RawMessage("true"), "timeout": json.RawMessage(`"2s"`)}
	body, _ := json.Marshal(agentapi.ExecRequest{Command: "apply", Flags: flags, Operands: []string{path}, Files: map[string]string{path: string(spec)}})
	lines, at, resp := streamLines(t, dir, "/v1/exec", body)
	if ct := resp.Header.Get("Content-Type"); ct != agentapi.NDJSON {
		t.Errorf("Content-Type %q, want %s", ct, agentapi.NDJSON)
	}
	if len(lines) < 2 || lines[len(lines)-1].Result == nil {
		t.Fatalf("want events then a result line; got %d lines: %+v", len(lines), lines)
	}
	var kinds []ops.EventKind
	for _, l := range lines[:len(lines)-1] {
		var e ops.Event
		if l.Event == nil || json.Unmarshal(l.Event, &e) != nil || e.Op != "apply" {
			t.Fatalf("line before the result is not an apply event: %+v", l)
		}
		kinds = append(kinds, e.Kind)
		if strings.Contains(lines[len(lines)-1].Result.Stderr, e.Message) && e.Message != "" {
			t.Errorf("event %q streamed and printed again in the result's stderr", e.Message)
		}
	}
	if !slices.Contains(kinds, ops.EventStep) || !slices.Contains(kinds, ops.EventTick) {
		t.Errorf("event kinds %v: want apply's steps and the wait's ticks", kinds)
	}
	if d := at[len(at)-1].Sub(at[0]); d < time.Second {
		t.Errorf("the first event came %v before the result: not streamed as it happened", d)
	}
	res := lines[len(lines)-1].Result
	if res.ExitCode == 0 || !strings.Contains(res.Stderr, "did not power off within 2s") {
		t.Errorf("result: %+v; want the wait's timeout", res)
	}
	if _, _, code := runVia(t, agentNever, "--host-root", dir, "destroy", "--connect", uri, "streamvm"); code != 0 {
		t.Fatalf("destroy: exit %d", code)
	}

	// A typed endpoint: events, then its OperationDone with the JSON the endpoint answers.
	lines, _, _ = streamLines(t, dir, "/v1/vms?no_start=true", spec)
	last := lines[len(lines)-1]
	if len(lines) < 2 || last.Done == nil || last.Done.ExitCode != 0 || !bytes.Contains(last.Done.Output, []byte(`"vm":"streamvm"`)) {
		t.Fatalf("POST /v1/vms streamed %d lines, last %+v; want events then done with exit 0 and the applied VM", len(lines), last)
	}
	for _, l := range lines[:len(lines)-1] {
		if l.Event == nil {
			t.Errorf("line before done is not an event: %+v", l)
		}
	}
	if _, _, code := runVia(t, agentNever, "--host-root", dir, "destroy", "--connect", uri, "streamvm"); code != 0 {
		t.Fatalf("destroy: exit %d", code)
	}

	// The CLI through the agent prints what it prints in-process, progress included.
	args := []string{"--host-root", dir, "apply", "--connect", uri, "--wait-shutdown", "--timeout", "1s", path}
	in, inErr, inCode := runVia(t, agentNever, args...)
	if _, _, code := runVia(t, agentNever, "--host-root", dir, "destroy", "--connect", uri, "streamvm"); code != 0 {
		t.Fatalf("destroy: exit %d", code)
	}
	out, outErr, outCode := runVia(t, agentAlways, args...)
	if in != out || inErr != outErr || inCode != outCode || !strings.Contains(inErr, "streamvm: ") {
		t.Errorf("through the agent exit %d:\n%s%s\nin-process exit %d:\n%s%s", outCode, out, outErr, inCode, in, inErr)
	}
	runVia(t, agentNever, "--host-root", dir, "destroy", "--connect", uri, "streamvm")

	// A request Prepare refuses is still answered with a result line (exit 2).
	body, _ = json.Marshal(agentapi.ExecRequest{Command: "agent"})
	lines, _, resp = streamLines(t, dir, "/v1/exec", body)
	if resp.StatusCode != http.StatusOK || len(lines) != 1 || lines[0].Result == nil || lines[0].Result.ExitCode != 2 {
		t.Errorf("exec agent: %d %+v; want one result line, exit 2", resp.StatusCode, lines)
	}
}
