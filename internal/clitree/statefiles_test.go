package clitree

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/virt"
)

// stateFileUUID is the mdevctl definition the state-file tests put in place.
const stateFileUUID = "1b6c4a8e-1e4f-4b7a-9a43-5f2f3b1e9d10"

// stateFiles are vgpu-host's state and lock files under the host root, as the attacks of
// issue 26 named them.
var stateFiles = []string{
	"var/lib/vgpu-host/ledger.json",
	"var/lib/vgpu-host/ledger/claims.json",
	"var/lib/vgpu-host/ledger/vms/x.json",
	"var/lib/vgpu-host/vfio.json",
	"var/lib/vgpu-host/vgpu-instances.json",
	"etc/vgpu-host/sriov.json",
	"etc/mdevctl.d/mbochs/" + stateFileUUID,
	"var/lib/vgpu-host/ledger.lock",
	"var/lib/vgpu-host/vms/x.lock",
	"var/lib/vgpu-host/vfio.lock",
	"var/lib/vgpu-host/vgpu-instances.lock",
	"var/lib/vgpu-host/vgpu-create.lock",
	"var/lib/vgpu-host/mdevctl.lock",
	"etc/vgpu-host/sriov.lock",
	"var/lib/vgpu-host/quarantine/0000:01:00.0.json",
	"var/lib/vgpu-host/health/0000:01:00.0.json",
}

// stateCommands are the commands the tests drive over a damaged state or lock file.
var stateCommands = []struct {
	name string
	args func(spec, uri string) []string // uri: the test's fake libvirt, for the commands that use one
}{
	{"status", func(_, uri string) []string { return []string{"status", "--connect", uri} }},
	{"plan", func(spec, uri string) []string { return []string{"plan", "--connect", uri, spec} }},
	{"apply", func(spec, uri string) []string { return []string{"apply", "--connect", uri, spec} }},
	{"destroy", func(_, uri string) []string { return []string{"destroy", "--connect", uri, "x"} }},
	{"host restore", func(string, string) []string { return []string{"host", "restore"} }},
	{"vf enable --persist", func(string, string) []string {
		return []string{"vf", "enable", "0000:00:0a.0", "--count", "1", "--persist"}
	}},
	{"bind", func(string, string) []string { return []string{"bind", "0000:01:00.0"} }},
	{"mdev create", func(string, string) []string {
		return []string{"mdev", "create", "--parent", "mbochs", "--type", "small", "--name", "y"}
	}},
	{"mdev define", func(string, string) []string {
		return []string{"mdev", "define", "--parent", "mbochs", "--type", "mbochs-small", "9b6c4a8e-1e4f-4b7a-9a43-5f2f3b1e9d10"}
	}},
}

// stateTree is a fake host with VM x applied (a ledger, its lock), a persisted VF count, an
// mdev definition: every state file the tests replace exists or has existed. uri is its fake
// libvirt, file-backed and the test's own: the commands name it (--connect) instead of the
// environment naming it for them, so that the tests may run in parallel.
func stateTree(t *testing.T) (tr *hosttest.Tree, spec, uri string) {
	t.Helper()
	tr = hosttest.New(t)
	tr.Mbochs()
	tr.ConsumerGPU("0000:00:04.0", "0000:01:00.0", "")
	tr.SRIOVPF(hosttest.PCI{Addr: "0000:00:0a.0", Vendor: 0x1b36, Device: 0x0010, Class: 0x010802, Driver: "nvme"},
		hosttest.VFSpec{Total: 2, VFDevice: 0x0010, VFDriver: "nvme"}, 0)
	withKernel(t, tr)
	uri = virt.FileScheme + "://" + filepath.Join(t.TempDir(), "libvirt.json")
	spec = deviceFreeVM(t, t.TempDir(), "x")
	if out, err := runErr(t, "--host-root", tr.Dir(), "apply", "--connect", uri, spec); err != nil {
		t.Fatalf("apply x: %v\n%s", err, out)
	}
	tr.WriteFile("etc/vgpu-host/sriov.json", `{"version": 1, "pfs": []}`+"\n")
	tr.WriteFile("etc/mdevctl.d/mbochs/"+stateFileUUID, `{"mdev_type": "mbochs-small", "start": "manual", "attrs": []}`)
	return tr, spec, uri
}

// runBounded runs the CLI and fails the test when it does not return within limit (a FIFO
// opened for reading blocks until a writer comes: for ever).
func runBounded(t *testing.T, limit time.Duration, args ...string) (string, error) {
	t.Helper()
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := runErr(t, args...)
		done <- result{out, err}
	}()
	select {
	case r := <-done:
		return r.out, r.err
	case <-time.After(limit):
		t.Fatalf("%v did not return within %s (hangs)", args, limit)
		return "", nil
	}
}

// stateReaders says which commands read or lock each state file (and so must fail, naming
// it, when it is not a regular file); every other command must still return.
var stateReaders = map[string][]string{
	"var/lib/vgpu-host/ledger.json":         {"status", "plan", "apply", "destroy"},
	"var/lib/vgpu-host/ledger/claims.json":  {"status", "plan", "apply", "destroy"},
	"var/lib/vgpu-host/ledger/vms/x.json":   {"status", "plan", "apply", "destroy"},
	"var/lib/vgpu-host/vfio.json":           {"host restore", "bind"},
	"var/lib/vgpu-host/vgpu-instances.json": {"host restore", "mdev create"},
	"etc/vgpu-host/sriov.json":              {"host restore", "vf enable --persist"},
	"etc/mdevctl.d/mbochs/" + stateFileUUID: {"host restore", "mdev define"},
	"var/lib/vgpu-host/ledger.lock":         {"status", "plan", "apply", "destroy"},
	"var/lib/vgpu-host/vms/x.lock":          {"apply", "destroy"},
	"var/lib/vgpu-host/vfio.lock":           {"bind"},
	"var/lib/vgpu-host/vgpu-instances.lock": {"mdev create"},
	"var/lib/vgpu-host/vgpu-create.lock":    {"mdev create"},
	"var/lib/vgpu-host/mdevctl.lock":        {"mdev define"},
	"etc/vgpu-host/sriov.lock":              {"vf enable --persist"},
	// bind refuses a GPU whose quarantine record is not a regular file (exit 4, naming it);
	// its health file is only written, by rename over whatever is there.
	"var/lib/vgpu-host/quarantine/0000:01:00.0.json": {"bind"},
}

// TestStateFilesNotFollowedOrWaitedOn: a state or lock file that was a symlink to a file
// outside the fake host root was read as vgpu-host's own (a ledger linked to /etc/shadow) or
// truncated to the pid (ledger.lock, vms/NAME.lock, sriov.lock), and a FIFO in its place
// hung status, apply and host restore past any timeout, holding the ledger's lock. Now every
// command returns at once; each one that reads or locks the file fails naming it (exit 1, or
// 4 where a write's check that its path stays in the root comes first), and the file outside
// is unchanged. Command x file x kind.
func TestStateFilesNotFollowedOrWaitedOn(t *testing.T) {
	t.Parallel()
	for _, file := range stateFiles {
		for _, kind := range []string{"symlink", "fifo"} {
			for _, c := range stateCommands {
				t.Run(fmt.Sprintf("%s/%s/%s", file, kind, c.name), func(t *testing.T) {
					t.Parallel()
					tr, spec, uri := stateTree(t)
					outside := filepath.Join(t.TempDir(), "precious")
					if err := os.WriteFile(outside, []byte("{}\n"), 0o600); err != nil {
						t.Fatal(err)
					}
					p := tr.Root.Path(file)
					if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
						t.Fatal(err)
					}
					_ = os.Remove(p)
					var err error
					if kind == "symlink" {
						err = os.Symlink(outside, p)
					} else {
						err = syscall.Mkfifo(p, 0o644)
					}
					if err != nil {
						t.Fatal(err)
					}
					out, err := runBounded(t, 10*time.Second, append([]string{"--host-root", tr.Dir()}, c.args(spec, uri)...)...)
					if b, _ := os.ReadFile(outside); string(b) != "{}\n" {
						t.Errorf("the file outside the root that %s links to was written: %q", p, b)
					}
					if !slices.Contains(stateReaders[file], c.name) {
						return
					}
					code := exitCode(err)
					if (code != 1 && code != 4) || !strings.Contains(err.Error(), p) {
						t.Errorf("exit %d, want 1 with an error naming %s: %v\n%s", code, p, err, out)
					}
				})
			}
		}
	}
}

// TestHostRestoreReportsDefinitionDirectory: a directory named as an mdevctl definition
// (etc/mdevctl.d/PARENT/UUID) was skipped silently by host restore. It is a failed step
// naming the path; the good definition beside it is still restored.
func TestHostRestoreReportsDefinitionDirectory(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	tr.Mbochs()
	withKernel(t, tr)
	good := "9b6c4a8e-1e4f-4b7a-9a43-5f2f3b1e9d10"
	tr.WriteFile("etc/mdevctl.d/mbochs/"+good, `{"mdev_type": "mbochs-small", "start": "auto", "attrs": []}`)
	dir := tr.Root.Etc("mdevctl.d", "mbochs", stateFileUUID)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := runBounded(t, 10*time.Second, "--host-root", tr.Dir(), "-o", "json", "host", "restore")
	if exitCode(err) == 0 {
		t.Fatalf("restore with a directory for a definition exit 0:\n%s", out)
	}
	var steps []map[string]string
	if jerr := json.Unmarshal([]byte(out), &steps); jerr != nil {
		t.Fatalf("not JSON: %v\n%s", jerr, out)
	}
	failed, applied := "", 0
	for _, s := range steps {
		switch {
		case s["result"] == "failed" && s["target"] == dir:
			failed = s["error"]
		case s["result"] == "applied":
			applied++
		}
	}
	if !strings.Contains(failed, dir) || !strings.Contains(failed, "a directory") {
		t.Errorf("no failed step for %s saying it is a directory: %s", dir, out)
	}
	if applied != 1 {
		t.Errorf("%d steps applied, want the good definition: %s", applied, out)
	}
}
