package clitree

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/internal/testenv"
	"github.com/vgpu-host/vgpu-host/ledger"
	"github.com/vgpu-host/vgpu-host/lifecycle"
	"github.com/vgpu-host/vgpu-host/virt/remote"
)

// run runs the CLI in-process and returns stdout and the exit code.
func runCLI(t *testing.T, args ...string) (string, int) {
	t.Helper()
	var out, errw bytes.Buffer
	err := runInTest(t, args, &out, &errw)
	if err != nil {
		t.Logf("vgpu-host %s: %v\n%s", strings.Join(args, " "), err, errw.String())
	}
	return out.String(), exitCode(err)
}

// world makes a fake host root (no GPU) that libvirt's QEMU can traverse, a base image, and
// a copy of examples/virtio-gpu-fallback.yaml named name with a qcow2 overlay over the base
// image and a cloud-init seed instead of its blank disk.
func world(t *testing.T, uri, name string) (root host.Root, specPath string) {
	t.Helper()
	forgetStaleDomain(uri, name)
	tree := hosttest.New(t)
	root = tree.Root
	for d := root.Dir(); d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		_ = os.Chmod(d, 0o755) // QEMU opens the overlay and seed under the root
	}
	base := root.Path("base.qcow2")
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", base, "64M").CombinedOutput(); err != nil {
		t.Fatalf("qemu-img: %v: %s", err, out)
	}
	ex, err := os.ReadFile(filepath.Join("..", "..", "examples", "virtio-gpu-fallback.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(ex), "name: vgpu-fallback", "name: "+name, 1)
	s = strings.Replace(s, "path: /var/lib/libvirt/images/vgpu-fallback.qcow2", "image: "+base+"\n      size: 128MiB", 1)
	s += "  cloudInit:\n    userData: |\n      #cloud-config\n      runcmd: [poweroff]\n"
	specPath = root.Path(name + ".yaml")
	if err := os.WriteFile(specPath, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	pool := lifecycle.PoolName(root)
	t.Cleanup(func() {
		virsh(uri, "destroy", name)
		virsh(uri, "undefine", name, "--nvram")
		virsh(uri, "pool-destroy", pool)
		virsh(uri, "pool-undefine", pool)
	})
	return root, specPath
}

// forgetStaleDomain removes a domain of this name that an earlier, killed test run left on the
// real libvirtd (the tests own the vgpuhost-test- prefix), so that run's leftovers do not fail
// this one. Its storage is left alone: it was under that run's temporary directory.
func forgetStaleDomain(uri, name string) {
	if !strings.HasPrefix(name, "vgpuhost-test-") {
		panic("forgetStaleDomain: not a test domain: " + name)
	}
	if _, err := virsh(uri, "dominfo", name); err != nil {
		return
	}
	virsh(uri, "destroy", name)
	virsh(uri, "undefine", name, "--nvram")
}

func virsh(uri string, args ...string) (string, error) {
	out, err := exec.Command("virsh", append([]string{"-c", uri}, args...)...).CombinedOutput()
	return string(out), err
}

// assertClean checks that name left no domain, no volume file and no ledger entry.
func assertClean(t *testing.T, uri string, root host.Root, name string) {
	t.Helper()
	if out, err := virsh(uri, "dominfo", name); err == nil {
		t.Errorf("domain %s still exists:\n%s", name, out)
	}
	files, _ := filepath.Glob(filepath.Join(root.StateDir("images"), name+"-*"))
	if len(files) > 0 {
		t.Errorf("volumes left: %v", files)
	}
	b, err := ledger.Open(root).Read()
	if err != nil {
		t.Fatal(err)
	}
	if b.Len() != 0 {
		t.Errorf("ledger not empty: %+v", b.Names())
	}
}

// TestApplyFallbackLibvirtd is the main job against a real libvirtd: apply the virtio-gpu
// fallback example under TCG, re-apply, verify over QMP, destroy.
func TestApplyFallbackLibvirtd(t *testing.T) {
	uri := testenv.Libvirtd(t)
	binary(t) // the libvirt helper
	name := "vgpuhost-test-apply"
	root, spec := world(t, uri, name)
	g := []string{"--host-root", root.Dir()}

	out, code := runCLI(t, append(g, "-o", "json", "plan", "--connect", uri, "--virt-type", "qemu", spec)...)
	if code != 0 || !strings.Contains(out, `"action": "create-overlay"`) || !strings.Contains(out, `"action": "write-seed"`) {
		t.Fatalf("plan exit %d:\n%s", code, out)
	}
	if _, err := virsh(uri, "dominfo", name); err == nil {
		t.Fatal("plan defined the domain")
	}

	out, code = runCLI(t, append(g, "-o", "json", "apply", "--connect", uri, "--virt-type", "qemu", spec)...)
	if code != 0 {
		t.Fatalf("apply exit %d:\n%s", code, out)
	}
	var res []lifecycle.VMApplyResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || !res[0].Changed || res[0].State != "running" || len(res[0].Fallback) != 1 {
		t.Fatalf("apply result: %+v", res)
	}
	x, _ := virsh(uri, "dumpxml", name)
	if !strings.Contains(x, "<model type='virtio'") || !strings.Contains(x, "<domain type='qemu'") || !strings.Contains(x, "cidata.iso") {
		t.Fatalf("domain is not a qemu domain with a virtio GPU and a seed:\n%s", x)
	}
	overlay := filepath.Join(root.StateDir("images"), name+"-root.qcow2")
	if info, err := exec.Command("qemu-img", "info", "-U", overlay).CombinedOutput(); err != nil || !strings.Contains(string(info), "backing file: "+root.Path("base.qcow2")) {
		t.Fatalf("overlay: %v\n%s", err, info)
	}
	if info, err := exec.Command("isoinfo", "-d", "-i", filepath.Join(root.StateDir("images"), name+"-cidata.iso")).CombinedOutput(); err != nil || !strings.Contains(string(info), "Volume id: cidata") {
		t.Fatalf("seed: %v\n%s", err, info)
	}

	out, code = runCLI(t, append(g, "apply", "--connect", uri, "--virt-type", "qemu", spec)...)
	if code != 0 || !strings.Contains(out, name+": unchanged, running") || !strings.Contains(out, "FALLBACK") {
		t.Fatalf("re-apply exit %d:\n%s", code, out)
	}

	out, code = runCLI(t, append(g, "-o", "json", "verify", "--connect", uri, name)...)
	if code != 0 || !strings.Contains(out, `"ok": true`) || !strings.Contains(out, "1af4:1050") {
		t.Fatalf("verify exit %d:\n%s", code, out)
	}
	out, code = runCLI(t, append(g, "status", "--connect", uri)...)
	if code != 0 || !strings.Contains(out, name) || !strings.Contains(out, "running") {
		t.Fatalf("status exit %d:\n%s", code, out)
	}

	out, code = runCLI(t, append(g, "destroy", "--connect", uri, spec)...)
	if code != 0 {
		t.Fatalf("destroy exit %d:\n%s", code, out)
	}
	assertClean(t, uri, root, name)
	if _, code = runCLI(t, append(g, "destroy", "--connect", uri, name)...); code != exitNotFound {
		t.Fatalf("second destroy exit %d, want %d", code, exitNotFound)
	}
	// The ledger empty again: status says so (it printed a bare header), JSON stays [].
	out, code = runCLI(t, append(g, "status", "--connect", uri)...)
	if code != 0 || out != "no VMs: vgpu-host apply has created none on this host (vgpu-host apply SPEC creates one)\n" {
		t.Fatalf("status of an empty ledger exit %d:\n%s", code, out)
	}
	if out, code = runCLI(t, append(g, "-o", "json", "status", "--connect", uri)...); code != 0 || strings.TrimSpace(out) != "[]" {
		t.Fatalf("status -o json of an empty ledger exit %d:\n%s", code, out)
	}
}

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// binary builds vgpu-host and its libvirt helper once, for tests that need a process to kill
// or talk to a real libvirtd through the helper (as the installed binary does).
func binary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "vgpu-host-bin")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "vgpu-host")
		gobin := testenv.GoTool()
		// -tags crashtest: the crash tests drive apply's VGPU_HOST_CRASH_AT_STEP hook; the agent's
		// main: the binary is also the agent (vgpu-host-agent), metrics, reconcile and drift included.
		out, err := exec.Command(gobin, "build", "-tags", "crashtest", "-o", binPath, "../../cmd/vgpu-host-agent").CombinedOutput()
		if err != nil {
			binErr = errors.New(string(out))
			return
		}
		// The libvirt helper beside it, as make build installs them; in-process tests find it
		// through the environment (inherited by the processes they start).
		helper := filepath.Join(dir, remote.HelperName)
		if out, err := exec.Command(gobin, "build", "-o", helper, "../../cmd/vgpu-host-libvirt").CombinedOutput(); err != nil {
			binErr = errors.New(string(out))
			return
		}
		binErr = os.Setenv(remote.EnvHelper, helper)
	})
	if binErr != nil {
		t.Fatalf("build vgpu-host: %v", binErr)
	}
	return binPath
}

// TestCrashAtEveryStepLibvirtd kills apply (exit 137 from the env hook, as after kill -9) at
// each of its steps against a real libvirtd, then applies or destroys again: nothing leaks.
func TestCrashAtEveryStepLibvirtd(t *testing.T) {
	uri := testenv.Libvirtd(t)
	bin := binary(t)
	name := "vgpuhost-test-crash"
	root, spec := world(t, uri, name)
	base := []string{"--host-root", root.Dir(), "apply", "--connect", uri, "--virt-type", "qemu", spec}
	const steps = 5 // ensure-pool, create-overlay, write-seed, define, start
	for n := 1; n <= steps; n++ {
		for _, then := range []string{"apply", "destroy"} {
			cmd := exec.Command(bin, base...)
			cmd.Env = append(os.Environ(), envCrashAt+"="+strconv.Itoa(n))
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 137 {
				t.Fatalf("step %d: apply did not crash: %v\n%s", n, err, out)
			}
			if then == "apply" {
				out, code := runCLI(t, "--host-root", root.Dir(), "-o", "json", "apply", "--connect", uri, "--virt-type", "qemu", spec)
				if code != 0 || !strings.Contains(out, `"converged"`) || !strings.Contains(out, `"state": "running"`) {
					t.Fatalf("step %d: apply after crash exit %d:\n%s", n, code, out)
				}
				if vols, _ := filepath.Glob(filepath.Join(root.StateDir("images"), name+"-*")); len(vols) != 2 {
					t.Fatalf("step %d: volumes after converging: %v", n, vols)
				}
			}
			if out, code := runCLI(t, "--host-root", root.Dir(), "destroy", "--connect", uri, name); code != 0 {
				t.Fatalf("step %d: destroy exit %d:\n%s", n, code, out)
			}
			assertClean(t, uri, root, name)
		}
	}
}

// TestKill9RandomLibvirtd sends a real SIGKILL to apply and to destroy processes at random
// moments against a real libvirtd (no in-process hook: the process can die inside a libvirt
// call, between a call and its journal record, or inside a ledger write), then checks that
// the next apply or destroy converges and that nothing is left: no domain, volume, seed,
// ledger entry or ledger temporary file.
func TestKill9RandomLibvirtd(t *testing.T) {
	uri := testenv.Libvirtd(t)
	bin := binary(t)
	name := "vgpuhost-test-kill9"
	root, spec := world(t, uri, name)
	apply := []string{"--host-root", root.Dir(), "-o", "json", "apply", "--connect", uri, "--virt-type", "qemu", spec}
	destroy := []string{"--host-root", root.Dir(), "-o", "json", "destroy", "--connect", uri, name}

	// How long a whole apply takes here, to spread the kills over it.
	t0 := time.Now()
	if out, err := exec.Command(bin, apply...).CombinedOutput(); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	full := time.Since(t0)
	if out, err := exec.Command(bin, destroy...).CombinedOutput(); err != nil {
		t.Fatalf("destroy: %v\n%s", err, out)
	}
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewSource(seed))
	t.Logf("apply takes %v; seed %d", full, seed)
	killAfter := func(args []string, d time.Duration) (killed bool) {
		cmd := exec.Command(bin, args...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		timer := time.AfterFunc(d, func() { _ = cmd.Process.Signal(syscall.SIGKILL) })
		err := cmd.Wait()
		timer.Stop()
		var ee *exec.ExitError
		return errors.As(err, &ee) && ee.ProcessState.Sys().(syscall.WaitStatus).Signaled()
	}
	kills := 0
	for i := 0; i < 12; i++ {
		killed := killAfter(apply, time.Duration(rng.Int63n(int64(full))))
		if killed {
			kills++
		}
		if i%3 == 2 {
			// Kill the destroy that cleans up too, then let another one finish it.
			if killAfter(destroy, time.Duration(rng.Int63n(int64(full/2)))) {
				kills++
			}
		} else if i%2 == 0 {
			out, code := runCLI(t, apply...)
			if code != 0 || !strings.Contains(out, `"state": "running"`) {
				t.Fatalf("round %d: apply after kill exit %d:\n%s", i, code, out)
			}
		}
		out, code := runCLI(t, destroy...)
		if code != 0 && code != exitNotFound {
			t.Fatalf("round %d: destroy after kill exit %d:\n%s", i, code, out)
		}
		assertClean(t, uri, root, name)
		tmp, _ := filepath.Glob(filepath.Join(root.StateDir(), ".ledger.json.tmp*"))
		more, _ := filepath.Glob(filepath.Join(root.StateDir(), "ledger", ".*.tmp*"))
		if tmp = append(tmp, more...); len(tmp) > 0 {
			t.Fatalf("round %d: ledger temporary files left: %v", i, tmp)
		}
	}
	if kills == 0 {
		t.Fatal("no process was killed while running")
	}
	t.Logf("%d processes killed mid-run", kills)
}

// TestForeignDomainDevicesLibvirtd defines, on the real libvirtd, a domain vgpu-host did not
// create holding a PCI hostdev (driver vfio) and an mdev hostdev, then applies specs on a
// hosttest tree that select exactly those devices: refused with exit 5 and the host left as
// it was; a spec that may fall back gets virtio-gpu instead of the held GPU.
func TestForeignDomainDevicesLibvirtd(t *testing.T) {
	uri := testenv.Libvirtd(t)
	binary(t) // the libvirt helper
	tr := hosttest.New(t)
	gpu, _ := tr.ConsumerGPU("0000:00:01.0", "0000:01:00.0", "nvidia")
	parent := tr.MdevParentVirtual("mbochs", []hosttest.MdevType{{ID: "mbochs-small", Name: "mbochs small", Available: 4}})
	const uuid = "6c1d9f3e-0b1a-4c55-9e2f-0a1b2c3d4e5f"
	tr.CreateMdev(parent, "mbochs-small", uuid)
	k := withKernel(t, tr)
	foreign := "vgpuhost-test-foreign"
	xml := `<domain type='qemu'><name>` + foreign + `</name><memory unit='MiB'>64</memory><os><type arch='x86_64'>hvm</type></os><devices>
  <hostdev mode='subsystem' type='pci' managed='yes'><driver name='vfio'/><source><address domain='0x0000' bus='0x01' slot='0x00' function='0x0'/></source></hostdev>
  <hostdev mode='subsystem' type='mdev' model='vfio-pci'><source><address uuid='` + uuid + `'/></source></hostdev>
</devices></domain>`
	forgetStaleDomain(uri, foreign)
	xf := filepath.Join(t.TempDir(), "foreign.xml")
	if err := os.WriteFile(xf, []byte(xml), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := virsh(uri, "define", xf); err != nil {
		t.Fatalf("define the foreign domain: %v\n%s", err, out)
	}
	t.Cleanup(func() { virsh(uri, "undefine", foreign) })
	pool := lifecycle.PoolName(tr.Root)
	t.Cleanup(func() { virsh(uri, "pool-destroy", pool); virsh(uri, "pool-undefine", pool) })

	write := func(name, gpus string) string {
		s := "apiVersion: vgpu-host/v1\nkind: VirtualMachine\nmetadata:\n  name: " + name +
			"\nspec:\n  vcpus: 1\n  memory: 256MiB\n  firmware: bios\n  graphics:\n    type: vnc\n  network:\n    type: none\n  gpus:\n" + gpus
		p := filepath.Join(t.TempDir(), name+".yaml")
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { virsh(uri, "undefine", name) })
		return p
	}
	g := []string{"--host-root", tr.Dir(), "-o", "json", "apply", "--connect", uri, "--virt-type", "qemu", "--no-start"}
	for _, c := range []struct{ name, gpus string }{
		{"vgpuhost-test-fpci", "    - passthrough:\n        address: \"0000:01:00.0\"\n"},
		{"vgpuhost-test-fmdev", "    - vgpu:\n        profile: mbochs-small\n        uuids: [\"" + uuid + "\"]\n"},
	} {
		writes := len(k.Writes())
		out, code := runCLI(t, append(g, write(c.name, c.gpus))...)
		if code != exitBusy {
			t.Fatalf("%s: apply of a device %s holds: exit %d, want %d\n%s", c.name, foreign, code, exitBusy, out)
		}
		if len(k.Writes()) != writes || tr.Driver(gpu) != "nvidia" {
			t.Fatalf("%s: the refused apply changed the host: %v", c.name, k.Writes()[writes:])
		}
		if _, err := virsh(uri, "dominfo", c.name); err == nil {
			t.Fatalf("%s: defined although refused", c.name)
		}
	}
	fb := write("vgpuhost-test-ffb", "    - passthrough:\n        vendor: \"10de\"\n      fallback: virtio-gpu\n")
	out, code := runCLI(t, append(g, fb)...)
	if code != 0 || !strings.Contains(out, `"fallback"`) || strings.Contains(out, "0000:01:00.0") {
		t.Fatalf("fallback apply exit %d:\n%s", code, out)
	}
	if tr.Driver(gpu) != "nvidia" {
		t.Fatal("the held GPU was bound")
	}
	if out, code := runCLI(t, "--host-root", tr.Dir(), "destroy", "--connect", uri, "vgpuhost-test-ffb"); code != 0 {
		t.Fatalf("destroy exit %d:\n%s", code, out)
	}
	if x, _ := virsh(uri, "dumpxml", foreign); !strings.Contains(x, uuid) {
		t.Fatalf("the foreign domain changed:\n%s", x)
	}
}

// TestUnreachableLibvirt: with the helper started in the background (remote.Start), a libvirtd
// that cannot be reached is still each command's first error, and apply claims nothing: its
// domain-state check comes before the claiming transaction. No libvirtd needed.
func TestUnreachableLibvirt(t *testing.T) {
	t.Parallel()
	bin := binary(t)
	root := t.TempDir()
	spec := filepath.Join(t.TempDir(), "vm.yaml")
	b, err := os.ReadFile("../../examples/virtio-gpu-fallback.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(spec, []byte(strings.ReplaceAll(string(b), "name: vgpu-fallback", "name: vgpuhost-test-unreachable")), 0o644); err != nil {
		t.Fatal(err)
	}
	uri := "qemu+unix:///system?socket=" + filepath.Join(t.TempDir(), "no-libvirtd.sock")
	for _, args := range [][]string{
		{"apply", "--no-start", "--virt-type", "qemu", spec},
		{"status"},
		{"plan", "--virt-type", "qemu", spec},
		{"destroy", "vgpuhost-test-unreachable"},
	} {
		cmd := exec.Command(bin, append([]string{"--host-root", root, "--agent", "never"}, append(args, "--connect", uri)...)...)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), "connect to libvirt at "+uri) {
			t.Errorf("%s with libvirtd unreachable: %v\n%s", args[0], err, out)
		}
	}
	if vms, _ := filepath.Glob(filepath.Join(root, "var/lib/vgpu-host/ledger/vms/*")); len(vms) > 0 {
		t.Fatalf("apply left ledger entries with libvirtd unreachable: %v", vms)
	}
}

// TestSystemLibvirtNeedsNoHelper: for qemu:///system the commands speak libvirtd's protocol
// themselves (virt/direct): with the helper missing, apply (an overlay volume, an uploaded
// cloud-init seed, the define), status and destroy still work against the real libvirtd; VGPU_HOST_LIBVIRT_DIRECT=0 sends them through the helper, which
// is then missing (exit 7); and a test:/// URI always needs the helper.
func TestSystemLibvirtNeedsNoHelper(t *testing.T) {
	uri := testenv.Libvirtd(t)
	bin := binary(t)
	name := "vgpuhost-test-nohelper"
	r, spec := world(t, uri, name)
	root := r.Dir()
	run := func(env []string, args ...string) (string, int) {
		cmd := exec.Command(bin, append([]string{"--host-root", root, "--agent", "never"}, args...)...)
		cmd.Env = append(append(os.Environ(), remote.EnvHelper+"="+filepath.Join(t.TempDir(), "no-helper")), env...)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return string(out), ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return string(out), 0
	}
	for _, args := range [][]string{
		{"apply", "--no-start", "--virt-type", "qemu", "--connect", uri, spec},
		{"status", "--connect", uri},
		{"destroy", "--connect", uri, name},
	} {
		if out, code := run(nil, args...); code != 0 {
			t.Fatalf("%s without the helper: exit %d\n%s", args[0], code, out)
		}
	}
	if _, err := virsh(uri, "dominfo", name); err == nil {
		t.Fatalf("destroy left domain %s defined", name)
	}
	if vms, _ := filepath.Glob(r.Path("var/lib/vgpu-host/ledger/vms/*")); len(vms) > 0 {
		t.Fatalf("destroy left ledger entries: %v", vms)
	}
	for _, c := range []struct {
		env  []string
		args []string
	}{
		{[]string{"VGPU_HOST_LIBVIRT_DIRECT=0"}, []string{"status", "--connect", uri}},
		{nil, []string{"status", "--connect", "test:///default"}},
	} {
		if out, code := run(c.env, c.args...); code != 7 || !strings.Contains(out, remote.HelperName) {
			t.Errorf("%v %v without the helper: exit %d, want 7 naming %s\n%s", c.env, c.args, code, remote.HelperName, out)
		}
	}
}
