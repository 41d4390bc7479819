package clitree

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/internal/testenv"
	"github.com/vgpu-host/vgpu-host/lifecycle"
)

// TestMigrateCLILibvirtd runs `vgpu-host migrate` between two real libvirtds on this machine
// (each in a mount namespace of its own, with its own host_uuid; two vgpu-host roots): a
// running TCG domain moves A to B through the pure-Go libvirt client (one
// virDomainMigratePerform3Params call), and back B to A through the libvirt helper
// (VGPU_HOST_LIBVIRT_DIRECT=0: virDomainMigrateToURI3 in vgpu-host-libvirt); after each the
// target's status lists it running and applied, and the source's lists nothing.
func TestMigrateCLILibvirtd(t *testing.T) {
	base := t.TempDir()
	for d := base; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		_ = os.Chmod(d, 0o755)
	}
	pa := testenv.StartPrivateLibvirtd(t, filepath.Join(base, "a"), "5ee1c0de-0000-4000-8000-0000000000ca", 49440)
	pb := testenv.StartPrivateLibvirtd(t, filepath.Join(base, "b"), "5ee1c0de-0000-4000-8000-0000000000cb", 49540)
	bin := binary(t)
	ra, rb := hosttest.New(t).Root, hosttest.New(t).Root
	name := "vgpuhost-test-migrate-cli"
	// No disk: the guest spins in SeaBIOS, which is running enough for a live migration.
	spec := filepath.Join(base, "vm.yaml")
	if err := os.WriteFile(spec, []byte("apiVersion: vgpu-host/v1\nkind: VirtualMachine\nmetadata:\n  name: "+name+
		"\nspec:\n  vcpus: 1\n  memory: 128MiB\n  firmware: bios\n  network:\n    type: none\n  graphics:\n    type: none\n  gpus:\n    - virtioGpu: {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	vh := func(env []string, root, uri string, args ...string) (string, string, int) {
		t.Helper()
		c := exec.Command(bin, append(append([]string{"--host-root", root, "--agent", "never"}, args...), "--connect", uri)...)
		c.Env = append(os.Environ(), env...)
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
	runsOn := func(root, uri string) []lifecycle.VMStatus {
		t.Helper()
		out, e, code := vh(nil, root, uri, "-o", "json", "status")
		var st []lifecycle.VMStatus
		if err := json.Unmarshal([]byte(out), &st); err != nil || code != 0 {
			t.Fatalf("status: exit %d, %v: %s%s", code, err, out, e)
		}
		return st
	}
	if _, e, code := vh(nil, ra.Dir(), pa.URI, "apply", "--virt-type", "qemu", spec); code != 0 {
		t.Fatalf("apply on A: exit %d: %s", code, e)
	}
	for _, leg := range []struct {
		what             string
		env              []string
		from, to         string
		rootFrom, rootTo string
	}{
		{"A to B, pure-Go client", nil, pa.URI, pb.URI, ra.Dir(), rb.Dir()},
		{"B to A, libvirt helper", []string{"VGPU_HOST_LIBVIRT_DIRECT=0"}, pb.URI, pa.URI, rb.Dir(), ra.Dir()},
	} {
		target := strings.Join([]string{"env", "VGPU_HOST_CONNECT=" + leg.to, bin, "--host-root", leg.rootTo, "--agent", "never"}, " ")
		out, e, code := vh(leg.env, leg.rootFrom, leg.from, "-o", "json", "migrate", name, "--to", leg.to, "--migrate-uri", "tcp://127.0.0.1", "--target-cmd", target)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s%s", leg.what, code, out, e)
		}
		if st := runsOn(leg.rootFrom, leg.from); len(st) != 0 {
			t.Errorf("%s: the source still lists %+v", leg.what, st)
		}
		if st := runsOn(leg.rootTo, leg.to); len(st) != 1 || st[0].Name != name || st[0].State != "running" || st[0].Phase != "applied" {
			t.Errorf("%s: the target lists %+v", leg.what, st)
		}
	}
	if _, e, code := vh(nil, ra.Dir(), pa.URI, "destroy", name); code != 0 {
		t.Fatalf("destroy on A: exit %d: %s", code, e)
	}
}
