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
	"strings"
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
	// A change and its dry run, byte for byte as the CLI's, then done and undone.
	status, code, body := rawCall(t, dir, "POST", "/v1/bind", []byte(`{"addresses": ["0000:01:00.0"], "dry_run": true}`))
	stdout, stderr, exit := runVia(t, agentNever, "--host-root", dir, "-o", "json", "bind", "--dry-run", "0000:01:00.0")
	if exit != 0 || status != http.StatusOK || code != "0" || string(body) != stdout {
		t.Errorf("POST /v1/bind dry run: %d, exit %q:\n%s\nwant what the CLI prints (exit %d, %s):\n%s", status, code, body, exit, stderr, stdout)
	}
	gpu, _ := host.ParseAddress("0000:01:00.0")
	for _, c := range []struct{ path, driver string }{{"/v1/bind", "vfio-pci"}, {"/v1/unbind", "nouveau"}} {
		status, code, body := rawCall(t, dir, "POST", c.path, []byte(`{"addresses": ["0000:01:00.0"]}`))
		if status != http.StatusOK || code != "0" || tr.Driver(gpu) != c.driver {
			t.Errorf("POST %s: %d, exit %q, driver %q (want %s):\n%s", c.path, status, code, tr.Driver(gpu), c.driver, body)
		}
	}
	if n := cr.runs.Load(); n != 0 {
		t.Errorf("the typed endpoints ran %d command line(s) through the command tree; want none", n)
	}
	body, _ = json.Marshal(agentapi.ExecRequest{Command: "inspect"})
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

// TestAgentDestroyEndpointIsTheCLIs: DELETE /v1/vms/NAME of a VM not in the ledger answers
// 404 with the CLI's exit code and words, without running a command line.
func TestAgentDestroyEndpointIsTheCLIs(t *testing.T) {
	tr := agentHost(t)
	dir := tr.Dir()
	var cr *countingRunner
	uri, _ := startAgentWith(t, dir, func(s *agent.Server) {
		cr = &countingRunner{cliRunner: s.Runner.(*cliRunner)}
		s.Runner = cr
	})
	status, code, body := rawCall(t, dir, "DELETE", "/v1/vms/nope", nil)
	_, stderr, exit := runVia(t, agentNever, "--host-root", dir, "-o", "json", "destroy", "--connect", uri, "nope")
	var eb agent.ErrorBody
	if err := json.Unmarshal(body, &eb); err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	if exit != 6 || status != http.StatusNotFound || code != "6" || eb.ExitCode != 6 || "vgpu-host: "+eb.Error+"\n" != stderr {
		t.Errorf("DELETE /v1/vms/nope: %d, exit %q, %s; want 404 and the CLI's exit %d and %q", status, code, body, exit, stderr)
	}
	if n := cr.runs.Load(); n != 0 {
		t.Errorf("DELETE /v1/vms ran %d command line(s); want none", n)
	}
}

// TestAgentSpecEndpointsCallOps: POST /v1/plan answers byte for byte what plan --output json
// prints for the same spec, POST /v1/vms applies it and DELETE /v1/vms/NAME destroys it, with
// no command line run; a spec the CLI refuses is refused with its words, naming spec.yaml.
func TestAgentSpecEndpointsCallOps(t *testing.T) {
	tr := agentHost(t)
	dir := tr.Dir()
	var cr *countingRunner
	uri, logs := startAgentWith(t, dir, func(s *agent.Server) {
		cr = &countingRunner{cliRunner: s.Runner.(*cliRunner)}
		s.Runner = cr
	})
	path := deviceFreeVM(t, dir, "opsvm")
	spec, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	status, code, body := rawCall(t, dir, "POST", "/v1/plan?no_start=true", spec)
	stdout, stderr, exit := runVia(t, agentNever, "--host-root", dir, "-o", "json", "plan", "--connect", uri, "--no-start", path)
	if exit != 0 || status != http.StatusOK || code != "0" || string(body) != stdout {
		t.Errorf("POST /v1/plan: %d, exit %q:\n%s\nwant what plan prints (exit %d, %s):\n%s", status, code, body, exit, stderr, stdout)
	}
	status, code, body = rawCall(t, dir, "POST", "/v1/vms?no_start=true", spec)
	var applied []map[string]any
	if err := json.Unmarshal(body, &applied); err != nil || status != http.StatusOK || code != "0" || len(applied) != 1 || applied[0]["vm"] != "opsvm" {
		t.Fatalf("POST /v1/vms: %d, exit %q: %s (%v)", status, code, body, err)
	}
	if !strings.Contains(logs.String(), "opsvm: ") {
		t.Errorf("the agent logged none of apply's steps:\n%s", logs.String())
	}
	if status, code, body = rawCall(t, dir, "DELETE", "/v1/vms/opsvm", nil); status != http.StatusOK || code != "0" {
		t.Errorf("DELETE /v1/vms/opsvm: %d, exit %q: %s", status, code, body)
	}
	for _, c := range []struct {
		path, body, words string
		status            int
	}{
		{"/v1/vms", strings.Replace(string(spec), "memory:", "memry:", 1), "spec.yaml", http.StatusBadRequest},
		{"/v1/vms?virt_type=xen", string(spec), `--virt-type "xen": use kvm or qemu`, http.StatusBadRequest},
		{"/v1/plan?force=nope", string(spec), `--force "nope": name the check to go past`, http.StatusBadRequest},
		{"/v1/plan?force=a,b", string(spec), `is not an array of strings without commas`, http.StatusBadRequest},
	} {
		status, _, body := rawCall(t, dir, "POST", c.path, []byte(c.body))
		var eb agent.ErrorBody
		if err := json.Unmarshal(body, &eb); err != nil || status != c.status || eb.ExitCode != 2 || !strings.Contains(eb.Error, c.words) {
			t.Errorf("POST %s: %d %s; want %d, exit 2 saying %q", c.path, status, body, c.status, c.words)
		}
	}
	if n := cr.runs.Load(); n != 0 {
		t.Errorf("the spec endpoints ran %d command line(s); want none", n)
	}
}
