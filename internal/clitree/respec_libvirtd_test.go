package clitree

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"libvirt.org/go/libvirtxml"

	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/internal/testenv"
	"github.com/vgpu-host/vgpu-host/ledger"
	"github.com/vgpu-host/vgpu-host/lifecycle"
)

// runCLIErr runs the CLI in-process and returns the error message (what the binary prints on
// stderr) and the exit code.
func runCLIErr(t *testing.T, args ...string) (string, int) {
	t.Helper()
	var out, errw bytes.Buffer
	err := runInTest(t, args, &out, &errw)
	if err == nil {
		return "", 0
	}
	return err.Error(), exitCode(err)
}

// applyJSON runs `apply -o json` in-process and decodes its one result.
func applyJSON(t *testing.T, args ...string) (lifecycle.VMApplyResult, string, int) {
	t.Helper()
	out, code := runCLI(t, append([]string{"-o", "json"}, args...)...)
	var rs []lifecycle.VMApplyResult
	if code == 0 {
		if err := json.Unmarshal([]byte(out), &rs); err != nil || len(rs) != 1 {
			t.Fatalf("apply printed (%v):\n%s", err, out)
		}
		return rs[0], out, code
	}
	return lifecycle.VMApplyResult{}, out, code
}

// domainOf parses a domain's XML (live, or --inactive).
func domainOf(t *testing.T, uri, name string, inactive bool) *libvirtxml.Domain {
	t.Helper()
	args := []string{"dumpxml", name}
	if inactive {
		args = append(args, "--inactive")
	}
	x, err := virsh(uri, args...)
	if err != nil {
		t.Fatalf("dumpxml %s: %v\n%s", name, err, x)
	}
	var d libvirtxml.Domain
	if err := d.Unmarshal(x); err != nil {
		t.Fatal(err)
	}
	return &d
}

// TestChangedSpecSameDevicesLibvirtd applies the fallback VM (running, TCG), then changes
// memory, vCPUs and cloud-init: apply redefines the domain and rewrites the seed, says
// restart_needed, and the running domain keeps running, unchanged, until it restarts
// (docs/apply.md, "Idempotence, and which changes need a restart").
func TestChangedSpecSameDevicesLibvirtd(t *testing.T) {
	uri := testenv.Libvirtd(t)
	binary(t) // the libvirt helper
	name := "vgpuhost-test-respec"
	root, spec := world(t, uri, name)
	g := []string{"--host-root", root.Dir()}
	apply := append(g, "apply", "--connect", uri, "--virt-type", "qemu", spec)

	res, out, code := applyJSON(t, apply...)
	if code != 0 || res.State != "running" || res.RestartNeeded {
		t.Fatalf("apply exit %d:\n%s", code, out)
	}
	id, _ := virsh(uri, "domid", name)
	book, _ := ledger.Open(root).Read()
	hash0 := book.VM(name).SpecHash

	y, err := os.ReadFile(spec)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(y), "vcpus: 1", "vcpus: 2", 1)
	s = strings.Replace(s, "memory: 512MiB", "memory: 640MiB", 1)
	s = strings.Replace(s, "runcmd: [poweroff]", "runcmd: [echo vgpuhost-respec, poweroff]", 1)
	if s == string(y) || strings.Count(s, "vcpus: 2")+strings.Count(s, "640MiB")+strings.Count(s, "vgpuhost-respec") != 3 {
		t.Fatalf("spec edit did not apply:\n%s", s)
	}
	if err := os.WriteFile(spec, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}

	res, out, code = applyJSON(t, apply...)
	if code != 0 || !res.Changed || !res.RestartNeeded || res.State != "running" || !strings.Contains(out, `"restart_needed": true`) || res.Replaced != nil {
		t.Fatalf("re-apply of a changed spec exit %d:\n%s", code, out)
	}
	if !slices.ContainsFunc(res.Steps, func(s string) bool { return strings.HasPrefix(s, "define domain") }) ||
		!slices.ContainsFunc(res.Steps, func(s string) bool { return strings.HasPrefix(s, "write cloud-init seed") }) ||
		slices.ContainsFunc(res.Steps, func(s string) bool {
			return strings.HasPrefix(s, "create qcow2 overlay") || strings.HasPrefix(s, "start")
		}) {
		t.Errorf("steps %q: want the seed rewritten and the domain redefined, nothing else", res.Steps)
	}
	if id2, _ := virsh(uri, "domid", name); id2 != id {
		t.Errorf("the running domain was restarted (id %q -> %q)", strings.TrimSpace(id), strings.TrimSpace(id2))
	}
	live, next := domainOf(t, uri, name, false), domainOf(t, uri, name, true)
	if live.VCPU.Value != 1 || live.Memory.Value != 512*1024 {
		t.Errorf("the running guest changed: %d vCPUs, %d KiB", live.VCPU.Value, live.Memory.Value)
	}
	if next.VCPU.Value != 2 || next.Memory.Value != 640*1024 {
		t.Errorf("next boot's definition: %d vCPUs, %d KiB, want 2 and 655360", next.VCPU.Value, next.Memory.Value)
	}
	iso := filepath.Join(root.StateDir("images"), name+"-cidata.iso")
	if ud, err := exec.Command("isoinfo", "-i", iso, "-J", "-x", "/user-data").CombinedOutput(); err != nil || !strings.Contains(string(ud), "vgpuhost-respec") {
		t.Errorf("seed not rewritten (%v):\n%s", err, ud)
	}
	book, _ = ledger.Open(root).Read()
	if e := book.VM(name); e.SpecHash == hash0 || e.Phase != ledger.PhaseApplied {
		t.Errorf("ledger after re-apply: hash %s (was %s), phase %s", e.SpecHash, hash0, e.Phase)
	}

	// The table says so too; applying the same spec again changes nothing.
	s = strings.Replace(s, "memory: 640MiB", "memory: 576MiB", 1)
	if err := os.WriteFile(spec, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code = runCLI(t, apply...)
	if code != 0 || !strings.Contains(out, name+": applied, running") || !strings.Contains(out, "restart it for the change to take effect") {
		t.Fatalf("table re-apply exit %d:\n%s", code, out)
	}
	res, out, code = applyJSON(t, apply...)
	if code != 0 || res.Changed || res.RestartNeeded || len(res.Steps) != 0 {
		t.Fatalf("re-apply of the same spec exit %d:\n%s", code, out)
	}

	if out, code := runCLI(t, append(g, "destroy", "--connect", uri, name)...); code != 0 {
		t.Fatalf("destroy exit %d:\n%s", code, out)
	}
	assertClean(t, uri, root, name)
}

// TestChangedGPUSelectionLibvirtd applies a VM holding GPU 71:00.0 (by address), then changes
// its spec to GPU 72:00.0: apply destroys and re-creates it, the ledger releases 71:00.x and
// claims 72:00.x, the domain's hostdevs follow, and another VM can now take 71:00.0. A change
// to a GPU another VM holds is refused (exit 5) and leaves the VM as it was.
func TestChangedGPUSelectionLibvirtd(t *testing.T) {
	uri := testenv.Libvirtd(t)
	binary(t) // the libvirt helper
	tr := hosttest.New(t)
	preboundGPUs(t, tr, 0x71, 3)
	pool := lifecycle.PoolName(tr.Root)
	a, b := "vgpuhost-test-regpu-a", "vgpuhost-test-regpu-b"
	t.Cleanup(func() {
		for _, n := range []string{a, b} {
			virsh(uri, "destroy", n)
			virsh(uri, "undefine", n, "--nvram")
		}
		virsh(uri, "pool-destroy", pool)
		virsh(uri, "pool-undefine", pool)
	})
	dir := t.TempDir()
	write := func(name, addr string) string {
		s := "apiVersion: vgpu-host/v1\nkind: VirtualMachine\nmetadata:\n  name: " + name + "\nspec:\n" +
			"  vcpus: 1\n  memory: 128MiB\n  firmware: bios\n  network:\n    type: none\n  graphics:\n    type: vnc\n" +
			"  cloudInit:\n    userData: \"#cloud-config\\n\"\n" +
			"  gpus:\n    - passthrough:\n        address: \"" + addr + "\"\n"
		p := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	apply := func(spec string) []string {
		return []string{"--host-root", tr.Dir(), "apply", "--connect", uri, "--virt-type", "qemu", "--no-start", spec}
	}
	claims := func(name string) []string {
		book, err := ledger.Open(tr.Root).Read()
		if err != nil {
			t.Fatal(err)
		}
		e := book.VM(name)
		if e == nil {
			return nil
		}
		var ids []string
		for _, c := range e.Claims {
			ids = append(ids, c.ID)
		}
		slices.Sort(ids)
		return ids
	}
	hostdevs := func(name string) []string {
		x, err := virsh(uri, "dumpxml", "--inactive", name)
		if err != nil {
			t.Fatalf("dumpxml %s: %v\n%s", name, err, x)
		}
		return hostdevsOf(t, x)
	}
	one := []string{"0000:71:00.0", "0000:71:00.1"}
	two := []string{"0000:72:00.0", "0000:72:00.1"}
	three := []string{"0000:73:00.0", "0000:73:00.1"}

	specA := write(a, "0000:71:00.0")
	if res, out, code := applyJSON(t, apply(specA)...); code != 0 || !res.Changed {
		t.Fatalf("apply %s exit %d:\n%s", a, code, out)
	}
	if got := claims(a); !slices.Equal(got, one) || !slices.Equal(hostdevs(a), one) {
		t.Fatalf("%s: claims %v, hostdevs %v, want %v", a, got, hostdevs(a), one)
	}
	uuid0 := domainOf(t, uri, a, true).UUID

	specA = write(a, "0000:72:00.0")
	res, out, code := applyJSON(t, apply(specA)...)
	if code != 0 || !res.Changed || res.State != "shutoff" || res.Replaced == nil {
		t.Fatalf("apply with another GPU exit %d:\n%s", code, out)
	}
	// It says it destroyed the VM first, and which devices that released.
	var released []string
	for _, c := range res.Replaced.Released {
		released = append(released, c.ID)
	}
	slices.Sort(released)
	if !slices.Equal(released, one) || !slices.Contains(res.Replaced.Undone, "define "+a) || !slices.Contains(res.Replaced.Undone, "bind-group 0000:71:00.0") {
		t.Errorf("replaced: %+v, want the old domain undone and %v released", res.Replaced, one)
	}
	if got := claims(a); !slices.Equal(got, two) {
		t.Errorf("%s: ledger claims %v after the GPU change, want %v", a, got, two)
	}
	if got := hostdevs(a); !slices.Equal(got, two) {
		t.Errorf("%s: domain hostdevs %v after the GPU change, want %v", a, got, two)
	}
	var got []string
	for _, c := range res.Claims {
		got = append(got, c.ID)
	}
	slices.Sort(got)
	if !slices.Equal(got, two) {
		t.Errorf("apply reported claims %v, want %v", got, two)
	}
	if d := domainOf(t, uri, a, true); d.UUID != uuid0 {
		t.Errorf("domain UUID changed: %s -> %s", uuid0, d.UUID)
	}

	// 71:00.0 is free again: another VM gets it.
	specB := write(b, "0000:71:00.0")
	if _, out, code := applyJSON(t, apply(specB)...); code != 0 || !slices.Equal(claims(b), one) {
		t.Fatalf("apply %s of the released GPU exit %d, claims %v:\n%s", b, code, claims(b), out)
	}
	// a cannot move to b's GPU: refused busy, and a keeps what it has.
	specA = write(a, "0000:71:00.0")
	if msg, code := runCLIErr(t, apply(specA)...); code != exitBusy || !strings.Contains(msg, "0000:71:00.0") || !strings.Contains(msg, b) {
		t.Fatalf("moving %s to %s's GPU: exit %d, want %d with the GPU and its holder named: %s", a, b, code, exitBusy, msg)
	}
	if got := claims(a); !slices.Equal(got, two) || !slices.Equal(hostdevs(a), two) {
		t.Errorf("%s after a refused change: claims %v, hostdevs %v, want %v", a, got, hostdevs(a), two)
	}
	// And on to a free one: 72:00.x is released again, and the table says so.
	specA = write(a, "0000:73:00.0")
	if out, code := runCLI(t, apply(specA)...); code != 0 || !slices.Equal(claims(a), three) || !slices.Equal(hostdevs(a), three) ||
		!strings.Contains(out, "its devices changed: destroyed and re-created it (released pci 0000:72:00.0, pci 0000:72:00.1)") {
		t.Fatalf("apply %s with GPU 3 exit %d:\n%s", a, code, out)
	}
	if book, _ := ledger.Open(tr.Root).Read(); book.Holder(ledger.Claim{Kind: ledger.KindPCI, ID: "0000:72:00.0"}) != "" {
		t.Errorf("0000:72:00.0 still held after %s moved to 73:00.0", a)
	}

	for _, n := range []string{a, b} {
		if out, code := runCLI(t, "--host-root", tr.Dir(), "destroy", "--connect", uri, n); code != 0 {
			t.Fatalf("destroy %s exit %d:\n%s", n, code, out)
		}
	}
	if left := domainsWithPrefix(t, uri, "vgpuhost-test-regpu-"); len(left) > 0 {
		t.Errorf("domains left: %v", left)
	}
	if vols, _ := filepath.Glob(filepath.Join(tr.Root.StateDir("images"), "*")); len(vols) > 0 {
		t.Errorf("volumes left: %v", vols)
	}
	if book, _ := ledger.Open(tr.Root).Read(); book.Len() > 0 {
		t.Errorf("ledger entries left: %v", book.Names())
	}
}
