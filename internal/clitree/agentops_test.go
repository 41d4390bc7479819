package clitree

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

// countingRunner is the agent's cliRunner that counts the requests its Run side runs
// (/v1/exec's; cliRunner.commandLines counts those of them run as a command line): a typed
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
// CLI prints with --output json, the exit code in its header; /v1/exec goes through the
// Runner's Run (TestAgentExecRunsOperations: with no command line for an ops-backed command).
func TestAgentTypedEndpointsCallOps(t *testing.T) {
	t.Parallel()
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
		t.Errorf("POST /v1/exec inspect ran %d requests through the Runner's Run; want 1", n)
	}
}

// TestAgentTypedEndpointErrorIsTheCLIs: a failing operation answers its exit code's status
// and an ErrorBody whose error is the CLI's message and whose output is what the CLI printed.
func TestAgentTypedEndpointErrorIsTheCLIs(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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

// sameAsCLI sends one request to the agent serving dir and runs the CLI with args (and
// --host-root dir -o json), and wants the same answer: on exit 0, 200 and the CLI's stdout
// byte for byte; on a failure, the exit code's status and an ErrorBody whose error is the
// CLI's message. It returns the agent's body.
func sameAsCLI(t *testing.T, dir, method, path, body string, args ...string) []byte {
	t.Helper()
	status, code, got := rawCall(t, dir, method, path, []byte(body))
	stdout, stderr, exit := runVia(t, agentNever, append([]string{"--host-root", dir, "-o", "json"}, args...)...)
	if code != strconv.Itoa(exit) {
		t.Errorf("%s %s: exit code %q; the CLI (%v) exits %d: %s", method, path, code, args, exit, stderr)
	}
	if exit == 0 {
		if status != http.StatusOK || string(got) != stdout {
			t.Errorf("%s %s: %d:\n%s\nwant 200 and what %v prints:\n%s", method, path, status, got, args, stdout)
		}
		return got
	}
	var eb agent.ErrorBody
	if err := json.Unmarshal(got, &eb); err != nil {
		t.Fatalf("%s %s: %s: %v", method, path, got, err)
	}
	if status != agent.StatusOf(exit) || eb.ExitCode != exit || "vgpu-host: "+eb.Error+"\n" != stderr {
		t.Errorf("%s %s: %d %s\nwant %d, exit %d and the CLI's %q", method, path, status, got, agent.StatusOf(exit), exit, stderr)
	}
	return got
}

// TestAgentVGPUEndpointsCallOps: POST /v1/mdevs, DELETE /v1/mdevs/{uuid}, POST /v1/vfs and
// POST /v1/host/restore are served by their operations with no command line run, and answer
// what mdev create, mdev remove, vf enable/disable and host restore print with --output json
// (dry runs, changes, "already so" and refusals), byte for byte, with their exit codes.
func TestAgentVGPUEndpointsCallOps(t *testing.T) {
	t.Parallel()
	tr := agentHost(t)
	dir := tr.Dir()
	var cr *countingRunner
	startAgentWith(t, dir, func(s *agent.Server) {
		cr = &countingRunner{cliRunner: s.Runner.(*cliRunner)}
		s.Runner = cr
	})
	// host restore with nothing persisted, dry run and real.
	sameAsCLI(t, dir, "POST", "/v1/host/restore", `{"dry_run": true}`, "host", "restore", "--dry-run")
	sameAsCLI(t, dir, "POST", "/v1/host/restore", ``, "host", "restore")

	// mdev create: the dry run; refusals; then created by the agent, and the CLI's same
	// command converges on the same instances.
	sameAsCLI(t, dir, "POST", "/v1/mdevs", `{"parent": "mbochs", "type": "medium", "name": "opsm", "count": 2, "define": true, "dry_run": true}`,
		"mdev", "create", "--parent", "mbochs", "--type", "medium", "--name", "opsm", "--count", "2", "--define", "--dry-run")
	sameAsCLI(t, dir, "POST", "/v1/mdevs", `{"parent": "mbochs", "type": "medium", "uuids": ["a"], "name": "opsm"}`,
		"mdev", "create", "--parent", "mbochs", "--type", "medium", "--uuid", "a", "--name", "opsm")
	sameAsCLI(t, dir, "POST", "/v1/mdevs", `{"parent": "mbochs", "type": "medium", "count": -1}`,
		"mdev", "create", "--parent", "mbochs", "--type", "medium", "--count=-1")
	sameAsCLI(t, dir, "POST", "/v1/mdevs", `{"parent": "mbochs", "type": "nosuch"}`, "mdev", "create", "--parent", "mbochs", "--type", "nosuch")
	body := sameAsCLI(t, dir, "POST", "/v1/mdevs", `{"parent": "mbochs", "type": "medium", "name": "opsm", "count": 2}`,
		"mdev", "create", "--parent", "mbochs", "--type", "medium", "--name", "opsm", "--count", "2")
	var ins []struct {
		UUID string `json:"uuid"`
	}
	if err := json.Unmarshal(body, &ins); err != nil || len(ins) != 2 {
		t.Fatalf("POST /v1/mdevs: %s (%v); want 2 instances", body, err)
	}

	// mdev remove: one instance by the agent, the other by the CLI, each answering the same
	// (but for the UUID and the VM's index); then both "already gone", and a refusal.
	status, code, got := rawCall(t, dir, "DELETE", "/v1/mdevs/"+ins[0].UUID, nil)
	stdout, stderr, exit := runVia(t, agentNever, "--host-root", dir, "-o", "json", "mdev", "remove", ins[1].UUID)
	if exit != 0 || status != http.StatusOK || code != "0" || string(got) != strings.NewReplacer(ins[1].UUID, ins[0].UUID, `"index": 1`, `"index": 0`).Replace(stdout) {
		t.Errorf("DELETE /v1/mdevs/%s: %d, exit %q:\n%s\nwant what mdev remove prints (exit %d, %s):\n%s", ins[0].UUID, status, code, got, exit, stderr, stdout)
	}
	for _, u := range ins {
		if _, err := os.Stat(filepath.Join(dir, "sys/bus/mdev/devices", u.UUID)); !os.IsNotExist(err) {
			t.Errorf("instance %s is still there (%v)", u.UUID, err)
		}
	}
	sameAsCLI(t, dir, "DELETE", "/v1/mdevs/"+ins[0].UUID+"?undefine=true", ``, "mdev", "remove", "--undefine", ins[0].UUID)
	sameAsCLI(t, dir, "DELETE", "/v1/mdevs/not-a-uuid", ``, "mdev", "remove", "not-a-uuid")

	// vf enable and disable: dry runs, the change by the agent and the CLI's same command
	// finding it done, and a refusal.
	pf := "0000:00:0a.0"
	sameAsCLI(t, dir, "POST", "/v1/vfs", `{"pf": "`+pf+`", "action": "enable", "count": 2, "persist": true, "dry_run": true}`,
		"vf", "enable", "--count", "2", "--persist", "--dry-run", pf)
	sameAsCLI(t, dir, "POST", "/v1/vfs", `{"pf": "`+pf+`", "action": "enable", "count": 9}`, "vf", "enable", "--count", "9", pf)
	sameAsCLI(t, dir, "POST", "/v1/vfs", `{"pf": "`+pf+`", "action": "enable", "count": 2, "driver": "nope"}`, "vf", "enable", "--count", "2", "--driver", "nope", pf)
	sameAsCLI(t, dir, "POST", "/v1/vfs", `{"pf": "`+pf+`", "action": "enable", "count": 2}`, "vf", "enable", "--count", "2", pf)
	sameAsCLI(t, dir, "POST", "/v1/vfs", `{"pf": "`+pf+`", "action": "disable", "dry_run": true}`, "vf", "disable", "--dry-run", pf)
	sameAsCLI(t, dir, "POST", "/v1/vfs", `{"pf": "`+pf+`", "action": "disable"}`, "vf", "disable", pf)

	if n := cr.runs.Load(); n != 0 {
		t.Errorf("the vGPU endpoints ran %d command line(s) through the command tree; want none", n)
	}
}
