package clitree

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/agent"
	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/internal/testenv"
)

// envCLIChild makes the test binary, run as another user, run the command lines listed in
// the JSON file it names with the CLI as main does, one JSON line per command line on stdout.
const envCLIChild = "VGPU_HOST_TEST_CLI_CHILD"

// TestMain lets the test binary act as the CLI of another user (TestAgentAuthorization).
func TestMain(m *testing.M) {
	if f := os.Getenv(envCLIChild); f != "" {
		os.Exit(cliChild(f))
	}
	code := m.Run()
	nvmlHelpers.Remove()
	if release.dir != "" {
		os.RemoveAll(release.dir)
	}
	if binPath != "" { // binary's build and the helpers beside it
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// childResult is what one command line did in the child.
type childResult struct {
	Args   []string `json:"args"`
	Code   int      `json:"code"`
	Stdout string   `json:"stdout"`
	Stderr string   `json:"stderr"`
}

// cliChild runs each command line of the file as main would (newAppFor, execute), with the
// CLI's own parsing, --agent and forwarding.
func cliChild(file string) int {
	b, err := os.ReadFile(file)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var lines [][]string
	if err := json.Unmarshal(b, &lines); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	enc := json.NewEncoder(os.Stdout)
	for _, args := range lines {
		var out, errw bytes.Buffer
		app := newAppFor(testEnv(), args)
		app.Writer, app.ErrWriter = &out, &errw
		code := execute(app, append([]string{"vgpu-host"}, args...), &errw)
		enc.Encode(childResult{Args: args, Code: code, Stdout: out.String(), Stderr: errw.String()})
	}
	return 0
}

// runCLIAs runs the command lines as the CLI of a process with cred, and returns what each did.
func runCLIAs(t *testing.T, dir string, cred *syscall.Credential, lines [][]string) []childResult {
	t.Helper()
	b, _ := json.Marshal(lines)
	f := filepath.Join(dir, fmt.Sprintf("lines-%d-%d.json", cred.Uid, len(cred.Groups)))
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "cli.test")
	if _, err := os.Stat(bin); err != nil {
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(exe)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bin, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bin)
	cmd.Dir = dir
	cmd.Env = []string{envCLIChild + "=" + f, "PATH=/usr/bin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("CLI as uid %d: %v\n%s\n%s", cred.Uid, err, out, stderr.String())
	}
	var got []childResult
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var r childResult
		if err := dec.Decode(&r); err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	if len(got) != len(lines) {
		t.Fatalf("CLI as uid %d: %d answers for %d command lines:\n%s", cred.Uid, len(got), len(lines), out)
	}
	return got
}

// refused reports whether a result is the agent's permission refusal.
func refused(r childResult) bool {
	return r.Code == exitRefused && strings.Contains(r.Stderr, "permission denied") && strings.Contains(r.Stderr, "may not run")
}

// TestAgentAuthorization: every operation the agent runs, through the real CLI of real
// processes with real uids, over the agent's real socket (mode 0666, so that anyone may
// connect, group 4242): root may run everything; a member of the group every change but
// the root-only ones; anyone else only reads. Every spelling of a flag that the command tree
// reads as something else (-h=false, --help=0, --dry-run=f, --write=1, …) is tried on every
// change: the agent decides on the typed values the CLI parsed, so none of them changes who
// may do what. Reads of files the caller cannot read never reach the agent.
func TestAgentAuthorization(t *testing.T) {
	t.Parallel()
	testenv.RequireRoot(t)
	tr := agentHost(t)
	dir := tr.Dir()
	const gid = 4242
	uri, logs := startAgentWith(t, dir, func(s *agent.Server) { s.GID, s.GroupName, s.SocketMode = gid, "vgpu-test", 0o666 })
	// The other users reach the tree: the test's directories are root's 0700.
	for d := dir; d != "/" && d != "."; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err == nil && st.Mode().Perm()&0o005 != 0o005 {
			os.Chmod(d, st.Mode().Perm()|0o755)
		}
	}
	spec := deviceFreeVM(t, dir, "authvm")
	secret := filepath.Join(dir, "secret.yaml")
	if err := os.WriteFile(secret, []byte("root only: the secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(dir, "root.pub")
	if err := os.WriteFile(key, []byte("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKeyOfRootOnly root@host\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	keyed := filepath.Join(dir, "keyed.yaml")
	b, _ := os.ReadFile(spec)
	os.WriteFile(keyed, []byte(strings.Replace(string(b), "name: authvm", "name: keyed", 1)+"  cloudInit:\n    sshAuthorizedKeys: ["+key+"]\n"), 0o644)
	layoutFile := filepath.Join(dir, "layout.yaml")
	os.WriteFile(layoutFile, []byte("apiVersion: vgpu-host/v1\nkind: HostLayout\n"), 0o644)
	evil := filepath.Join(dir, "evil.sh")
	unit := filepath.Join(dir, "etc", "systemd", "system", "vgpu-host-restore.service")
	c := []string{"--connect", uri}
	ops := map[string][]string{
		"inspect":           {"inspect"},
		"check":             {"check"},
		"bind":              {"bind", "0000:01:00.0"},
		"unbind":            {"unbind", "0000:01:00.0"},
		"vf list":           {"vf", "list"},
		"vf enable":         {"vf", "enable", "0000:00:0a.0", "--count", "1"},
		"vf disable":        {"vf", "disable", "0000:00:0a.0"},
		"mdev types":        {"mdev", "types"},
		"mdev list":         {"mdev", "list"},
		"mdev place":        {"mdev", "place", "--type", "mbochs-small"},
		"mdev create":       {"mdev", "create", "--parent", "mbochs", "--type", "mbochs-small", "--uuid", "00000000-0000-0000-0000-00000000000a"},
		"mdev remove":       {"mdev", "remove", "00000000-0000-0000-0000-00000000000a"},
		"mdev define":       {"mdev", "define", "--parent", "mbochs", "--type", "mbochs-small", "00000000-0000-0000-0000-00000000000b"},
		"mdev undefine":     {"mdev", "undefine", "00000000-0000-0000-0000-00000000000b"},
		"host restore":      {"host", "restore"},
		"host install-unit": {"host", "install-unit", "--exec", evil},
		"render":            {"render", "--offline", spec},
		"plan":              append(append([]string{"plan"}, c...), "--virt-type", "qemu", spec),
		"apply":             append(append([]string{"apply"}, c...), "--virt-type", "qemu", "--no-start", spec),
		"destroy":           append(append([]string{"destroy"}, c...), "authvm"),
		"migrate":           append(append([]string{"migrate"}, c...), "authvm", "--to", "qemu+ssh://nohost.invalid/system"),
		"migrate-target":    append(append([]string{"migrate-target"}, c...), "abort", "authvm"),
		"attach":            append(append([]string{"attach"}, c...), "authvm", "--virtio", "--config"),
		"detach":            append(append([]string{"detach"}, c...), "authvm", "virtio-gpu"),
		"status":            append([]string{"status"}, c...),
		"verify":            append(append([]string{"verify"}, c...), "authvm"),
		"image export":      append(append([]string{"image", "export"}, c...), "authvm", "--to", filepath.Join(dir, "out.qcow2")),
		"kubevirt config":   {"kubevirt", "config"},
		"kubevirt vm":       {"kubevirt", "vm", spec},
		"kubevirt labels":   {"kubevirt", "labels"},
		"mig show":          {"mig", "show"},
		"mig plan":          {"mig", "plan", "--gpu", "0000:01:00.0", "--profiles", "1g.10gb"},
		"mig apply":         {"mig", "apply", "--gpu", "0000:01:00.0", "--profiles", "1g.10gb"},
		"host layout plan":  {"host", "layout", "plan", layoutFile},
		"host layout apply": {"host", "layout", "apply", layoutFile},
		"host layout show":  {"host", "layout", "show"},
		"host health":       {"host", "health"},

		"host release-quarantine": {"host", "release-quarantine", "0000:01:00.0"},
	}
	for op := range agentRules.Get() {
		if _, ok := ops[op]; !ok {
			t.Fatalf("no command line for %q: every operation the agent runs is in this table", op)
		}
	}
	// Spellings the command tree reads as help off, or a boolean flag's value: each is
	// appended to every change.
	spellings := [][]string{{"-h=false"}, {"--help=false"}, {"--help=0"}, {"-h=f"}, {"--help=F"}, {"--dry-run=false"}, {"--dry-run=0"}, {"--dry-run=f"}}
	type line struct {
		op    string
		class agent.Class
		args  []string
	}
	var lines []line
	for _, op := range slices.Sorted(func(yield func(string) bool) {
		for k := range ops {
			if !yield(k) {
				return
			}
		}
	}) {
		args := append([]string{"--host-root", dir, "--agent", "always"}, ops[op]...)
		class := agentRules.Get()[op].class
		lines = append(lines, line{op, class, args})
		if class == agent.Read && op != "kubevirt labels" {
			continue
		}
		for _, sp := range spellings {
			if strings.HasPrefix(sp[0], "--dry-run") && !hasFlag(op, "dry-run") {
				continue
			}
			lines = append(lines, line{op, class, append(slices.Clone(args), sp...)})
		}
	}
	// attach --dry-run changes nothing: anyone may ask (classOf).
	for _, d := range []string{"--dry-run", "--dry-run=true", "--dry-run=1"} {
		lines = append(lines, line{"attach", agent.Read, append([]string{"--host-root", dir, "--agent", "always"}, append(slices.Clone(ops["attach"]), d)...)})
	}
	// A migration's plan reaches another host over ssh: a change's right even as a dry run.
	lines = append(lines, line{"migrate", agent.Mutation, append([]string{"--host-root", dir, "--agent", "always"}, append(slices.Clone(ops["migrate"]), "--dry-run")...)})
	lines = append(lines, line{"plan", agent.Mutation, append(append([]string{"--host-root", dir, "--agent", "always", "plan"}, c...), "--migrate", "authvm", "--to", "qemu+ssh://nohost.invalid/system")})
	for _, w := range []string{"--write", "--write=1", "--write=t", "--write=TRUE", "--write=True"} {
		lines = append(lines, line{"kubevirt labels", agent.Mutation, []string{"--host-root", dir, "--agent", "always", "kubevirt", "labels", w}})
	}
	// Files the caller cannot read: never sent, never read by the agent for it.
	peek := []line{
		{"render", agent.Read, []string{"--host-root", dir, "--agent", "always", "render", "-h=false", secret}},
		{"kubevirt vm", agent.Read, []string{"--host-root", dir, "--agent", "always", "kubevirt", "vm", "-h=false", secret}},
		{"plan", agent.Read, append(append([]string{"--host-root", dir, "--agent", "always", "plan"}, c...), "--virt-type", "qemu", keyed)},
	}
	var argvs [][]string
	for _, l := range append(lines, peek...) {
		argvs = append(argvs, l.args)
	}
	for _, who := range []struct {
		name string
		cred *syscall.Credential
		may  func(agent.Class) bool
	}{
		{"non-member", &syscall.Credential{Uid: 65534, Gid: 65534}, func(c agent.Class) bool { return c == agent.Read }},
		{"member", &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{gid}}, func(c agent.Class) bool { return c != agent.RootMutation }},
		{"root", &syscall.Credential{Uid: 0, Gid: 0}, func(agent.Class) bool { return true }},
	} {
		got := runCLIAs(t, dir, who.cred, argvs)
		for i, l := range lines {
			r := got[i]
			if refused(r) == who.may(l.class) {
				t.Errorf("%s: %s (%s): exit %d, refused %v, want refused %v:\n%s%s", who.name, strings.Join(l.args[4:], " "), l.class, r.Code, refused(r), !who.may(l.class), r.Stdout, r.Stderr)
			}
			if strings.Contains(r.Stderr, "not sent to the agent") || strings.Contains(r.Stderr, "no agent answers") {
				t.Errorf("%s: %s did not reach the agent: %s", who.name, strings.Join(l.args, " "), r.Stderr)
			}
		}
		for j, l := range peek {
			r := got[len(lines)+j]
			if who.name == "root" {
				if l.op == "plan" && r.Code != 0 {
					t.Errorf("root: a plan whose key file root can read: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
				}
				continue
			}
			if r.Code == 0 || strings.Contains(r.Stdout+r.Stderr, "the secret") || strings.Contains(r.Stdout+r.Stderr, "KeyOfRootOnly") {
				t.Errorf("%s: %s: exit %d, a root-only file read for it:\n%s%s", who.name, strings.Join(l.args, " "), r.Code, r.Stdout, r.Stderr)
			}
		}
	}
	// The refused root-only change wrote nothing.
	if b, err := os.ReadFile(unit); err == nil && strings.Contains(string(b), "ExecStart="+evil) && !strings.Contains(logs.String(), `"uid":0`) {
		t.Errorf("a unit running %s was written by someone who is not root:\n%s", evil, b)
	}
	if !strings.Contains(logs.String(), `"msg":"refused"`) {
		t.Errorf("no refusal was logged:\n%s", logs.String())
	}
}

// hasFlag reports whether command op of the tree has flag name.
func hasFlag(op, name string) bool {
	c := newApp(testEnv())
	for _, n := range strings.Fields(op) {
		if c = c.Command(n); c == nil {
			return false
		}
	}
	for _, f := range c.Flags {
		if slices.Contains(f.Names(), name) {
			return true
		}
	}
	return false
}

// TestAgentOpensNoCallerPath: a request naming a key file the caller did not send is refused
// by the agent, which never opens it (it used to read it as root for anyone who could plan).
func TestAgentOpensNoCallerPath(t *testing.T) {
	t.Parallel()
	tr := agentHost(t)
	dir := tr.Dir()
	uri, _ := startAgent(t, dir)
	spec := deviceFreeVM(t, dir, "keyvm")
	key := filepath.Join(dir, "root.pub")
	os.WriteFile(key, []byte("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKeyOfRootOnly root@host\n"), 0o600)
	b, _ := os.ReadFile(spec)
	body := string(b) + "  cloudInit:\n    sshAuthorizedKeys: [" + key + "]\n"
	c := agentClient(t, dir)
	root, _ := host.NewRoot(dir)
	req := agent.ExecRequest{Command: "plan", Flags: jsonFlags("host-root", root.Dir(), "connect", uri, "virt-type", "qemu"),
		Operands: []string{"spec.yaml"}, Files: map[string]string{"spec.yaml": body}}
	res, err := c.Exec(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode == 0 || !strings.Contains(res.Stderr, "the agent opens no file a caller names") {
		t.Errorf("a key file not sent: exit %d\n%s%s", res.ExitCode, res.Stdout, res.Stderr)
	}
	// Sent by the caller, it is used.
	req.KeyFiles = map[string]string{key: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKeyOfRootOnly root@host\n"}
	if res, err = c.Exec(t.Context(), req); err != nil || res.ExitCode != 0 {
		t.Errorf("a key file sent: %v exit %d\n%s%s", err, res.ExitCode, res.Stdout, res.Stderr)
	}
}

// TestKeyFileFIFO: a FIFO named as a public key file in a spec is refused at once, naming it,
// in-process and through the agent (it used to hang plan and apply, and the agent's queue,
// waiting for a writer).
func TestKeyFileFIFO(t *testing.T) {
	t.Parallel()
	tr := agentHost(t)
	dir := tr.Dir()
	uri, _ := startAgent(t, dir)
	spec := deviceFreeVM(t, dir, "fifovm")
	fifo := filepath.Join(dir, "key.pub")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(spec)
	os.WriteFile(spec, []byte(string(b)+"  cloudInit:\n    sshAuthorizedKeys: ["+fifo+"]\n"), 0o644)
	for _, mode := range []string{agentNever, agentAlways} {
		done := make(chan struct{})
		var out, errw string
		var code int
		go func() {
			defer close(done)
			// Through the agent the CLI cannot read the key either, so it runs the plan itself.
			args := []string{"vgpu-host", "--agent", mode, "--host-root", dir, "plan", "--connect", uri, "--virt-type", "qemu", spec}
			app := newApp(testEnv())
			var o, e bytes.Buffer
			app.Writer, app.ErrWriter = &o, &e
			code = execute(app, args, &e)
			out, errw = o.String(), e.String()
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("--agent %s: plan with a FIFO as key file still running after 10 s", mode)
		}
		if code != exitUsage || !strings.Contains(errw, fifo) || !strings.Contains(errw, "named pipe") {
			t.Errorf("--agent %s: exit %d, want 2 naming the FIFO:\n%s%s", mode, code, out, errw)
		}
	}
}
