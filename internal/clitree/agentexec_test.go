package clitree

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"slices"
	"testing"

	"github.com/vgpu-host/vgpu-host/agent"
	"github.com/vgpu-host/vgpu-host/agent/agentapi"
)

// TestCommandLineCommands: every command the agent runs has an operation (issue 28: the agent
// runs no command line any more, and a new command must not bring one back), and every
// operation-backed command is one the agent runs.
func TestCommandLineCommands(t *testing.T) {
	t.Parallel()
	rules := agentRules.Get()
	opCmds := map[string]bool{}
	for _, name := range opCommandNames {
		if _, ok := opCommandNamed(name); !ok || opCmds[name] {
			t.Errorf("opCommandNames lists %s, which opCommandNamed does not build or which it lists twice", name)
		}
		opCmds[name] = true
	}
	for _, name := range slices.Sorted(maps.Keys(rules)) {
		_, op := opCommandNamed(name)
		if op && !opCmds[name] {
			t.Errorf("opCommandNamed builds %s, which opCommandNames does not list", name)
		}
		if !op {
			t.Errorf("%s has no operation: give it one (package ops) and an opCommandNamed entry; the agent runs no command line", name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(opCmds)) {
		if _, ok := rules[name]; !ok {
			t.Errorf("%s has an operation but no agent rule", name)
		}
	}
}

// TestAgentExecRunsOperations: POST /v1/exec runs every command as its operation (the runner
// counts none without one) and answers what the CLI prints, plan --migrate too
// (TestInstallUnitAndMigrateTargetThroughAgent: the last two commands given one).
func TestAgentExecRunsOperations(t *testing.T) {
	t.Parallel()
	tr := agentHost(t)
	dir := tr.Dir()
	var cr *cliRunner
	startAgentWith(t, dir, func(s *agent.Server) { cr = s.Runner.(*cliRunner) })
	c := agentClient(t, dir)
	spec := deviceFreeVM(t, dir, "ops")
	for _, args := range [][]string{
		{"inspect"},
		{"-o", "json", "inspect", "0000:01:00.0"},
		{"inspect", "a", "b"},
		{"bind", "--dry-run", "0000:01:00.0"},
		{"-o", "yaml", "vf", "enable", "--count", "2", "--dry-run", "0000:00:0a.0"},
		{"mdev", "create", "--parent", "mbochs", "--type", "small", "--count", "2", "--name", "vm9", "--dry-run"},
		{"host", "restore", "--dry-run"},
		{"mdev", "types"},
		{"-o", "json", "mdev", "list"},
		{"mdev", "place", "--type", "small", "--count", "2"},
		{"mdev", "define", "--parent", "mbochs", "--type", "small", "--dry-run"},
		{"mdev", "undefine", "--dry-run"},
		{"vf", "list"},
		{"host", "health"},
		{"host", "health", "a", "b"},
		{"host", "layout", "show"},
		{"mig", "show"},
		{"-o", "json", "mig", "plan", "--gpu", "0000:01:00.0", "--profiles", "1g.10gb"},
		{"mig", "apply", "--gpu", "0000:01:00.0", "--profiles", "", "--dry-run"},
		{"verify"},
		{"mdev", "define", "--parent", "mbochs", "--type", "small", "--dry-run", "9794f498-f859-59a6-9e2f-84991849c7b4"},
		{"-o", "json", "mdev", "undefine", "--dry-run", "9794f498-f859-59a6-9e2f-84991849c7b4"},
		{"attach", "--gpu", "0000:01:00.0", "--force", "no-such-check", "vm1"},
		{"detach"},
		{"render", "--offline", spec},
		{"render", spec},
		{"-o", "json", "render", spec},
		{"render", spec, spec},
		{"kubevirt", "config"},
		{"kubevirt", "labels", "-o", "json"},
		{"kubevirt", "vm", spec},
		{"kubevirt", "vm", "--container-disk", "bad", spec},
		{"image", "export"},
		{"image", "export", "-o", "./vm1.qcow2", "vm1"},
		{"image", "export", "-o", "xml", "vm1"},
		{"host", "release-quarantine"},
		{"host", "release-quarantine", "01:00.0.9"},
		{"host", "release-quarantine", "0000:01:00.0"},
		{"migrate", "--to", "qemu+ssh://target/system"},
		{"migrate", "--to", "qemu+ssh://target/system", "--migrate-uri", "udp://x", "vm1"},
		{"plan", "--migrate", "vm1"},
		{"plan", "--migrate", "vm1", spec},
		{"plan", "--migrate", "vm1", "--to", "qemu+ssh://target/system", "--migrate-uri", "udp://x"},
		{"migrate-target", "--request", `{"op":"prepare","vm":"x","extra":1}`},
		{"host", "install-unit", "--dry-run", "--exec", "/usr/local/bin/vgpu-host"},
	} {
		in, inErr, inCode := runVia(t, agentNever, append([]string{"--host-root", dir}, args...)...)
		out, outErr, outCode := runVia(t, agentAlways, append([]string{"--host-root", dir}, args...)...)
		if os.Getenv("AGENT_TEST_DEBUG") != "" {
			t.Logf("%v: exit %d\n%s%s", args, inCode, in, inErr)
		}
		if in != out || inErr != outErr || inCode != outCode {
			t.Errorf("%v: through the agent exit %d:\n%s%s\nin-process exit %d:\n%s%s", args, outCode, out, outErr, inCode, in, inErr)
		}
	}
	res, err := c.Exec(context.Background(), agentapi.ExecRequest{Command: "migrate-target", Flags: map[string]json.RawMessage{"host-root": json.RawMessage(`"` + dir + `"`)}})
	if err != nil || res.ExitCode != exitUsage {
		t.Fatalf("migrate-target without a request: %v %+v", err, res)
	}
	if n := cr.unserved.Load(); n != 0 {
		t.Errorf("the agent got %d request(s) for a command without an operation (once run as a command line); want none", n)
	}
}
