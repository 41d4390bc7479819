package clitree

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/ledger"
	"github.com/vgpu-host/vgpu-host/lifecycle"
	"github.com/vgpu-host/vgpu-host/ops"
	"github.com/vgpu-host/vgpu-host/vfio"
	"github.com/vgpu-host/vgpu-host/virt"
)

// A GPU that comes back from a guest with config space of all ones is quarantined by unbind's
// handback; bind refuses it (exit 4, naming the record and the fix) even with --force; host
// health shows it; release-quarantine refuses while it is broken and lifts it after a clean
// check; a bystander GPU is never touched.
func TestHandbackQuarantineCLI(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	gpu, audio := tr.ConsumerGPU("0000:00:04.0", "0000:01:00.0", "")
	other := tr.DatacenterGPU("0000:40:01.0", "0000:41:00.0", "nvidia", 0)
	k := withKernel(t, tr)
	dir := tr.Dir()

	if out, code := run(t, "--host-root", dir, "bind", "01:00.0"); code != 0 {
		t.Fatalf("bind exit %d: %s", code, out)
	}
	cfg := "sys/bus/pci/devices/0000:01:00.0/config"
	good := tr.ReadFile(cfg)
	tr.SetConfigAllOnes(gpu) // the guest left it dead
	out, code := run(t, "--host-root", dir, "unbind", "01:00.0")
	if code != 0 || !strings.Contains(out, "0000:01:00.0 quarantined (config-all-ones") || !strings.Contains(out, "release-quarantine 0000:01:00.0") {
		t.Fatalf("unbind exit %d:\n%s", code, out)
	}
	if strings.Contains(out, "0000:01:00.1 quarantined") {
		t.Errorf("the healthy audio function was quarantined:\n%s", out)
	}
	for _, w := range k.Writes() {
		if strings.Contains(w.Path, other.String()) {
			t.Errorf("touched the bystander: %v", w)
		}
	}

	out, err := runErr(t, "--host-root", dir, "bind", "01:00.0", "--force")
	out, code = out+fmt.Sprint(err), exitCode(err)
	if code != exitRefused || !strings.Contains(out, "[quarantined]") || !strings.Contains(out, "quarantine/0000:01:00.0.json") || !strings.Contains(out, "release-quarantine") {
		t.Fatalf("bind of a quarantined GPU: exit %d:\n%s", code, out)
	}
	if tr.Driver(gpu) == "vfio-pci" || tr.Driver(audio) != "snd_hda_intel" {
		t.Fatal("the refused bind moved a function")
	}

	out, code = run(t, "--host-root", dir, "host", "health", "-o", "json")
	var entries []healthEntry
	if err := json.Unmarshal([]byte(out), &entries); err != nil || code != 0 {
		t.Fatalf("host health -o json exit %d: %v\n%s", code, err, out)
	}
	byAddr := map[host.Address]healthEntry{}
	for _, e := range entries {
		byAddr[e.Address] = e
	}
	if e := byAddr[gpu]; e.Quarantine == nil || e.Last == nil || e.Last.Healthy {
		t.Errorf("gpu entry %+v", e)
	}
	if e := byAddr[audio]; e.Quarantine != nil || e.Last == nil || !e.Last.Healthy {
		t.Errorf("audio entry %+v", e)
	}
	out, code = run(t, "--host-root", dir, "host", "health")
	if code != 0 || !strings.Contains(out, "FAILED") || !strings.Contains(out, "QUARANTINED") {
		t.Fatalf("host health exit %d:\n%s", code, out)
	}
	for _, args := range [][]string{{"check"}, {"inspect"}} {
		out, _ = run(t, append([]string{"--host-root", dir}, args...)...)
		if !strings.Contains(out, "0000:01:00.0 is quarantined") {
			t.Errorf("%s does not show the quarantine:\n%s", args[0], out)
		}
	}

	out, err = runErr(t, "--host-root", dir, "host", "release-quarantine", "0000:01:00.0")
	out, code = out+fmt.Sprint(err), exitCode(err)
	if code != exitRefused || !strings.Contains(out, "config-all-ones") {
		t.Fatalf("release of a dead GPU: exit %d:\n%s", code, out)
	}
	tr.WriteFile(cfg, good) // a host reboot brought it back
	out, code = run(t, "--host-root", dir, "host", "release-quarantine", "0000:01:00.0")
	if code != 0 || !strings.Contains(out, "quarantine released") {
		t.Fatalf("release after the fix: exit %d:\n%s", code, out)
	}
	if out, code = run(t, "--host-root", dir, "bind", "01:00.0"); code != 0 {
		t.Fatalf("bind after release exit %d: %s", code, out)
	}
}

// A reset that heals: with reset: auto the GPU whose BAR registers were lost is reset through
// the kernel on unbind, and not quarantined.
func TestHandbackResetCLI(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	gpu := tr.DatacenterGPU("0000:40:01.0", "0000:41:00.0", "", 0)
	k := withKernel(t, tr)
	dir := tr.Dir()
	tr.WriteFile("etc/vgpu-host/health.yaml", "reset: auto\n")
	if out, code := run(t, "--host-root", dir, "bind", "41:00.0"); code != 0 {
		t.Fatalf("bind exit %d: %s", code, out)
	}
	tr.LoseConfig(gpu)
	out, code := run(t, "--host-root", dir, "unbind", "41:00.0")
	if code != 0 || strings.Contains(out, "quarantined") {
		t.Fatalf("unbind exit %d:\n%s", code, out)
	}
	if r := k.Resets(); len(r) != 1 || r[0] != "0000:41:00.0 flr" {
		t.Errorf("resets %v", r)
	}
	out, code = run(t, "--host-root", dir, "host", "health", "0000:41:00.0", "-o", "json")
	if code != 0 || !strings.Contains(out, `"healthy": true`) || !strings.Contains(out, `"flr": 1`) {
		t.Fatalf("health exit %d:\n%s", code, out)
	}
}

// A bound GPU removed from the bus (echo 1 > remove): unbind cannot restore it (exit 6) but
// quarantines it; after a rescan brings it back, bind refuses it until release-quarantine
// finds it healthy.
func TestGoneFunctionQuarantined(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	gpu := tr.DatacenterGPU("0000:40:01.0", "0000:41:00.0", "", 0)
	withKernel(t, tr)
	dir := tr.Dir()
	if out, code := run(t, "--host-root", dir, "bind", "41:00.0"); code != 0 {
		t.Fatalf("bind exit %d: %s", code, out)
	}
	tr.RemoveFunction(gpu)
	out, err := runErr(t, "--host-root", dir, "unbind", "41:00.0")
	if exitCode(err) != exitNotFound || !strings.Contains(out, "0000:41:00.0 quarantined (gone") {
		t.Fatalf("unbind of a removed GPU: %v\n%s", err, out)
	}
	// A device vgpu-host knew that went away is still shown, gone (an address it never knew
	// with no device is not found: TestMissingAddressOneWording).
	if out, code := run(t, "--host-root", dir, "host", "health", "0000:41:00.0"); code != 0 || !strings.Contains(out, "gone: 0000:41:00.0 is not on the PCI bus") {
		t.Fatalf("host health of the removed GPU: exit %d\n%s", code, out)
	}
	// The rescan: the function is back, driverless.
	tr.DatacenterGPU("0000:40:01.0", "0000:41:00.0", "", 0)
	out, err = runErr(t, "--host-root", dir, "bind", "41:00.0")
	if exitCode(err) != exitRefused || !strings.Contains(fmt.Sprint(err), "[quarantined]") {
		t.Fatalf("bind after the rescan: %v\n%s", err, out)
	}
	if out, code := run(t, "--host-root", dir, "host", "release-quarantine", "0000:41:00.0"); code != 0 {
		t.Fatalf("release exit %d: %s", code, out)
	}
	if out, code := run(t, "--host-root", dir, "bind", "41:00.0"); code != 0 {
		t.Fatalf("bind after release exit %d: %s", code, out)
	}
}

// vf disable checks the PF it leaves, and never resets it (it stays on its host driver, and
// a reset would take it from the host); a PF whose link trained narrower is quarantined.
func TestVFDisableChecksPF(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	pf := tr.SRIOVPF(hosttest.PCI{Addr: "0000:00:0a.0", Vendor: 0x1b36, Device: 0x0010, Class: 0x010802, Driver: "nvme", ResetMethods: "flr"},
		hosttest.VFSpec{Total: 3, VFDevice: 0x0010, VFDriver: "nvme"}, 2)
	k := withKernel(t, tr)
	tr.WriteFile("etc/vgpu-host/health.yaml", "reset: auto\n")
	tr.SetLink(pf, "8.0 GT/s PCIe", 2, "8.0 GT/s PCIe", 4)
	out, code := run(t, "--host-root", tr.Dir(), "vf", "disable", "0000:00:0a.0", "--reset")
	if code != 0 || !strings.Contains(out, "0000:00:0a.0 quarantined (link-degraded") {
		t.Fatalf("vf disable exit %d:\n%s", code, out)
	}
	if r := k.Resets(); len(r) != 0 {
		t.Errorf("the PF was reset: %v", r)
	}
	for _, w := range k.Writes() {
		if strings.HasSuffix(w.Path, "/reset") || strings.HasSuffix(w.Path, "/reset_method") {
			t.Errorf("reset write on a PF: %v", w)
		}
	}
}

// mdev remove checks the PCI parent its instances leave, once, and never resets it: the
// parent's other instances live on.
func TestMdevRemoveChecksParent(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	a100 := tr.DatacenterGPU("0000:40:01.0", "0000:41:00.0", "nvidia", 0)
	tr.A100Mdev(a100)
	k := withKernel(t, tr)
	dir := tr.Dir()
	if out, code := run(t, "--host-root", dir, "mdev", "create", "--parent", a100.String(), "--type", "A100-4C", "--count", "2", "--name", "vm1"); code != 0 {
		t.Fatalf("create exit %d: %s", code, out)
	}
	tr.SetAER(a100, 0, 0, 0)
	if err := host.RecordBaseline(tr.Root, a100, time.Now()); err != nil {
		t.Fatal(err)
	}
	tr.SetAER(a100, 0, 0, 1) // a fatal error under the guest
	out, code := run(t, "--host-root", dir, "mdev", "remove", "--name", "vm1", "--reset")
	if code != 0 || strings.Count(out, "0000:41:00.0 quarantined (aer-fatal") != 1 {
		t.Fatalf("mdev remove exit %d:\n%s", code, out)
	}
	if r := k.Resets(); len(r) != 0 {
		t.Errorf("the parent was reset: %v", r)
	}
}

// destroy hands back whole functions and vendor-vGPU VFs; an mdev UUID is no PCI function.
func TestReleasedByDestroy(t *testing.T) {
	t.Parallel()
	r := &lifecycle.DestroyResult{VM: "web", Released: []ledger.Claim{
		{Kind: ledger.KindPCI, ID: "0000:01:00.0"}, {Kind: ledger.KindPCI, ID: "0000:01:00.1", Detail: "companion"},
		{Kind: ledger.KindMdev, ID: "6b1f3d1e-0000-4000-8000-000000000001"}, {Kind: ledger.KindVendorVGPU, ID: "0000:41:00.4"},
	}}
	var got []string
	for _, rel := range ops.ReleasedBy(r) {
		got = append(got, rel.Address.String())
	}
	if strings.Join(got, " ") != "0000:01:00.0 0000:01:00.1 0000:41:00.4" {
		t.Errorf("released %v", got)
	}
}

// A layout that passes a quarantined GPU through is refused (exit 4) by plan and apply, naming
// the record; nothing is written.
func TestLayoutRefusesQuarantined(t *testing.T) {
	t.Parallel()
	tr, k, f, g := layoutFixture(t)
	gpu := host.MustParseAddress("0000:01:00.0")
	if err := host.SaveQuarantine(tr.Root, &host.Quarantine{Address: gpu, Since: time.Now(),
		Problems: []host.Problem{{Check: host.HealthBAR, Detail: "BAR1 is 128 MiB, was 256 MiB"}}}); err != nil {
		t.Fatal(err)
	}
	for _, verb := range []string{"plan", "apply"} {
		out, err := runErr(t, append(g, "host", "layout", verb, f, "--config", "desks")...)
		if exitCode(err) != exitRefused || !strings.Contains(fmt.Sprint(err)+out, "quarantine/0000:01:00.0.json") {
			t.Fatalf("layout %s: exit %d: %v\n%s", verb, exitCode(err), err, out)
		}
	}
	if w := k.Writes(); len(w) != 0 {
		t.Errorf("writes despite the refusal: %v", w)
	}
}

// destroy hands the VM's GPU back through the check: a GPU whose BAR registers the guest left
// lost is reset (reset: auto) and stays usable; one left dead is quarantined, and plan and
// apply of the next VM refuse it (exit 4) even with --force naming every forceable check.
func TestDestroyHandbackThenPlanRefuses(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	gpu, _ := tr.ConsumerGPU("0000:00:01.0", "0000:01:00.0", "nvidia")
	k := withKernel(t, tr)
	tr.WriteFile("etc/vgpu-host/health.yaml", "reset: auto\nreset_timeout: 1s\n")
	uri := virt.FileScheme + "://" + filepath.Join(t.TempDir(), "libvirt.json")
	g := []string{"--host-root", tr.Dir()}
	apply := func(name string) {
		t.Helper()
		if out, code := runCLI(t, append(g, "apply", "--connect", uri, "--virt-type", "qemu", "--no-start", bootVGASpec(t, name))...); code != 0 {
			t.Fatalf("apply %s: exit %d\n%s", name, code, out)
		}
	}

	apply("vgpuhost-test-a")
	tr.LoseConfig(gpu)
	out, err := runErr(t, append(g, "destroy", "--connect", uri, "vgpuhost-test-a")...)
	if code := exitCode(err); code != 0 || strings.Contains(out, "quarantined") {
		t.Fatalf("destroy a: exit %d\n%s", code, out)
	}
	if r := k.Resets(); len(r) != 1 || r[0] != "0000:01:00.0 bus" {
		t.Errorf("resets %v", r)
	}

	apply("vgpuhost-test-b")
	tr.SetConfigAllOnes(gpu)
	out, err = runErr(t, append(g, "destroy", "--connect", uri, "vgpuhost-test-b")...)
	if code := exitCode(err); code != 0 || !strings.Contains(out, "0000:01:00.0 quarantined (config-all-ones") {
		t.Fatalf("destroy b: exit %d\n%s", code, out)
	}
	spec := bootVGASpec(t, "vgpuhost-test-c")
	out, code := runCLI(t, append(g, "plan", "--connect", uri, "--virt-type", "qemu", spec)...)
	if code != exitRefused || !strings.Contains(out, "[quarantined]") {
		t.Fatalf("plan of a VM on the quarantined GPU: exit %d\n%s", code, out)
	}
	n := len(k.Writes())
	force := "--force=" + strings.Join(vfio.ForceableChecks, ",")
	if out, code = runCLI(t, append(g, "apply", "--connect", uri, "--virt-type", "qemu", "--no-start", force, spec)...); code != exitRefused {
		t.Fatalf("apply %s: exit %d\n%s", force, code, out)
	}
	if len(k.Writes()) != n {
		t.Errorf("the refused apply wrote %v", k.Writes()[n:])
	}
}

// status ends its table with the quarantined devices.
func TestStatusShowsQuarantine(t *testing.T) {
	fakeLibvirt(t)
	tr := hosttest.New(t)
	gpu, _ := tr.ConsumerGPU("0000:00:04.0", "0000:01:00.0", "")
	if err := host.SaveQuarantine(tr.Root, &host.Quarantine{Address: gpu, Since: time.Now(),
		Problems: []host.Problem{{Check: host.HealthGone, Detail: "not on the PCI bus"}}}); err != nil {
		t.Fatal(err)
	}
	out, err := runErr(t, "--host-root", tr.Dir(), "status")
	if err != nil || !strings.Contains(out, "quarantined: 0000:01:00.0 is quarantined since") || !strings.Contains(out, "release-quarantine 0000:01:00.0") {
		t.Fatalf("status: %v\n%s", err, out)
	}
}

// Quarantine is enforced beyond bind: mdev create on a quarantined parent and vf enable on a
// quarantined PF exit 4 naming the record and the fix, and change nothing; inspect -o json
// and status list the records; host health shows a GPU's Xids.
func TestQuarantineEverywhereCLI(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	a100 := tr.DatacenterGPU("0000:40:01.0", "0000:41:00.0", "nvidia", 0)
	tr.A100Mdev(a100)
	pf := tr.SRIOVPF(hosttest.PCI{Addr: "0000:00:0a.0", Vendor: 0x1b36, Device: 0x0010, Class: 0x010802, Driver: "nvme"},
		hosttest.VFSpec{Total: 3, VFDevice: 0x0010, VFDriver: "nvme"}, 0)
	k := withKernel(t, tr)
	dir := tr.Dir()
	for _, a := range []host.Address{a100, pf} {
		q := &host.Quarantine{Address: a, Problems: []host.Problem{{Check: host.HealthXid, Detail: "NVIDIA Xid 79"}}, Since: time.Now(), Op: "destroy vm"}
		if err := host.SaveQuarantine(tr.Root, q); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		args []string
		addr host.Address
	}{
		{[]string{"mdev", "create", "--parent", "0000:41:00.0", "--type", "A100-4C", "--name", "vm1"}, a100},
		{[]string{"vf", "enable", "0000:00:0a.0", "--count", "2"}, pf},
	} {
		out, err := runErr(t, append([]string{"--host-root", dir}, c.args...)...)
		out += fmt.Sprint(err)
		if code := exitCode(err); code != exitRefused {
			t.Errorf("%v: exit %d, want %d:\n%s", c.args, code, exitRefused, out)
		}
		for _, want := range []string{"[quarantined]", "quarantine/" + c.addr.String() + ".json", "release-quarantine", "nvidia-xid"} {
			if !strings.Contains(out, want) {
				t.Errorf("%v: output lacks %q:\n%s", c.args, want, out)
			}
		}
	}
	if w := k.Writes(); len(w) != 0 {
		t.Errorf("writes despite the refusals: %v", w)
	}
	out, code := run(t, "--host-root", dir, "inspect", "-o", "json")
	var rep struct {
		Quarantined []host.Quarantine `json:"quarantined"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 0 || len(rep.Quarantined) != 2 {
		t.Errorf("inspect -o json exit %d %v: quarantined %+v", code, err, rep.Quarantined)
	}
	if err := host.RecordXid(tr.Root, host.XidEvent{Address: a100, Xid: 13, GPUInstance: -1, ComputeInstance: -1, Time: time.Now()}); err != nil {
		t.Fatal(err)
	}
	out, code = run(t, "--host-root", dir, "host", "health")
	if code != 0 || !strings.Contains(out, "XID") || !strings.Contains(out, "13x1") {
		t.Errorf("host health does not show the Xid: exit %d\n%s", code, out)
	}
}
