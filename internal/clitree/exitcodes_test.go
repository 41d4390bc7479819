package clitree

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/lifecycle"
)

// A damaged journal entry is damaged state (exit 1, docs/security.md), although the decode
// error inside wraps host.ErrInvalid, which alone is a bad spec or flag (exit 2).
func TestDamagedJournalExits1(t *testing.T) {
	t.Parallel()
	decode := fmt.Errorf("journal step create-mdev u: index \"x\": %w", host.ErrInvalid)
	err := fmt.Errorf("destroy vm: undo step 3 of vm: %w: %w", decode, lifecycle.ErrDamagedJournal)
	if c := exitCode(err); c != exitFailure {
		t.Fatalf("exit %d, want %d", c, exitFailure)
	}
	if c := exitCode(decode); c != exitUsage {
		t.Fatalf("a bad step in a plan given as input: exit %d, want %d", c, exitUsage)
	}
}

// TestUnknownCommandOrFlagExits2: an unknown subcommand exited 3 (the code `check` uses for
// "host not ready") and an unknown flag printed the whole help. Both now exit 2 with one line
// and a did-you-mean when a name is close, at every level of the command tree.
func TestUnknownCommandOrFlagExits2(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"inspekt"}, `unknown command "inspekt" for "vgpu-host"; did you mean "inspect"?`},
		{[]string{"mdev", "creat"}, `unknown command "creat" for "vgpu-host mdev"; did you mean "create"?`},
		{[]string{"host", "restroe"}, `did you mean "restore"?`},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"inspect", "--outptu", "json"}, `unknown flag --outptu for "vgpu-host inspect"; did you mean --output?`},
		{[]string{"--hots-root", "/", "inspect"}, `did you mean --host-root?`},
		{[]string{"vf", "enable", "0000:00:01.0", "--cont", "2"}, `did you mean --count?`},
		// The completion command the cli makes as it sets up (it said "No help topic for 'bsh'").
		{[]string{"completion", "bsh"}, `unknown command "bsh" for "vgpu-host completion"; did you mean "bash"?`},
		{[]string{"completion", "tcsh"}, `unknown command "tcsh" for "vgpu-host completion"`},
		// A bad --agent is worded as every other usage error (it lacked "usage:").
		{[]string{"--agent", "sometimes", "inspect"}, `vgpu-host: usage: --agent "sometimes": use auto, always or never`},
	} {
		var stderr bytes.Buffer
		app := newApp(testEnv())
		app.Writer, app.ErrWriter = &bytes.Buffer{}, &stderr
		code := execute(app, append([]string{"vgpu-host"}, c.args...), &stderr)
		if code != exitUsage || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%v: exit %d, want 2 saying %q:\n%s", c.args, code, c.want, stderr.String())
		}
		if n := strings.Count(strings.TrimSpace(stderr.String()), "\n"); n != 0 {
			t.Errorf("%v: %d lines on stderr, want one:\n%s", c.args, n+1, stderr.String())
		}
	}
	if strings.Contains(didYouMean("frobnicate", []string{"inspect", "check", "bind"}), "i") {
		t.Error("a far name was suggested")
	}
}

// TestPanicExitsOneWithBugReport: a panic exited 2 (Go's runtime code, which the README gives
// to usage errors). main recovers it, prints one line that says it is a bug, and exits 1.
func TestPanicExitsOneWithBugReport(t *testing.T) {
	t.Parallel()
	app := newApp(testEnv())
	app.Commands = append(app.Commands, &cli.Command{Name: "boom", Action: func(context.Context, *cli.Command) error {
		var vms map[string]*struct{ Name string }
		return errors.New(vms["x"].Name) // the nil-pointer panic of a null ledger entry
	}})
	var stderr bytes.Buffer
	code := execute(app, []string{"vgpu-host", "boom"}, &stderr)
	out := strings.TrimSpace(stderr.String())
	if code != exitFailure || !strings.Contains(out, "internal error (a bug") || !strings.Contains(out, "nil pointer") || strings.Contains(out, "\n") {
		t.Fatalf("exit %d, want 1 and one bug-report line:\n%s", code, out)
	}
	if !strings.Contains(out, "exitcodes_test.go") {
		t.Errorf("the line does not say where it panicked: %s", out)
	}
}

// TestCrashHookOnlyInCrashtestBuilds: VGPU_HOST_CRASH_AT_STEP was live in the release binary.
// A release build now ignores it (apply runs to the end); the crashtest build the crash tests
// use still stops at the step (exit 137). Both run apply on libvirt's test driver.
func TestCrashHookOnlyInCrashtestBuilds(t *testing.T) {
	t.Parallel()
	crash := binary(t) // -tags crashtest, and the helper beside it
	release := releaseBinary(t)
	for bin, want := range map[string]int{release: 0, crash: 137} {
		dir := t.TempDir()
		spec := deviceFreeVM(t, dir, "crashhook")
		cmd := exec.Command(bin, "--host-root", dir, "apply", "--connect", "test:///default", "--virt-type", "qemu", spec)
		cmd.Env = append(os.Environ(), envCrashAt+"=1")
		out, err := cmd.CombinedOutput()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != want {
			t.Errorf("%s with %s=1: exit %d, want %d:\n%s", bin, envCrashAt, code, want, out)
		}
	}
	// The same checks through the built binary: an unknown command exits 2.
	out, err := exec.Command(release, "inspekt").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), `did you mean "inspect"`) {
		t.Errorf("release binary, unknown command: %v\n%s", err, out)
	}
}
