package clitree

import (
	"encoding/json"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/lifecycle"
	"github.com/vgpu-host/vgpu-host/ops"
)

// TestMigrateCLITwoFakeHosts drives `vgpu-host migrate` between two processes' worth of hosts:
// two fake roots, each with its own ledger and file-backed libvirt, the target's vgpu-host run
// as a command (--target-cmd) that answers `migrate-target --request JSON`. It checks the dry
// run, a target that refuses (its ledger has the VM: exit 5, the source unchanged), the
// migration, and a second migration of a VM that is gone (exit 6).
func TestMigrateCLITwoFakeHosts(t *testing.T) {
	t.Parallel()
	bin := binary(t)
	dirA, dirB := hosttest.New(t).Root, hosttest.New(t).Root
	uriA, uriB := "vgpu-fake://"+dirA.Path("libvirt.json"), "vgpu-fake://"+dirB.Path("libvirt.json")
	name := "vgpuhost-test-migcli"
	spec := deviceFreeVM(t, dirA.Dir(), name)
	vh := func(root, uri string, args ...string) (string, string, int) {
		t.Helper()
		c := exec.Command(bin, append(append([]string{"--host-root", root, "--agent", "never"}, args...), "--connect", uri)...)
		var out, errb strings.Builder
		c.Stdout, c.Stderr = &out, &errb
		err := c.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return out.String(), errb.String(), code
	}
	if _, e, code := vh(dirA.Dir(), uriA, "apply", spec); code != 0 {
		t.Fatalf("apply on A: exit %d: %s", code, e)
	}
	// --connect is a flag of the command (migrate-target), which the source appends: the
	// target's libvirt comes from its environment.
	targetCmd := strings.Join([]string{"env", "VGPU_HOST_CONNECT=" + uriB, bin, "--host-root", dirB.Dir(), "--agent", "never"}, " ")
	migrate := func(extra ...string) (string, string, int) {
		return vh(dirA.Dir(), uriA, append([]string{"-o", "json", "migrate", name, "--to", uriB, "--target-cmd", targetCmd, "--shared-storage"}, extra...)...)
	}
	statusOf := func(root, uri string) string {
		out, e, code := vh(root, uri, "-o", "json", "status")
		if code != 0 {
			t.Fatalf("status: exit %d: %s", code, e)
		}
		return out
	}

	// Without --shared-storage or --copy-storage the VM's disk refuses it (exit 2), naming it.
	if _, e, code := vh(dirA.Dir(), uriA, "migrate", name, "--to", uriB, "--target-cmd", targetCmd); code != 2 || !strings.Contains(e, "--copy-storage") {
		t.Errorf("host disk: exit %d: %s", code, e)
	}
	// Dry run: both hosts' steps, nothing changed.
	out, e, code := migrate("--dry-run")
	if code != 0 {
		t.Fatalf("dry run: exit %d: %s", code, e)
	}
	var res lifecycle.MigrateResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !res.DryRun || len(res.SourceSteps) == 0 || len(res.TargetSteps) == 0 || !strings.Contains(strings.Join(res.SourceSteps, "\n"), "migrate domain "+name+" to "+uriB) {
		t.Errorf("dry run: %+v", res)
	}
	if strings.Contains(statusOf(dirB.Dir(), uriB), name) {
		t.Fatal("dry run changed the target")
	}
	// plan --migrate is the same dry run (the name for it), and plan's other use keeps
	// its flags apart.
	if pout, e, code := vh(dirA.Dir(), uriA, "-o", "json", "plan", "--migrate", name, "--to", uriB, "--target-cmd", targetCmd, "--shared-storage"); code != 0 || pout != out {
		t.Errorf("plan --migrate: exit %d: %s\n%s\nwant migrate --dry-run's\n%s", code, e, pout, out)
	}
	if _, e, code := vh(dirA.Dir(), uriA, "plan", "--to", uriB, spec); code != 2 || !strings.Contains(e, "--to goes with --migrate") {
		t.Errorf("plan --to without --migrate: exit %d: %s", code, e)
	}
	if _, e, code := vh(dirA.Dir(), uriA, "plan", "--migrate", name, spec); code != 2 || !strings.Contains(e, "takes no SPEC") {
		t.Errorf("plan --migrate with a SPEC: exit %d: %s", code, e)
	}

	// The target has a VM of that name in its ledger: busy (5), and the source keeps it.
	specB := deviceFreeVM(t, dirB.Dir(), name)
	if _, e, code := vh(dirB.Dir(), uriB, "apply", specB); code != 0 {
		t.Fatalf("apply on B: exit %d: %s", code, e)
	}
	if _, e, code := migrate(); code != 5 || !strings.Contains(e, "already") || strings.Count(e, "already") != 1 {
		t.Errorf("target busy: exit %d: %s", code, e)
	}
	if !strings.Contains(statusOf(dirA.Dir(), uriA), `"phase": "applied"`) {
		t.Fatalf("source changed: %s", statusOf(dirA.Dir(), uriA))
	}
	if _, e, code := vh(dirB.Dir(), uriB, "destroy", name); code != 0 {
		t.Fatalf("destroy on B: exit %d: %s", code, e)
	}

	// The migration.
	out, e, code = migrate()
	if code != 0 {
		t.Fatalf("migrate: exit %d: %s", code, e)
	}
	res = lifecycle.MigrateResult{}
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.DryRun || res.From != uriA || res.To != uriB || res.Devices == nil {
		t.Fatalf("%v: %s", err, out)
	}
	var sa, sb []lifecycle.VMStatus
	if err := json.Unmarshal([]byte(statusOf(dirA.Dir(), uriA)), &sa); err != nil || len(sa) != 0 {
		t.Errorf("A still lists %+v (%v)", sa, err)
	}
	if err := json.Unmarshal([]byte(statusOf(dirB.Dir(), uriB)), &sb); err != nil || len(sb) != 1 || sb[0].Name != name || sb[0].Phase != "applied" || sb[0].State != "running" {
		t.Errorf("B lists %+v (%v)", sb, err)
	}
	// Gone from A now: not found (6).
	if _, e, code := migrate(); code != 6 {
		t.Errorf("second migration: exit %d: %s", code, e)
	}
	// migrate-target refuses a malformed request as bad input (2).
	if _, e, code := vh(dirB.Dir(), uriB, "migrate-target", "--request", `{"op":"prepare","vm":"x","extra":1}`); code != 2 || !strings.Contains(e, "extra") {
		t.Errorf("malformed request: exit %d: %s", code, e)
	}
	if _, err := os.Stat(filepath.Join(dirB.Dir(), "var")); err != nil {
		t.Errorf("B has no state dir: %v", err)
	}
}

// TestMigrateTargetCommand: how the target's vgpu-host is reached from --to.
func TestMigrateTargetCommand(t *testing.T) {
	t.Parallel()
	for uri, want := range map[string]string{
		"qemu+ssh://gpu-b/system":            "ssh -- gpu-b vgpu-host",
		"qemu+ssh://root@gpu-b:2222/system":  "ssh -p 2222 -- root@gpu-b vgpu-host",
		"qemu+ssh://-oProxyCommand=x/system": "",
		"qemu+unix:///system?socket=/s":      "",
		"qemu:///system":                     "",
	} {
		u, err := url.Parse(uri)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(ops.SSHWords(u), " "); got != want {
			t.Errorf("%s: %q, want %q", uri, got, want)
		}
	}
	// A local target needs --target-cmd: usage (2), before anything is read.
	if _, code := runCLI(t, "migrate", "vm1", "--to", "qemu:///system"); code != exitUsage {
		t.Errorf("local --to without --target-cmd: exit %d", code)
	}
	if got := shellWord(`{"vm":"it's"}`); got != `'{"vm":"it'\''s"}'` {
		t.Errorf("shellWord: %s", got)
	}
}
