package clitree

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
)

// run executes the CLI in-process and returns stdout and the exit code main would use.
func run(t *testing.T, args ...string) (string, int) {
	t.Helper()
	var out bytes.Buffer
	err := runInTest(t, args, &out, &out)
	return out.String(), exitCode(err)
}

func fakeHost(t *testing.T) *hosttest.Tree {
	tr := hosttest.New(t)
	tr.DatacenterGPU("0000:40:01.0", "0000:41:00.0", "vfio-pci", 1)
	tr.ConsumerGPU("0000:00:01.0", "0000:01:00.0", "nouveau")
	tr.Mbochs()
	return tr
}

func TestInspectJSON(t *testing.T) {
	t.Parallel()
	tr := fakeHost(t)
	out, code := run(t, "--host-root", tr.Dir(), "inspect", "--output", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	var inv host.Inventory
	if err := json.Unmarshal([]byte(out), &inv); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if len(inv.Devices) != 3 || len(inv.Groups) != 2 || len(inv.MdevParents) != 1 {
		t.Errorf("devices %d groups %d parents %d, want 3 2 1", len(inv.Devices), len(inv.Groups), len(inv.MdevParents))
	}
	// The documented field names (docs/inspect.md) are present.
	var raw map[string]any
	json.Unmarshal([]byte(out), &raw)
	dev := raw["devices"].([]any)[0].(map[string]any)
	for _, k := range []string{"address", "vendor_id", "device_id", "class", "driver", "iommu_group", "numa_node", "boot_vga", "bars"} {
		if _, ok := dev[k]; !ok {
			t.Errorf("devices[0] has no %q", k)
		}
	}
	grp := raw["groups"].([]any)[0].(map[string]any)
	for _, k := range []string{"id", "members", "viable", "blockers"} {
		if _, ok := grp[k]; !ok {
			t.Errorf("groups[0] has no %q", k)
		}
	}
}

func TestInspectYAMLAndTable(t *testing.T) {
	t.Parallel()
	tr := fakeHost(t)
	out, code := run(t, "--host-root", tr.Dir(), "-o", "yaml", "inspect")
	var v map[string]any
	if code != 0 || yaml.Unmarshal([]byte(out), &v) != nil || v["iommu"] != true {
		t.Fatalf("yaml: exit %d, %v\n%s", code, v["iommu"], out)
	}
	out, code = run(t, "--host-root", tr.Dir(), "inspect")
	for _, want := range []string{"0000:41:00.0", "vfio-pci", "1:64G/64p", "0000:01:00.1 snd_hda_intel", "companions 0000:01:00.1", "mbochs-small", "yes"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if code != 0 {
		t.Errorf("exit %d", code)
	}
}

func TestInspectOneDevice(t *testing.T) {
	t.Parallel()
	tr := fakeHost(t)
	out, code := run(t, "--host-root", tr.Dir(), "inspect", "0000:01:00.1", "--output", "json")
	var rep deviceReport
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || rep.Device.Driver != "snd_hda_intel" || rep.Group == nil || len(rep.Group.Members) != 2 {
		t.Fatalf("exit %d: %s", code, out)
	}
	if _, code := run(t, "--host-root", tr.Dir(), "inspect", "0000:0f:00.0"); code != exitNotFound {
		t.Errorf("missing device: exit %d, want %d", code, exitNotFound)
	}
	if _, code := run(t, "--host-root", tr.Dir(), "inspect", "nonsense"); code != exitUsage {
		t.Errorf("bad address: exit %d, want %d", code, exitUsage)
	}
}

func TestInspectBadFlags(t *testing.T) {
	t.Parallel()
	tr := fakeHost(t)
	if _, code := run(t, "--host-root", filepath.Join(t.TempDir(), "nope"), "inspect"); code != exitUsage {
		t.Errorf("missing --host-root: exit %d, want %d", code, exitUsage)
	}
	if _, code := run(t, "--host-root", tr.Dir(), "inspect", "--output", "xml"); code != exitUsage {
		t.Errorf("unknown --output: exit %d, want %d", code, exitUsage)
	}
	if _, code := run(t, "--host-root", filepath.Join(t.TempDir(), "nope"), "check"); code != exitUsage {
		t.Errorf("check with a missing --host-root: exit %d, want %d", code, exitUsage)
	}
	if _, code := run(t, "--host-root", tr.Dir(), "check", "-o", "toml"); code != exitUsage {
		t.Errorf("check with unknown --output: exit %d, want %d", code, exitUsage)
	}
}

func TestCheckExitCodes(t *testing.T) {
	t.Parallel()
	tr := fakeHost(t)
	out, code := run(t, "--host-root", tr.Dir(), "check")
	if code != exitOK || !strings.Contains(out, "passthrough-ready") || !strings.Contains(out, "ok    iommu") {
		t.Errorf("ready host: exit %d\n%s", code, out)
	}
	bare := hosttest.New(t)
	bare.NoIOMMU()
	bare.AddPCI(hosttest.PCI{Addr: "0000:00:06.0", Vendor: 0x1af4, Device: 0x1050, Class: 0x038000, Driver: "virtio-pci", Group: -1})
	out, code = run(t, "--host-root", bare.Dir(), "check", "--output", "json")
	if code != exitNotReady {
		t.Errorf("nothing assignable: exit %d, want %d\n%s", code, exitNotReady, out)
	}
	var r host.Readiness
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.Assignable || len(r.GPUs) != 1 || r.GPUs[0].Verdict != host.VerdictFail {
		t.Errorf("json report: %v %+v", err, r)
	}
}

func TestInspectRealKernelSnapshot(t *testing.T) {
	t.Parallel()
	root := hosttest.Snapshot(t, hosttest.SharedFixture(t, "qemu-q35-iommu-6.1.tar.gz"))
	out, code := run(t, "--host-root", root.Dir(), "inspect", "-o", "json")
	var inv host.Inventory
	if code != 0 || json.Unmarshal([]byte(out), &inv) != nil {
		t.Fatalf("exit %d: %s", code, out)
	}
	viable := map[int]bool{}
	for _, g := range inv.Groups {
		viable[g.ID] = g.Viable
	}
	if viable[9] || viable[6] || !viable[10] {
		t.Errorf("viability = %v, want 9 and 6 not viable, 10 viable", viable)
	}
	if _, code := run(t, "--host-root", root.Dir(), "check"); code != exitOK {
		t.Errorf("check on the snapshot: exit %d, want 0 (01:00.0 is passthrough-ready)", code)
	}
}

// An mdev instance's group: JSON lists it under groups[].mdevs with no PCI members, and the
// table shows the group next to the instance's UUID.
func TestInspectMdevInstanceGroup(t *testing.T) {
	t.Parallel()
	tr := fakeHost(t)
	const uuid = "6b1f1a58-8f3c-4a1e-9d3e-222222222222"
	tr.CreateMdev("sys/devices/virtual/mbochs/mbochs", "mbochs-small", uuid)
	out, code := run(t, "--host-root", tr.Dir(), "inspect", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	var inv host.Inventory
	if err := json.Unmarshal([]byte(out), &inv); err != nil {
		t.Fatal(err)
	}
	gid := -1
	for _, g := range inv.Groups {
		if len(g.Mdevs) == 1 && g.Mdevs[0].UUID == uuid && g.Mdevs[0].Parent == "mbochs" && g.Mdevs[0].Type == "mbochs-small" && len(g.Members) == 0 && g.Viable {
			gid = g.ID
		}
	}
	if gid < 0 {
		t.Fatalf("no viable group listing mdev %s: %+v", uuid, inv.Groups)
	}
	table, _ := run(t, "--host-root", tr.Dir(), "inspect")
	if want := uuid + " (" + strconv.Itoa(gid) + ")"; !strings.Contains(table, want) {
		t.Errorf("table lacks %q:\n%s", want, table)
	}
}

// inspect ADDR reports the attributes it could not read instead of dropping them.
func TestInspectAddrWarnings(t *testing.T) {
	t.Parallel()
	tr := fakeHost(t)
	tr.WriteFile("sys/bus/pci/devices/0000:01:00.0/numa_node", "garbage\n")
	out, code := run(t, "--host-root", tr.Dir(), "inspect", "0000:01:00.0", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	var rep struct {
		Warnings []string `json:"warnings"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Warnings) != 1 || !strings.Contains(rep.Warnings[0], "numa_node") {
		t.Errorf("warnings = %q, want one naming numa_node", rep.Warnings)
	}
	table, _ := run(t, "--host-root", tr.Dir(), "inspect", "0000:01:00.0")
	if !strings.Contains(table, "warnings:") || !strings.Contains(table, "numa_node") {
		t.Errorf("table has no warnings section:\n%s", table)
	}
}

// check --output json has one shape whatever the verdicts (docs/inspect.md): every key of
// every check and GPU present, arrays never null.
func TestCheckJSONShape(t *testing.T) {
	t.Parallel()
	ready := fakeHost(t)
	bare := hosttest.New(t)
	bare.NoIOMMU()
	for _, tr := range []*hosttest.Tree{ready, bare} {
		out, _ := run(t, "--host-root", tr.Dir(), "check", "-o", "json")
		var raw map[string]any
		if err := json.Unmarshal([]byte(out), &raw); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, out)
		}
		for _, k := range []string{"host_root", "checks", "gpus", "virtual_mdev", "assignable", "warnings"} {
			if v, ok := raw[k]; !ok || v == nil {
				t.Errorf("%s: top-level %q missing or null", tr.Dir(), k)
			}
		}
		for _, c := range raw["checks"].([]any) {
			for _, k := range []string{"name", "verdict", "detail", "fix"} {
				if _, ok := c.(map[string]any)[k]; !ok {
					t.Errorf("check %v has no %q", c, k)
				}
			}
		}
		for _, g := range raw["gpus"].([]any) {
			for _, k := range []string{"address", "name", "verdict", "capabilities", "detail", "fix", "assignable"} {
				if _, ok := g.(map[string]any)[k]; !ok {
					t.Errorf("gpu %v has no %q", g, k)
				}
			}
		}
	}
}

// inspect UUID on the real-kernel snapshot: the mdpy-hd instance with its parent, type, driver
// and its own IOMMU group (the group's mdev list names it); exit 6 for a UUID with no instance,
// and inspect ADDR still reads a PCI function.
func TestInspectMdevUUID(t *testing.T) {
	t.Parallel()
	root := hosttest.Snapshot(t, hosttest.SharedFixture(t, "qemu-q35-iommu-6.1.tar.gz"))
	const uuid = "66666666-7777-8888-9999-000000000000"
	out, code := run(t, "--host-root", root.Dir(), "inspect", uuid, "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	var rep struct {
		Mdev     host.MdevInstance `json:"mdev"`
		Group    *host.Group       `json:"group"`
		Warnings []string          `json:"warnings"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	m := rep.Mdev
	if m.UUID != uuid || m.Parent != "mdpy" || m.ParentAddress != nil || m.Type != "mdpy-hd" || m.Driver != "mdpy" || m.IOMMUGroup != 14 {
		t.Errorf("mdev = %+v, want mdpy/mdpy-hd on driver mdpy in group 14", m)
	}
	if g := rep.Group; g == nil || g.ID != m.IOMMUGroup || len(g.Mdevs) != 1 || g.Mdevs[0].UUID != uuid || len(g.Members) != 0 || !g.Viable {
		t.Errorf("group = %+v, want group %d listing only %s, viable", rep.Group, m.IOMMUGroup, uuid)
	}
	if len(rep.Warnings) != 0 {
		t.Errorf("warnings %q on a complete snapshot", rep.Warnings)
	}
	// The documented keys (docs/inspect.md) are present.
	var raw map[string]map[string]any
	json.Unmarshal([]byte(out), &raw)
	for _, k := range []string{"uuid", "parent", "type", "type_name", "device_api", "driver", "iommu_group"} {
		if _, ok := raw["mdev"][k]; !ok {
			t.Errorf("mdev has no %q", k)
		}
	}

	table, code := run(t, "--host-root", root.Dir(), "inspect", strings.ToUpper(uuid))
	for _, want := range []string{"uuid         " + uuid, "parent       mdpy (virtual)", "type         mdpy-hd", "driver       mdpy", "iommu group  14: " + uuid, "vfio viable  yes"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	if code != 0 {
		t.Errorf("table: exit %d", code)
	}

	if out, code := run(t, "--host-root", root.Dir(), "inspect", "66666666-7777-8888-9999-000000000001", "-o", "json"); code != exitNotFound || out != "" {
		t.Errorf("no such instance: exit %d, want %d and nothing on stdout: %q", code, exitNotFound, out)
	}
	if _, _, err := host.ReadMdevInstance(root, "66666666-7777-8888-9999-000000000001"); err == nil || !strings.Contains(err.Error(), "66666666-7777-8888-9999-000000000001") {
		t.Errorf("the not-found error must name the UUID: %v", err)
	}
	if out, code := run(t, "--host-root", root.Dir(), "inspect", "66666666-7777-8888-9999-00000000000", "-o", "json"); code != exitUsage {
		t.Errorf("a UUID one digit short: exit %d, want %d: %s", code, exitUsage, out)
	}
	out, code = run(t, "--host-root", root.Dir(), "inspect", "0000:01:00.1", "-o", "json")
	var dev deviceReport
	if code != 0 || json.Unmarshal([]byte(out), &dev) != nil || dev.Device.Driver != "snd_hda_intel" || dev.Group == nil || dev.Group.ID != 9 {
		t.Errorf("inspect ADDR on the snapshot: exit %d: %s", code, out)
	}
}
