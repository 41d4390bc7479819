package clitree

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/agent"
	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/internal/testenv"
	"github.com/vgpu-host/vgpu-host/ledger"
	"github.com/vgpu-host/vgpu-host/virt"
)

// lockedBuffer is a log sink the agent's goroutines and the test share.
type lockedBuffer = testenv.LockedBuffer

// startAgent serves an agent for the fake host under dir, with the file-backed fake libvirt
// dir/libvirt.json, on its default socket under dir (as `vgpu-host --host-root DIR agent
// --connect URI` would), until the test ends. It returns the URI and the agent's log.
func startAgent(t *testing.T, dir string) (uri string, logs *lockedBuffer) {
	t.Helper()
	return startAgentWith(t, dir, nil)
}

// startAgentWith is startAgent with the server's settings changed by mod before it listens.
func startAgentWith(t *testing.T, dir string, mod func(*agent.Server)) (uri string, logs *lockedBuffer) {
	t.Helper()
	root, err := host.NewRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	uri = virt.FileScheme + "://" + filepath.Join(dir, "libvirt.json")
	logs = &lockedBuffer{}
	log, err := agent.NewLogger(logs, "debug", false)
	if err != nil {
		t.Fatal(err)
	}
	procRoot, _ := host.NewRoot("/")
	srv := &agent.Server{Root: root, Socket: agentSocketUnder(root), GID: -1, ProcRoot: procRoot,
		Runner: &cliRunner{root: root, uri: uri, log: log, env: testEnvOf(t)}, Log: log, URI: uri, OpenConn: testEnv().openConnWait}
	if mod != nil {
		mod(srv)
	}
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent stopped with %v", err)
		}
	})
	return uri, logs
}

// runVia runs a command line in-process (--agent never) or through the agent (--agent
// always), as main does, and returns stdout, stderr and the exit code.
func runVia(t *testing.T, mode string, args ...string) (string, string, int) {
	t.Helper()
	argv := append([]string{"--agent", mode}, args...)
	app := newApp(testEnvOf(t))
	pruneUnnamed(app, argv)
	var out, errw bytes.Buffer
	app.Writer, app.ErrWriter = &out, &errw
	code := execute(app, append([]string{"vgpu-host"}, argv...), &errw)
	if sent, _ := app.Metadata[forwardedKey].(bool); sent != (mode != agentNever) {
		t.Fatalf("%v: sent to the agent: %v", argv, sent)
	}
	return out.String(), errw.String(), code
}

// agentHost is the fake host of the agent's tests, its writes going to the kernel emulator:
// a GPU with its audio, the mbochs mdev parent and an SR-IOV PF with 3 VFs.
func agentHost(t *testing.T) *hosttest.Tree {
	tr := hosttest.New(t)
	tr.ConsumerGPU("0000:00:04.0", "0000:01:00.0", "nouveau")
	tr.Mbochs()
	tr.SRIOVPF(hosttest.PCI{Addr: "0000:00:0a.0", Vendor: 0x1b36, Device: 0x0010, Class: 0x010802, Driver: "nvme"},
		hosttest.VFSpec{Total: 3, VFDevice: 0x0010, VFDriver: "nvme"}, 0)
	withKernel(t, tr)
	return tr
}

// TestCLISameThroughAgent runs the CLI's commands twice on one fake host, in-process and then
// through a running agent, each sequence leaving the host as it found it, and wants the same
// stdout, stderr and exit code, byte for byte, from every step.
func TestCLISameThroughAgent(t *testing.T) {
	t.Parallel()
	tr := agentHost(t)
	dir := tr.Dir()
	uri, logs := startAgent(t, dir)
	spec := deviceFreeVM(t, dir, "same")
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("apiVersion: vgpu-host/v1\nkind: VirtualMachine\nmetadata:\n  name: bad\nspec:\n  vcpus: 1\n  memry: 1GiB\n"), 0o644)
	// Relative to the test's working directory, as a user types it.
	rel, err := filepath.Rel(mustGetwd(t), spec)
	if err != nil {
		t.Fatal(err)
	}
	g := []string{"--host-root", dir}
	steps := [][]string{
		{"inspect", "-o", "json"},
		{"inspect"},
		{"inspect", "0000:01:00.0"},
		{"inspect", "0000:09:00.0"},
		{"check", "-o", "json"},
		{"bind", "0000:01:00.0", "--dry-run"},
		{"bind", "0000:01:00.0", "-o", "json"},
		{"bind", "0000:01:00.0"},
		{"unbind", "0000:01:00.0"},
		{"bind", "0000:99:00.0"},
		{"bind", "01:00.0.7"},
		{"mdev", "types"},
		{"mdev", "create", "--parent", "mbochs", "--type", "small", "--count", "2", "--name", "vm1", "-o", "json"},
		{"mdev", "create", "--parent", "mbochs", "--type", "huge"},
		{"mdev", "list"},
		{"mdev", "remove", "--name", "vm1"},
		{"vf", "enable", "0000:00:0a.0", "--count", "2", "--driver", "vfio-pci"},
		{"vf", "list", "-o", "yaml"},
		{"vf", "enable", "0000:00:0a.0", "--count", "4"},
		{"vf", "disable", "0000:00:0a.0"},
		{"render", "--offline", spec},
		{"render", bad},
		{"plan", "--connect", uri, "--virt-type", "qemu", rel},
		{"apply", "--connect", uri, "--virt-type", "qemu", spec},
		{"apply", "--connect", uri, "--virt-type", "qemu", spec, "-o", "json"},
		{"status", "--connect", uri},
		{"status", "--connect", uri, "nosuchvm"},
		{"destroy", "--connect", uri, spec},
		{"destroy", "--connect", uri, "same"},
		{"host", "restore"},
		{"status", "--connect", uri, "-o", "json", "damaged"}, // on the damaged ledger written for it below: exit 1
	}
	around := func(s []string, f func()) {
		if s[len(s)-1] == "damaged" {
			vms := "var/lib/vgpu-host/ledger/vms/"
			tr.WriteFile(vms+"x.json", `null`)
			tr.WriteFile(vms+"damaged.json", `{"version":2,"name":"damaged","phase":"applied","claims":[]}`)
			defer func() {
				for _, f := range []string{"x.json", "damaged.json"} {
					if err := os.Remove(filepath.Join(dir, vms, f)); err != nil {
						t.Fatal(err)
					}
				}
			}()
		}
		f()
	}
	type result struct {
		out, err string
		code     int
	}
	var local []result
	for _, s := range steps {
		var o, e string
		var c int
		around(s, func() { o, e, c = runVia(t, agentNever, append(g, s...)...) })
		local = append(local, result{o, e, c})
		if os.Getenv("AGENT_TEST_DEBUG") != "" {
			t.Logf("%v: exit %d\n%s\n%s", s, c, o, e)
		}
	}
	for i, s := range steps {
		var o, e string
		var c int
		around(s, func() { o, e, c = runVia(t, agentAlways, append(g, s...)...) })
		l := local[i]
		if o != l.out || e != l.err || c != l.code {
			t.Errorf("%s:\nin-process: exit %d\n%s\n%s\nagent: exit %d\n%s\n%s", strings.Join(s, " "), l.code, l.out, l.err, c, o, e)
		}
	}
	// The steps did happen in the agent, and were logged with the caller.
	for _, want := range []string{`"msg":"operation","op":"apply"`, `"path":"` + dir + `/sys/bus/pci/devices/0000:01:00.0/driver_override"`, `"uid":0`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("agent log lacks %s:\n%s", want, logs.String())
		}
	}
	codes := map[int]bool{}
	for _, l := range local {
		codes[l.code] = true
	}
	for _, c := range []int{0, 1, 2, 6} {
		if !codes[c] {
			t.Errorf("no step exited %d: the comparison misses that path", c)
		}
	}
}

func mustGetwd(t *testing.T) string {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return wd
}

// agentClient is a client of the agent serving dir.
func agentClient(t *testing.T, dir string) agent.Client {
	root, _ := host.NewRoot(dir)
	return agent.Client{Socket: agentSocketUnder(root)}
}

// call sends one request and returns the status and the decoded JSON body.
func call(t *testing.T, c agent.Client, method, path string, body any) (int, any) {
	t.Helper()
	var b []byte
	switch v := body.(type) {
	case nil:
	case string:
		b = []byte(v)
	default:
		b, _ = json.Marshal(v)
	}
	req, _ := http.NewRequest(method, "http://agent"+path, bytes.NewReader(b))
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", c.Socket)
	}}}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var v any
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatalf("%s %s: status %d, not JSON: %v", method, path, resp.StatusCode, err)
	}
	return resp.StatusCode, v
}

// TestAgentEndpoints calls every endpoint of the API on a fake host: status codes, the
// JSON the command prints, and errors that name the device and the path.
func TestAgentEndpoints(t *testing.T) {
	t.Parallel()
	tr := agentHost(t)
	dir := tr.Dir()
	startAgent(t, dir)
	c := agentClient(t, dir)
	spec, err := os.ReadFile(deviceFreeVM(t, dir, "api"))
	if err != nil {
		t.Fatal(err)
	}
	field := func(v any, path ...any) any {
		for _, p := range path {
			switch k := p.(type) {
			case string:
				m, _ := v.(map[string]any)
				v = m[k]
			case int:
				a, _ := v.([]any)
				if k >= len(a) {
					return nil
				}
				v = a[k]
			}
		}
		return v
	}
	for _, s := range []struct {
		method, path string
		body         any
		status       int
		check        func(v any) string // "" when fine
	}{
		{"GET", "/v1/version", nil, 200, func(v any) string {
			if field(v, "api") != "v1" || field(v, "host_root") != dir {
				return "want api v1 and the host root"
			}
			return ""
		}},
		{"GET", "/v1/health", nil, 200, func(v any) string {
			if field(v, "ready") != true {
				return "not ready"
			}
			return ""
		}},
		{"GET", "/v1/inventory", nil, 200, func(v any) string {
			if field(v, "devices", 0, "address") == nil || field(v, "host_root") != dir {
				return "no devices"
			}
			return ""
		}},
		{"GET", "/v1/check", nil, 200, func(v any) string {
			if _, ok := v.([]any); !ok && field(v, "checks") == nil {
				return "no checks"
			}
			return ""
		}},
		{"POST", "/v1/plan", string(spec), 200, func(v any) string {
			if field(v, 0, "vm") != "api" {
				return "no plan for api"
			}
			return ""
		}},
		{"POST", "/v1/vms?no_start=true", string(spec), 200, func(v any) string {
			if field(v, 0, "vm") != "api" {
				return "api not applied"
			}
			return ""
		}},
		{"GET", "/v1/status", nil, 200, func(v any) string {
			if field(v, 0, "name") != "api" {
				return "api not listed"
			}
			return ""
		}},
		{"POST", "/v1/vms", "apiVersion: vgpu-host/v1\nkind: VirtualMachine\nmetadata:\n  name: x\nspec:\n  vcpus: 1\n  memry: 1GiB\n", 400, func(v any) string {
			if !strings.Contains(fmt.Sprint(field(v, "error")), "memry") || field(v, "exit_code") != 2.0 {
				return "the error does not name the field"
			}
			return ""
		}},
		{"POST", "/v1/vms", "", 400, nil},
		{"DELETE", "/v1/vms/api", nil, 200, func(v any) string {
			if field(v, 0, "vm") != "api" {
				return "api not destroyed"
			}
			return ""
		}},
		{"DELETE", "/v1/vms/api", nil, 404, func(v any) string {
			if !strings.Contains(fmt.Sprint(field(v, "error")), "ledger") {
				return "the error does not name the ledger"
			}
			return ""
		}},
		{"DELETE", "/v1/vms/--force", nil, 400, nil},
		{"POST", "/v1/bind", map[string]any{"addresses": []string{"0000:01:00.0"}}, 200, func(v any) string {
			if field(v, "groups", 0, "viable") != true {
				return "group not viable after bind"
			}
			return ""
		}},
		{"POST", "/v1/bind", map[string]any{"addresses": []string{"0000:42:00.0"}}, 404, func(v any) string {
			if e := fmt.Sprint(field(v, "error")); !strings.Contains(e, "0000:42:00.0") || !strings.Contains(e, dir+"/sys/bus/pci/devices") {
				return "the error does not name the device and its path"
			}
			return ""
		}},
		{"POST", "/v1/bind", map[string]any{"adresses": []string{"0000:01:00.0"}}, 400, nil},
		{"POST", "/v1/unbind", map[string]any{"addresses": []string{"0000:01:00.0"}}, 200, nil},
		{"POST", "/v1/mdevs", map[string]any{"parent": "mbochs", "type": "medium", "name": "m1", "count": 2}, 200, func(v any) string {
			if a, _ := v.([]any); len(a) != 2 {
				return "want 2 instances"
			}
			return ""
		}},
		{"POST", "/v1/mdevs", map[string]any{"parent": "mbochs", "type": "medium", "name": "m2", "count": 3}, 409, func(v any) string {
			if !strings.Contains(fmt.Sprint(field(v, "error")), "mbochs") || field(v, "exit_code") != 5.0 {
				return "the error does not name the parent, or is not busy"
			}
			return ""
		}},
		{"POST", "/v1/mdevs", map[string]any{"parent": "mbochs", "type": "nosuch"}, 404, nil},
		// Removing an instance that is not there is "already so".
		{"DELETE", "/v1/mdevs/00000000-0000-0000-0000-000000000000", nil, 200, nil},
		{"DELETE", "/v1/mdevs/not-a-uuid", nil, 400, nil},
		{"POST", "/v1/vfs", map[string]any{"pf": "0000:00:0a.0", "action": "enable", "count": 2}, 200, func(v any) string {
			if field(v, "num_vfs") != 2.0 {
				return "want 2 VFs"
			}
			return ""
		}},
		{"POST", "/v1/vfs", map[string]any{"pf": "0000:00:0a.0", "action": "enable", "count": 9}, 400, func(v any) string {
			if !strings.Contains(fmt.Sprint(field(v, "error")), "0000:00:0a.0") {
				return "the error does not name the PF"
			}
			return ""
		}},
		{"POST", "/v1/vfs", map[string]any{"pf": "0000:00:0a.0", "action": "disable"}, 200, nil},
		{"POST", "/v1/vfs", map[string]any{"pf": "0000:00:0a.0", "action": "toggle"}, 400, nil},
		{"POST", "/v1/host/restore", nil, 200, nil},
		{"POST", "/v1/exec", agent.ExecRequest{Command: "mdev types", Flags: jsonFlags("output", "json")}, 200, func(v any) string {
			if field(v, "exit_code") != 0.0 || !strings.Contains(fmt.Sprint(field(v, "stdout")), "mbochs-medium") {
				return "exec did not run mdev types"
			}
			return ""
		}},
		{"POST", "/v1/exec", agent.ExecRequest{Command: "inspect", Flags: jsonFlags("host-root", "/")}, 200, func(v any) string {
			if field(v, "exit_code") != 2.0 || !strings.Contains(fmt.Sprint(field(v, "stderr")), "this agent serves "+dir) {
				return "another --host-root was not refused"
			}
			return ""
		}},
		{"POST", "/v1/exec", agent.ExecRequest{Command: "status", Flags: jsonFlags("connect", "test:///default")}, 200, func(v any) string {
			if field(v, "exit_code") != 2.0 || !strings.Contains(fmt.Sprint(field(v, "stderr")), "this agent uses") {
				return "another --connect was not refused"
			}
			return ""
		}},
		{"POST", "/v1/exec", agent.ExecRequest{Command: "agent"}, 200, func(v any) string {
			if field(v, "exit_code") != 2.0 || !strings.Contains(fmt.Sprint(field(v, "stderr")), "cannot run through the agent") {
				return "agent over exec was not refused"
			}
			return ""
		}},
		{"POST", "/v1/exec", agent.ExecRequest{Command: "render", Operands: []string{"/etc/shadow.yaml"}, Files: map[string]string{"other.yaml": "x"}}, 200, func(v any) string {
			if field(v, "exit_code") != 2.0 || !strings.Contains(fmt.Sprint(field(v, "stderr")), "send its content") {
				return "a file that is not an argument was accepted, or a path was opened"
			}
			return ""
		}},
		// A command line is no request: the agent takes none.
		{"POST", "/v1/exec", `{"args": ["inspect"]}`, 400, nil},
		{"POST", "/v1/exec", `{"args": ["inspect"], "bogus": 1}`, 400, nil},
		{"POST", "/v1/exec", strings.Repeat("x", agent.DefaultMaxBody+1), 413, nil},
		{"GET", "/v2/inventory", nil, 404, nil},
	} {
		status, v := call(t, c, s.method, s.path, s.body)
		if status != s.status {
			t.Errorf("%s %s: status %d, want %d: %v", s.method, s.path, status, s.status, v)
			continue
		}
		if s.status != 200 {
			if e, _ := field(v, "error").(string); e == "" {
				t.Errorf("%s %s: %d without an error message: %v", s.method, s.path, status, v)
			}
		}
		if s.check != nil {
			if msg := s.check(v); msg != "" {
				t.Errorf("%s %s: %s: %v", s.method, s.path, msg, v)
			}
		}
	}
}

// TestAgentRace16For4: 16 API clients at once each apply a VM that wants one mbochs-medium
// instance on a host that has 4. Exactly 4 get one; the 12 others are told the devices are
// busy (409, exit 5); the ledger holds 4 VMs.
func TestAgentRace16For4(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	tr.Mbochs()
	withKernel(t, tr)
	dir := tr.Dir()
	startAgent(t, dir)
	c := agentClient(t, dir)
	statuses := make([]int, 16)
	bodies := make([]any, 16)
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := fmt.Sprintf("apiVersion: vgpu-host/v1\nkind: VirtualMachine\nmetadata:\n  name: race%02d\nspec:\n  vcpus: 1\n  memory: 256MiB\n  firmware: bios\n  graphics:\n    type: vnc\n  network:\n    type: none\n  gpus:\n    - vgpu:\n        profile: medium\n", i)
			statuses[i], bodies[i] = call(t, c, "POST", "/v1/vms?no_start=true", s)
		}()
	}
	wg.Wait()
	won, lost := 0, 0
	for i, st := range statuses {
		switch st {
		case 200:
			won++
		case 409:
			lost++
			if m, _ := bodies[i].(map[string]any); m["exit_code"] != 5.0 {
				t.Errorf("client %d: 409 with exit %v, want 5 (busy): %v", i, m["exit_code"], bodies[i])
			}
		default:
			t.Errorf("client %d: status %d: %v", i, st, bodies[i])
		}
	}
	root, _ := host.NewRoot(dir)
	book, err := ledger.Open(root).Read()
	if err != nil {
		t.Fatal(err)
	}
	if won != 4 || lost != 12 || book.Len() != 4 {
		t.Fatalf("%d applied, %d busy, %d VMs in the ledger; want 4, 12, 4", won, lost, book.Len())
	}
}

// startAgentProcess starts `vgpu-host agent` for the fake host under dir and waits until its
// socket answers.
func startAgentProcess(t *testing.T, bin, dir, uri string, env ...string) (*exec.Cmd, *lockedBuffer) {
	t.Helper()
	return startAgentProcessArgs(t, bin, dir, uri, nil, env...)
}

// startAgentProcessArgs is startAgentProcess with further agent options.
func startAgentProcessArgs(t *testing.T, bin, dir, uri string, args []string, env ...string) (*exec.Cmd, *lockedBuffer) {
	t.Helper()
	logs := &lockedBuffer{}
	cmd := exec.Command(bin, append([]string{"--host-root", dir, "agent", "--connect", uri}, args...)...)
	cmd.Env, cmd.Stderr = append(os.Environ(), env...), logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	c := agentClient(t, dir)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var v map[string]any
		if c.Do(context.Background(), "GET", "/v1/version", nil, &v) == nil && v["pid"] == float64(cmd.Process.Pid) {
			return cmd, logs
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent did not answer:\n%s", logs.String())
		}
	}
}

// exitOf waits for cmd and returns its exit code.
func exitOf(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	err := cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0
}

// TestAgentProcessCrashRestartSIGTERM: the agent process dies hard in the middle of an apply
// (the crash hook's exit 137, as kill -9), leaving its socket; a new agent replaces the stale
// socket, and the next apply through it converges the interrupted one. SIGTERM then stops
// the agent with exit 0 and removes the socket; a second agent on a live socket exits 5.
func TestAgentProcessCrashRestartSIGTERM(t *testing.T) {
	t.Parallel()
	bin := binary(t)
	tr := hosttest.New(t)
	dir := tr.Dir()
	uri := virt.FileScheme + "://" + filepath.Join(dir, "libvirt.json")
	spec := deviceFreeVM(t, dir, "crashvm")
	apply := []string{"--host-root", dir, "--agent", "always", "-o", "json", "apply", "--connect", uri, "--virt-type", "qemu", spec}

	first, logs := startAgentProcess(t, bin, dir, uri, envCrashAt+"=1")
	out, err := exec.Command(bin, apply...).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("apply through an agent that dies: %v\n%s", err, out)
	}
	if code := exitOf(t, first); code != 137 {
		t.Fatalf("the agent exited %d, want 137 (the crash hook):\n%s", code, logs.String())
	}
	root, _ := host.NewRoot(dir)
	if _, err := os.Lstat(agentSocketUnder(root)); err != nil {
		t.Fatalf("no stale socket after the crash: %v", err)
	}

	second, logs := startAgentProcess(t, bin, dir, uri)
	if !strings.Contains(logs.String(), "removed a stale socket") {
		t.Errorf("the restart did not say it replaced the stale socket:\n%s", logs.String())
	}
	out, err = exec.Command(bin, apply...).CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"converged"`) {
		t.Fatalf("apply after the crash: %v\n%s", err, out)
	}
	busy := exec.Command(bin, "--host-root", dir, "agent", "--connect", uri)
	if out, err := busy.CombinedOutput(); !errors.As(err, &ee) || ee.ExitCode() != 5 || !strings.Contains(string(out), fmt.Sprintf("pid %d", second.Process.Pid)) {
		t.Errorf("a second agent on a live socket: %v\n%s", err, out)
	}
	second.Process.Signal(syscall.SIGTERM)
	if code := exitOf(t, second); code != 0 {
		t.Fatalf("SIGTERM: exit %d:\n%s", code, logs.String())
	}
	if _, err := os.Lstat(agentSocketUnder(root)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left after SIGTERM: %v", err)
	}
	if out, code := runCLI(t, "--host-root", dir, "--agent", "never", "status", "--connect", uri); code != 0 || !strings.Contains(out, "crashvm") {
		t.Errorf("status after the agent stopped: exit %d\n%s", code, out)
	}
}

// jsonFlags makes a request's flags from name, value pairs.
func jsonFlags(kv ...any) map[string]json.RawMessage {
	m := map[string]json.RawMessage{}
	for i := 0; i < len(kv); i += 2 {
		b, err := json.Marshal(kv[i+1])
		if err != nil {
			panic(err)
		}
		m[kv[i].(string)] = b
	}
	return m
}

// TestPrepareRequest: how the agent checks and classifies typed requests, and which of their
// values it takes for the caller's files.
func TestPrepareRequest(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		req   agent.ExecRequest
		class agent.Class
		files []string
		err   string
	}{
		{agent.ExecRequest{Command: "inspect", Flags: jsonFlags("output", "json")}, agent.Read, nil, ""},
		{agent.ExecRequest{Command: "bind", Flags: jsonFlags("host-root", "/x", "timeout", "2s"), Operands: []string{"0000:01:00.0"}}, agent.Mutation, nil, ""},
		{agent.ExecRequest{Command: "bind", Flags: jsonFlags("dry-run", true), Operands: []string{"0000:01:00.0"}}, agent.Read, nil, ""},
		{agent.ExecRequest{Command: "bind", Flags: jsonFlags("dry-run", false), Operands: []string{"0000:01:00.0"}}, agent.Mutation, nil, ""},
		{agent.ExecRequest{Command: "mdev create", Flags: jsonFlags("parent", "mbochs", "type", "small", "count", 2)}, agent.Mutation, nil, ""},
		{agent.ExecRequest{Command: "apply", Flags: jsonFlags("output", "json", "force", []string{"boot-vga"}), Operands: []string{"a.yaml", "b.yml"}}, agent.Mutation, []string{"a.yaml", "b.yml"}, ""},
		{agent.ExecRequest{Command: "render", Flags: jsonFlags("offline", true), Operands: []string{"a.yaml"}}, agent.Read, []string{"a.yaml"}, ""},
		{agent.ExecRequest{Command: "destroy", Operands: []string{"vm1", "vm2.yaml"}}, agent.Mutation, []string{"vm2.yaml"}, ""},
		{agent.ExecRequest{Command: "kubevirt vm", Flags: jsonFlags("config", "k.yaml"), Operands: []string{"s.yaml"}}, agent.Read, []string{"s.yaml", "k.yaml"}, ""},
		{agent.ExecRequest{Command: "kubevirt labels", Flags: jsonFlags("write", true)}, agent.Mutation, nil, ""},
		{agent.ExecRequest{Command: "kubevirt labels"}, agent.Read, nil, ""},
		{agent.ExecRequest{Command: "image export", Flags: jsonFlags("to", "/x.qcow2"), Operands: []string{"vm"}}, agent.RootMutation, nil, ""},
		{agent.ExecRequest{Command: "image export", Flags: jsonFlags("seal", true, "to", "/x.raw", "dry-run", true), Operands: []string{"vm"}}, agent.Read, nil, ""},
		{agent.ExecRequest{Command: "host install-unit"}, agent.RootMutation, nil, ""},
		// Every value is typed: no spelling of a flag hides in text.
		{agent.ExecRequest{Command: "bind", Flags: jsonFlags("forse", true)}, 0, nil, `flag "forse": bind has no such flag`},
		{agent.ExecRequest{Command: "bind", Flags: jsonFlags("help", false)}, 0, nil, `flag "help": bind has no such flag`},
		{agent.ExecRequest{Command: "bind", Flags: jsonFlags("h", false)}, 0, nil, `flag "h": bind has no such flag`},
		{agent.ExecRequest{Command: "host install-unit", Flags: jsonFlags("help", false, "exec", "/tmp/evil")}, 0, nil, `flag "help"`},
		{agent.ExecRequest{Command: "bind", Flags: jsonFlags("dry-run", "true")}, 0, nil, `flag "dry-run": "true" is not a JSON boolean`},
		{agent.ExecRequest{Command: "kubevirt labels", Flags: jsonFlags("write", 1)}, 0, nil, `flag "write": 1 is not a JSON boolean`},
		{agent.ExecRequest{Command: "bind", Flags: jsonFlags("timeout", 5)}, 0, nil, `is not a duration string`},
		{agent.ExecRequest{Command: "mdev create", Flags: jsonFlags("count", "2")}, 0, nil, `is not a JSON integer`},
		{agent.ExecRequest{Command: "mdev create", Flags: jsonFlags("count", 2.5)}, 0, nil, `is not a JSON integer`},
		{agent.ExecRequest{Command: "apply", Flags: jsonFlags("force", "boot-vga")}, 0, nil, `is not a JSON array of strings`},
		{agent.ExecRequest{Command: "apply", Flags: jsonFlags("force", []string{"a,b"})}, 0, nil, `without commas`},
		{agent.ExecRequest{Command: "mdev create", Flags: jsonFlags("o", "json")}, 0, nil, `flag "o"`},
		{agent.ExecRequest{Command: "bind", Flags: jsonFlags("agent", "never")}, 0, nil, `flag "agent"`},
		{agent.ExecRequest{Command: "bind", Operands: []string{"a\x00b"}}, 0, nil, "NUL"},
		{agent.ExecRequest{Command: "bind --dry-run"}, 0, nil, "not a command the agent runs"},
		{agent.ExecRequest{Command: "mdev"}, 0, nil, "not a command the agent runs"},
		{agent.ExecRequest{Command: "frobnicate"}, 0, nil, "not a command the agent runs"},
		{agent.ExecRequest{Command: "agent"}, 0, nil, "cannot run through the agent"},
		{agent.ExecRequest{Command: "completion"}, 0, nil, "cannot run through the agent"},
		{agent.ExecRequest{Command: "device-plugin"}, 0, nil, "not a command the agent runs"},
		{agent.ExecRequest{Command: "__man"}, 0, nil, "not a command the agent runs"},
	} {
		job, err := (&cliRunner{env: testEnv()}).Prepare(c.req)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%+v: %v, want an error with %q", c.req, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%+v: %v", c.req, err)
			continue
		}
		if job.Class != c.class || fmt.Sprint(job.Files) != fmt.Sprint(c.files) {
			t.Errorf("%+v: class %s, files %v; want %s, %v", c.req, job.Class, job.Files, c.class, c.files)
		}
	}
}

// TestEveryCommandHasAnAgentRule: each command of the tree either has its rule in
// agentRules (how the agent runs it) or is one of the few the CLI always runs itself, and
// every rule names a command that exists. A new command without a rule would silently never
// go through the agent.
func TestEveryCommandHasAnAgentRule(t *testing.T) {
	t.Parallel()
	// host snapshot reads as root and writes a file the caller names: never through the agent.
	local := map[string]bool{"agent": true, "version": true, "__man": true, "device-plugin": true, "dra-plugin": true, "host snapshot": true}
	seen := map[string]bool{}
	var walk func(prefix string, cs []*cli.Command)
	walk = func(prefix string, cs []*cli.Command) {
		for _, c := range cs {
			name := strings.TrimSpace(prefix + " " + c.Name)
			if len(c.Commands) > 0 {
				walk(name, c.Commands)
				continue
			}
			seen[name] = true
			if _, ok := agentRules.Get()[name]; !ok && !local[name] {
				t.Errorf("command %q has no rule in agentRules and is not local-only", name)
			}
		}
	}
	walk("", newApp(testEnv()).Commands)
	for name := range agentRules.Get() {
		if !seen[name] {
			t.Errorf("agentRules names %q, which is not a command", name)
		}
	}
}

// TestAgentOfAnotherRootRefuses: a command meant for this machine's root (no --host-root),
// sent with --agent-socket to an agent serving a fake root, is refused (exit 2) instead of
// acting on the agent's root.
func TestAgentOfAnotherRootRefuses(t *testing.T) {
	t.Parallel()
	tr := agentHost(t)
	startAgent(t, tr.Dir())
	socket := agentClient(t, tr.Dir()).Socket
	out, errw, code := runVia(t, agentAlways, "--agent-socket", socket, "bind", "0000:01:00.0")
	if code != exitUsage || !strings.Contains(errw, "this agent serves "+tr.Dir()) {
		t.Fatalf("exit %d:\n%s%s", code, out, errw)
	}
	if tr.Driver(host.MustParseAddress("0000:01:00.0")) != "nouveau" {
		t.Fatal("the agent bound the GPU of its own root")
	}
}
