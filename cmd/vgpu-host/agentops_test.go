package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/vgpu-host/vgpu-host/agent"
	"github.com/vgpu-host/vgpu-host/agent/agentapi"
	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/ledger"
)

// countingRunner is the agent's cliRunner that counts the command lines it runs: a typed
// endpoint served by its operation never gets there.
type countingRunner struct {
	*cliRunner
	runs atomic.Int64
}

func (r *countingRunner) Run(ctx context.Context, job agentapi.Job, env agentapi.RunEnv) agentapi.ExecResult {
	r.runs.Add(1)
	return r.cliRunner.Run(ctx, job, env)
}

// rawCall sends one request to the agent serving dir and returns the status, the exit code
// header and the body as the agent wrote it.
func rawCall(t *testing.T, dir, method, path string, body []byte) (int, string, []byte) {
	t.Helper()
	c := agentClient(t, dir)
	req, _ := http.NewRequest(method, "http://agent"+path, bytes.NewReader(body))
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", c.Socket)
	}}}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("X-Vgpu-Host-Exit-Code"), b
}

// TestAgentTypedEndpointsCallOps: GET /v1/inventory, /v1/check and /v1/status are served by
// their operations (package ops) with no command line run, and answer byte for byte what the
// CLI prints with --output json, the exit code in its header; /v1/exec still runs its command
// line through the tree.
func TestAgentTypedEndpointsCallOps(t *testing.T) {
	tr := agentHost(t)
	dir := tr.Dir()
	var cr *countingRunner
	uri, _ := startAgentWith(t, dir, func(s *agent.Server) {
		cr = &countingRunner{cliRunner: s.Runner.(*cliRunner)}
		s.Runner = cr
	})
	for _, c := range []struct {
		path string
		cli  []string
	}{
		{"/v1/inventory", []string{"inspect"}},
		{"/v1/check", []string{"check"}},
		{"/v1/status", []string{"status", "--connect", uri}},
	} {
		status, code, body := rawCall(t, dir, "GET", c.path, nil)
		stdout, stderr, exit := runVia(t, agentNever, append([]string{"--host-root", dir, "-o", "json"}, c.cli...)...)
		if exit != 0 && exit != 3 {
			t.Fatalf("%v: exit %d: %s", c.cli, exit, stderr)
		}
		if status != http.StatusOK || code != strconv.Itoa(exit) || string(body) != stdout {
			t.Errorf("GET %s: status %d, exit code %q, body:\n%s\nwant 200, %d and what %v prints:\n%s", c.path, status, code, body, exit, c.cli, stdout)
		}
	}
	if n := cr.runs.Load(); n != 0 {
		t.Errorf("the typed endpoints ran %d command line(s) through the command tree; want none", n)
	}
	body, _ := json.Marshal(agentapi.ExecRequest{Command: "inspect"})
	if status, _, b := rawCall(t, dir, "POST", "/v1/exec", body); status != http.StatusOK {
		t.Fatalf("POST /v1/exec inspect: %d %s", status, b)
	}
	if n := cr.runs.Load(); n != 1 {
		t.Errorf("POST /v1/exec inspect ran %d command lines; want 1 (exec keeps the command tree)", n)
	}
}

// TestAgentTypedEndpointErrorIsTheCLIs: a failing operation answers its exit code's status
// and an ErrorBody whose error is the CLI's message and whose output is what the CLI printed.
func TestAgentTypedEndpointErrorIsTheCLIs(t *testing.T) {
	tr := agentHost(t)
	dir := tr.Dir()
	uri, _ := startAgent(t, dir)
	root, _ := host.NewRoot(dir)
	l := ledger.Open(root)
	if err := os.MkdirAll(filepath.Dir(l.VMPath("bad")), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(l.VMPath("bad"), []byte("{garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	status, code, body := rawCall(t, dir, "GET", "/v1/status", nil)
	stdout, stderr, exit := runVia(t, agentNever, "--host-root", dir, "-o", "json", "status", "--connect", uri)
	if exit == 0 {
		t.Fatalf("status on a damaged ledger exits 0: %s", stdout)
	}
	var eb struct {
		agent.ErrorBody
		Output json.RawMessage `json:"output"`
	}
	if err := json.Unmarshal(body, &eb); err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	var want bytes.Buffer
	if stdout != "" {
		if err := json.Compact(&want, []byte(stdout)); err != nil {
			t.Fatal(err)
		}
	}
	var got bytes.Buffer
	if len(eb.Output) > 0 {
		json.Compact(&got, eb.Output)
	}
	if status != agent.StatusOf(exit) || code != strconv.Itoa(exit) || eb.ExitCode != exit || "vgpu-host: "+eb.Error+"\n" != stderr || got.String() != want.String() {
		t.Errorf("GET /v1/status on a damaged ledger: %d, exit %q, %s\nwant %d, exit %d, the CLI's stderr %q and output %s", status, code, body, agent.StatusOf(exit), exit, stderr, want.String())
	}
}
