package clitree

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"testing"

	"github.com/vgpu-host/vgpu-host/agent"
	"github.com/vgpu-host/vgpu-host/agent/agentapi"
)

// stillCommandLine are the commands the agent still runs as a command line (runCommandLine,
// on the command tree) because they have no operation in package ops yet, and plan, whose
// --migrate has none. Issue 28: this list may only shrink; a command given an operation
// leaves it (TestCommandLineCommands says so).
var stillCommandLine = []string{
	"host install-unit", "host release-quarantine", "image export", "kubevirt config", "kubevirt labels",
	"kubevirt vm", "migrate", "migrate-target", "render",
}

// TestCommandLineCommands: every command the agent runs has an operation or is in
// stillCommandLine, not both; every operation-backed command is one the agent runs, and its
// request names it (the class is decided on the request by the command's rule).
func TestCommandLineCommands(t *testing.T) {
	rules, opCmds := agentRules.Get(), opCommands.Get()
	for _, name := range slices.Sorted(maps.Keys(rules)) {
		_, op := opCmds[name]
		listed := slices.Contains(stillCommandLine, name)
		switch {
		case !op && !listed:
			t.Errorf("%s runs as a command line in the agent: give it an operation (package ops) and an opCommands entry; the list of commands that do not may only shrink", name)
		case op && listed:
			t.Errorf("%s has an operation now: remove it from stillCommandLine", name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(opCmds)) {
		if _, ok := rules[name]; !ok {
			t.Errorf("%s has an operation but no agent rule", name)
		}
	}
	for _, name := range stillCommandLine {
		if _, ok := rules[name]; !ok {
			t.Errorf("stillCommandLine lists %s, which the agent does not run", name)
		}
	}
}

// TestAgentExecRunsOperations: POST /v1/exec runs an operation-backed command with no command
// line (the runner's command-line count stays 0) and answers what the CLI prints; plan
// --migrate, which has no operation, and a command without one still take the command line.
func TestAgentExecRunsOperations(t *testing.T) {
	tr := agentHost(t)
	dir := tr.Dir()
	var cr *cliRunner
	startAgentWith(t, dir, func(s *agent.Server) { cr = s.Runner.(*cliRunner) })
	c := agentClient(t, dir)
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
		{"attach", "--force", "no-such-check", "vm1"},
		{"detach"},
	} {
		in, inErr, inCode := runVia(t, agentNever, append([]string{"--host-root", dir}, args...)...)
		out, outErr, outCode := runVia(t, agentAlways, append([]string{"--host-root", dir}, args...)...)
		if in != out || inErr != outErr || inCode != outCode {
			t.Errorf("%v: through the agent exit %d:\n%s%s\nin-process exit %d:\n%s%s", args, outCode, out, outErr, inCode, in, inErr)
		}
	}
	if n := cr.commandLines.Load(); n != 0 {
		t.Errorf("the agent ran %d operation-backed request(s) as a command line; want none", n)
	}
	res, err := c.Exec(context.Background(), agentapi.ExecRequest{Command: "render", Flags: map[string]json.RawMessage{"host-root": json.RawMessage(`"` + dir + `"`)}})
	if err != nil || res.ExitCode == 0 {
		t.Fatalf("render without a spec: %v %+v", err, res)
	}
	if n := cr.commandLines.Load(); n != 1 {
		t.Errorf("render (no operation yet) ran %d command lines; want 1", n)
	}
}
