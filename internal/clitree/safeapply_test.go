package clitree

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/internal/testenv"
	"github.com/vgpu-host/vgpu-host/lifecycle"
	"github.com/vgpu-host/vgpu-host/virt"
)

// bootVGASpec writes a spec passing through the GPU at 0000:01:00.0.
func bootVGASpec(t *testing.T, name string) string {
	t.Helper()
	s := "apiVersion: vgpu-host/v1\nkind: VirtualMachine\nmetadata:\n  name: " + name +
		"\nspec:\n  vcpus: 1\n  memory: 256MiB\n  firmware: bios\n  graphics:\n    type: vnc\n  network:\n    type: none\n" +
		"  gpus:\n    - passthrough:\n        address: \"0000:01:00.0\"\n"
	p := filepath.Join(t.TempDir(), name+".yaml")
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestBootVGAPlannedRefusedForcedByName: on a fake tree whose GPU is the boot VGA, plan shows
// the refusal (table and JSON) and exits 4 as apply would; apply exits 4 and changes nothing;
// --force=held does not go past it; --force=boot-vga does, binding the group and defining the
// domain with managed='no'; destroy gives every function its driver back.
func TestBootVGAPlannedRefusedForcedByName(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	tr.ConsumerGPU("0000:00:01.0", "0000:01:00.0", "nvidia")
	tr.WriteFile("sys/bus/pci/devices/0000:01:00.0/boot_vga", "1\n")
	k := withKernel(t, tr)
	uri := virt.FileScheme + "://" + filepath.Join(t.TempDir(), "libvirt.json")
	spec := bootVGASpec(t, "vgpuhost-test-vga")
	g := []string{"--host-root", tr.Dir()}

	out, code := runCLI(t, append(g, "plan", "--connect", uri, "--virt-type", "qemu", spec)...)
	if code != 4 || !strings.Contains(out, "REFUSED [boot-vga] 0000:01:00.0: is the boot VGA") || !strings.Contains(out, "bind the IOMMU group of 0000:01:00.0") {
		t.Fatalf("plan table: exit %d\n%s", code, out)
	}
	out, code = runCLI(t, append(g, "-o", "json", "plan", "--connect", uri, "--virt-type", "qemu", spec)...)
	var plans []*lifecycle.VMPlan
	if code != 4 || json.Unmarshal([]byte(out), &plans) != nil || len(plans[0].Refusals) != 1 ||
		plans[0].Refusals[0].Check != "boot-vga" || plans[0].Refusals[0].Address.String() != "0000:01:00.0" {
		t.Fatalf("plan JSON: exit %d\n%s", code, out)
	}

	for _, force := range [][]string{nil, {"--force=held"}} {
		args := append(append(g, "apply", "--connect", uri, "--virt-type", "qemu", "--no-start"), force...)
		if _, code := runCLI(t, append(args, spec)...); code != 4 {
			t.Fatalf("apply %v: exit %d, want 4", force, code)
		}
	}
	if w := k.Writes(); len(w) != 0 {
		t.Fatalf("refused applies wrote %v", w)
	}
	if _, code := runCLI(t, append(g, "apply", "--connect", uri, "--virt-type", "qemu", "--no-start", "--force", spec)...); code != 2 {
		t.Fatalf("apply --force with no check named: exit %d, want 2", code)
	}

	out, code = runCLI(t, append(g, "-o", "json", "apply", "--connect", uri, "--virt-type", "qemu", "--no-start", "--force=boot-vga", spec)...)
	if code != 0 || tr.Driver(host.MustParseAddress("0000:01:00.0")) != "vfio-pci" || tr.Driver(host.MustParseAddress("0000:01:00.1")) != "vfio-pci" {
		t.Fatalf("apply --force=boot-vga: exit %d\n%s", code, out)
	}
	conn, _ := virt.OpenFile(uri)
	x, err := conn.DomainXML(t.Context(), "vgpuhost-test-vga")
	if err != nil || !strings.Contains(x, `managed="no"`) || strings.Contains(x, `managed="yes"`) {
		t.Fatalf("defined domain (%v):\n%s", err, x)
	}
	if out, code := runCLI(t, append(g, "destroy", "--connect", uri, "vgpuhost-test-vga")...); code != 0 {
		t.Fatalf("destroy: exit %d\n%s", code, out)
	}
	if tr.Driver(host.MustParseAddress("0000:01:00.0")) != "nvidia" || tr.Driver(host.MustParseAddress("0000:01:00.1")) != "snd_hda_intel" {
		t.Fatal("destroy did not restore the group's drivers")
	}
}

// TestFakeRootNeedsExplicitConnect: under a --host-root that is not this machine's root, the
// lifecycle commands refuse (exit 2) to use the default qemu:///system; an empty --host-root is
// an error, not the real root.
func TestFakeRootNeedsExplicitConnect(t *testing.T) {
	tr := hosttest.New(t)
	t.Setenv("VGPU_HOST_CONNECT", "")
	os.Unsetenv("VGPU_HOST_CONNECT")
	t.Setenv("LIBVIRT_DEFAULT_URI", "")
	os.Unsetenv("LIBVIRT_DEFAULT_URI")
	spec := bootVGASpec(t, "vgpuhost-test-fakeroot")
	for _, args := range [][]string{{"plan", spec}, {"apply", spec}, {"destroy", "x"}, {"status"}} {
		out, errs, code := runAll(t, append([]string{"--host-root", tr.Dir()}, args...)...)
		if code != 2 || !strings.Contains(errs, "--connect") || out != "" {
			t.Errorf("%s under a fake root: exit %d, stdout %q, stderr %q", args[0], code, out, errs)
		}
	}
	if _, errs, code := runAll(t, "--host-root", "", "inspect"); code != 2 || !strings.Contains(errs, "--host-root is empty") {
		t.Errorf("--host-root \"\": exit %d: %s", code, errs)
	}
}

// TestFakeRootNeverDefinesOnRealLibvirtd: on the real libvirtd, apply under a fake root
// without --connect exits 2 and defines nothing there.
func TestFakeRootNeverDefinesOnRealLibvirtd(t *testing.T) {
	uri := testenv.Libvirtd(t)
	tr := hosttest.New(t)
	os.Unsetenv("VGPU_HOST_CONNECT")
	os.Unsetenv("LIBVIRT_DEFAULT_URI")
	name := "vgpuhost-test-nodefine"
	t.Cleanup(func() { virsh(uri, "undefine", name) })
	s := strings.Replace(string(mustRead(t, bootVGASpec(t, name))), "  gpus:\n    - passthrough:\n        address: \"0000:01:00.0\"\n", "", 1)
	spec := filepath.Join(t.TempDir(), name+".yaml")
	if err := os.WriteFile(spec, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, code := runAll(t, "--host-root", tr.Dir(), "apply", "--no-start", spec); code != 2 {
		t.Fatalf("apply under a fake root without --connect: exit %d, want 2", code)
	}
	if _, err := virsh(uri, "dominfo", name); err == nil {
		t.Fatal("the domain was defined on the real libvirtd")
	}
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
