package clitree

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/mdev"
	"github.com/vgpu-host/vgpu-host/ops"
)

// runErr runs the CLI and returns its output and error (run() keeps only the exit code).
func runErr(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := runInTest(t, args, &out, &out)
	return out.String(), err
}

func TestMdevCLILifecycle(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	tr.Mbochs()
	k := withKernel(t, tr)
	r := tr.Dir()

	out, code := run(t, "--host-root", r, "mdev", "types", "--output", "json")
	var ps []mdev.Parent
	if code != 0 || json.Unmarshal([]byte(out), &ps) != nil || len(ps) != 1 || ps[0].Name != "mbochs" || len(ps[0].Types) != 3 {
		t.Fatalf("types exit %d: %s", code, out)
	}
	// Create for a VM, twice: converges.
	for i := 0; i < 2; i++ {
		out, code = run(t, "--host-root", r, "mdev", "create", "--parent", "mbochs", "--type", "small", "--count", "2", "--name", "vm1", "--output", "json")
		if code != 0 {
			t.Fatalf("create #%d exit %d: %s", i, code, out)
		}
	}
	if n := strings.Count(joinWrites(k), "/create="); n != 2 {
		t.Fatalf("%d create writes over two runs", n)
	}
	var ins []mdev.Instance
	if err := json.Unmarshal([]byte(out), &ins); err != nil || len(ins) != 2 || ins[0].UUID != mdev.InstanceUUID("vm1", 0) {
		t.Fatalf("create output %v: %s", err, out)
	}
	// Over-ask: exit 5, nothing created.
	out, err := runErr(t, "--host-root", r, "mdev", "create", "-p", "mbochs", "-t", "mbochs-small", "-n", "7", "--name", "vm2")
	if exitCode(err) != 5 || !strings.Contains(err.Error(), "available_instances=6") || out != "" {
		t.Fatalf("over-ask: exit %d %v, printed %q", exitCode(err), err, out)
	}
	// Unknown type: exit 6 and the message lists the types.
	_, err = runErr(t, "--host-root", r, "mdev", "create", "-p", "mbochs", "-t", "huge")
	if exitCode(err) != 6 || !strings.Contains(err.Error(), "mbochs-large (large)") {
		t.Fatalf("unknown type: exit %d %v", exitCode(err), err)
	}
	// Define, list.
	if out, code := run(t, "--host-root", r, "mdev", "define", ins[0].UUID); code != 0 || !strings.Contains(out, "mdevctl.d/mbochs/"+ins[0].UUID) {
		t.Fatalf("define exit %d: %s", code, out)
	}
	out, code = run(t, "--host-root", r, "mdev", "list", "--output", "json")
	var list []mdev.Instance
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list) != 2 || !list[0].Defined && !list[1].Defined || list[0].Owner != "vm1" {
		t.Fatalf("list exit %d: %s", code, out)
	}
	out, code = run(t, "--host-root", r, "mdev", "list")
	if code != 0 || !strings.Contains(out, "INSTANCE") || !strings.Contains(out, "vm1") {
		t.Fatalf("list table: %s", out)
	}
	// Dry-run remove prints the write and changes nothing.
	out, code = run(t, "--host-root", r, "mdev", "remove", ins[0].UUID, "--dry-run")
	if code != 0 || !strings.Contains(out, "echo 1 > "+r+"/sys/bus/mdev/devices/"+ins[0].UUID+"/remove") {
		t.Fatalf("dry-run remove exit %d: %s", code, out)
	}
	if !host.Exists(tr.Root.Sys("bus", "mdev", "devices", ins[0].UUID)) {
		t.Fatal("dry run removed the instance")
	}
	// Remove by owner, with --undefine.
	if out, code := run(t, "--host-root", r, "mdev", "remove", "--name", "vm1", "--undefine"); code != 0 || strings.Count(out, "removed ") != 2 {
		t.Fatalf("remove exit %d: %s", code, out)
	}
	if host.Exists(tr.Root.Etc("mdevctl.d", "mbochs", ins[0].UUID)) {
		t.Fatal("--undefine kept the definition")
	}
	if out, code := run(t, "--host-root", r, "mdev", "remove", ins[0].UUID); code != 0 || !strings.Contains(out, "already gone") {
		t.Fatalf("second remove exit %d: %s", code, out)
	}
}

func joinWrites(k *hosttest.Kernel) string {
	var b strings.Builder
	for _, w := range k.Writes() {
		b.WriteString(w.Path + "=" + w.Value + "\n")
	}
	return b.String()
}

func TestVFCLI(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	tr.SRIOVPF(hosttest.PCI{Addr: "0000:00:0a.0", Vendor: 0x1b36, Device: 0x0010, Class: 0x010802, Driver: "nvme"},
		hosttest.VFSpec{Total: 3, VFDevice: 0x0010, VFDriver: "nvme"}, 0)
	k := withKernel(t, tr)
	r := tr.Dir()
	out, code := run(t, "--host-root", r, "vf", "enable", "0000:00:0a.0", "--count", "2", "--driver", "vfio-pci", "--persist", "--output", "json")
	var pf mdev.PF
	if code != 0 || json.Unmarshal([]byte(out), &pf) != nil || pf.NumVFs != 2 || pf.VFs[1].Driver != "vfio-pci" || pf.Persisted == nil {
		t.Fatalf("enable exit %d: %s", code, out)
	}
	out, code = run(t, "--host-root", r, "vf", "enable", "00:0a.0", "-n", "3", "--driver", "vfio-pci")
	if code != 0 || !strings.Contains(out, "3/3") {
		t.Fatalf("change to 3 exit %d: %s", code, out)
	}
	_, err := runErr(t, "--host-root", r, "vf", "enable", "0000:00:0a.0", "--count", "4")
	if exitCode(err) != 2 || !strings.Contains(err.Error(), "at most 3") {
		t.Fatalf("over total: exit %d %v", exitCode(err), err)
	}
	out, code = run(t, "--host-root", r, "vf", "disable", "0000:00:0a.0", "--dry-run")
	if code != 0 || !strings.Contains(out, "echo 0 > "+r+"/sys/bus/pci/devices/0000:00:0a.0/sriov_numvfs") {
		t.Fatalf("dry-run disable exit %d: %s", code, out)
	}
	if out, code = run(t, "--host-root", r, "vf", "list"); code != 0 || !strings.Contains(out, "0000:00:0a.3=vfio-pci") || !strings.Contains(out, "2 (vfio-pci)") {
		t.Fatalf("list exit %d: %s", code, out)
	}
	if out, code = run(t, "--host-root", r, "vf", "disable", "0000:00:0a.0"); code != 0 || !strings.Contains(out, "0/3") {
		t.Fatalf("disable exit %d: %s", code, out)
	}
	if k.UsedNewID() {
		t.Fatal("new_id used")
	}
	_, err = runErr(t, "--host-root", r, "vf", "enable", "0000:00:0b.0", "--count", "1")
	if exitCode(err) != 6 {
		t.Fatalf("missing PF: exit %d %v", exitCode(err), err)
	}
}

func TestHostRestoreAndUnit(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	tr.Mbochs()
	withKernel(t, tr)
	r := tr.Dir()
	if _, code := run(t, "--host-root", r, "mdev", "create", "-p", "mbochs", "-t", "medium", "--name", "vm", "--define"); code != 0 {
		t.Fatal("create --define failed")
	}
	id := mdev.InstanceUUID("vm", 0)
	// Reboot: the instance goes away, its definition stays.
	if _, code := run(t, "--host-root", r, "mdev", "remove", id); code != 0 {
		t.Fatal("remove failed")
	}
	out, code := run(t, "--host-root", r, "host", "restore", "--dry-run")
	if code != 0 || !strings.Contains(out, "echo "+id+" > "+r+"/sys/devices/virtual/mbochs/mbochs/mdev_supported_types/mbochs-medium/create") &&
		!strings.Contains(out, id+" > ") {
		t.Fatalf("restore dry run exit %d: %s", code, out)
	}
	out, code = run(t, "--host-root", r, "host", "restore", "--output", "json")
	var steps []mdev.RestoreStep
	if code != 0 || json.Unmarshal([]byte(out), &steps) != nil || len(steps) != 1 || steps[0].Result != "applied" {
		t.Fatalf("restore exit %d: %s", code, out)
	}
	if !host.Exists(tr.Root.Sys("bus", "mdev", "devices", id)) {
		t.Fatal("not restored")
	}
	out, code = run(t, "--host-root", r, "host", "install-unit", "--exec", "/usr/local/bin/vgpu-host")
	if code != 0 || !strings.Contains(out, "systemctl daemon-reload") {
		t.Fatalf("install-unit exit %d: %s", code, out)
	}
	b, _ := os.ReadFile(tr.Root.Etc("systemd", "system", mdev.UnitName))
	if !strings.Contains(string(b), "ExecStart=/usr/local/bin/vgpu-host host restore") {
		t.Fatalf("unit:\n%s", b)
	}
}

// TestRemoveInUseJudgedByKernel: with libvirtd unreachable, an instance nothing holds is
// removed (an unreachable libvirtd is no reason to refuse); one whose /dev/vfio/N a process
// holds is busy (exit 5) naming the process; one the allocation ledger gives to a VM is refused
// (exit 4) naming the VM; --force removes either.
func TestRemoveInUseJudgedByKernel(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	tr.Mbochs()
	k := hosttest.NewKernel(tr)
	m := mdev.New(tr.Root, k)
	m.Domains = &ops.LazyLibvirt{Open: func() (mdev.DomainXMLLister, func(), error) { return nil, nil, errors.New("connection refused") }}
	ins, err := m.Create(context.Background(), mdev.CreateRequest{Parent: "mbochs", Profile: "small", Count: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Remove(context.Background(), []string{ins[0].UUID}, mdev.RemoveOptions{}); err != nil {
		t.Fatalf("remove with libvirtd unreachable: %v", err)
	}
	mi, _, err := host.ReadMdevInstance(tr.Root, ins[1].UUID)
	if err != nil || mi.IOMMUGroup < 0 {
		t.Fatalf("instance group: %+v %v", mi, err)
	}
	tr.HoldOpen(31337, "qemu-system-x86", fmt.Sprintf("/dev/vfio/%d", mi.IOMMUGroup))
	_, err = m.Remove(context.Background(), []string{ins[1].UUID}, mdev.RemoveOptions{})
	if exitCode(err) != exitBusy || !strings.Contains(err.Error(), "pid 31337 (qemu-system-x86)") {
		t.Fatalf("held instance: exit %d: %v", exitCode(err), err)
	}
	m.Allocated = func(in mdev.Instance) string {
		if in.UUID == ins[2].UUID {
			return "train-01"
		}
		return ""
	}
	_, err = m.Remove(context.Background(), []string{ins[2].UUID}, mdev.RemoveOptions{})
	if exitCode(err) != 4 || !strings.Contains(err.Error(), `VM "train-01"`) {
		t.Fatalf("allocated instance: exit %d: %v", exitCode(err), err)
	}
	if _, err := m.Remove(context.Background(), []string{ins[1].UUID, ins[2].UUID}, mdev.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
}

func TestVendorVGPUCLI(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	pf := tr.NvidiaSRIOVGPU("0000:40:01.0", "0000:41:00.0", 0, 4, nil)
	withKernel(t, tr)
	r := tr.Dir()
	out, code := run(t, "--host-root", r, "mdev", "types", pf.String())
	if code != 0 || !strings.Contains(out, "nvidia-vfio") || !strings.Contains(out, "NVIDIA L40S-8Q") {
		t.Fatalf("types exit %d: %s", code, out)
	}
	vf0 := tr.VFAddress(pf, 0)
	// A VF's address names its GPU; the type by short name.
	out, code = run(t, "--host-root", r, "mdev", "create", "-p", vf0.String(), "-t", "L40S-8Q", "-n", "2", "--name", "cad", "--output", "json")
	var ins []mdev.Instance
	if code != 0 || json.Unmarshal([]byte(out), &ins) != nil || len(ins) != 2 || ins[0].VF == nil || *ins[0].VF != vf0 || ins[0].Type != "1160" {
		t.Fatalf("create exit %d: %s", code, out)
	}
	if got := strings.TrimSpace(tr.ReadFile("sys/bus/pci/devices/" + vf0.String() + "/nvidia/current_vgpu_type")); got != "1160" {
		t.Fatalf("current_vgpu_type = %s", got)
	}
	// Another type on the same GPU is refused with the reason: exit 6 (no longer offered).
	_, err := runErr(t, "--host-root", r, "mdev", "create", "-p", pf.String(), "-t", "L40S-1Q")
	if exitCode(err) != 6 || !strings.Contains(err.Error(), "the GPU runs L40S-8Q") {
		t.Fatalf("second type: exit %d %v", exitCode(err), err)
	}
	out, err = runErr(t, "--host-root", r, "mdev", "place", "-t", "L40S-8Q", "-n", "3")
	if exitCode(err) != 5 || !strings.Contains(err.Error(), pf.String()+" has 2 free") {
		t.Fatalf("place: exit %d %v %s", exitCode(err), err, out)
	}
	if out, code := run(t, "--host-root", r, "mdev", "remove", "--name", "cad"); code != 0 || strings.Count(out, "removed") != 2 {
		t.Fatalf("remove exit %d: %s", code, out)
	}
	if got := strings.TrimSpace(tr.ReadFile("sys/bus/pci/devices/" + vf0.String() + "/nvidia/current_vgpu_type")); got != "0" {
		t.Fatalf("current_vgpu_type after remove = %s", got)
	}
}

// TestHostRestorePartialFailure: a persisted step that fails (VFs of a PF that is gone) makes
// 'host restore' exit non-zero and name it, while the other parts (a defined mdev) are still
// applied, in order: the sriov step comes first.
func TestHostRestorePartialFailure(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	tr.Mbochs()
	withKernel(t, tr)
	r := tr.Dir()
	tr.WriteFile("etc/vgpu-host/sriov.json", `{"version":1,"pfs":[{"address":"0000:99:00.0","num_vfs":2,"driver":"vfio-pci"}]}`)
	id := "83c32df7-d52e-4ec1-9668-1f3c7e4df107"
	tr.WriteFile("etc/mdevctl.d/mbochs/"+id, `{"mdev_type":"mbochs-small","start":"auto","attrs":[]}`)
	out, code := run(t, "--host-root", r, "host", "restore", "--output", "json")
	if code == 0 {
		t.Fatalf("restore with a failed step exited 0: %s", out)
	}
	var steps []mdev.RestoreStep
	if err := json.Unmarshal([]byte(out[:strings.LastIndex(out, "]")+1]), &steps); err != nil || len(steps) != 2 {
		t.Fatalf("restore output: %v\n%s", err, out)
	}
	if steps[0].Kind != "sriov" || steps[0].Result != "failed" || !strings.Contains(steps[0].Error, "0000:99:00.0") ||
		steps[1].Kind != "mdev" || steps[1].Result != "applied" {
		t.Fatalf("steps %+v", steps)
	}
	if !host.Exists(tr.Root.Sys("bus", "mdev", "devices", id)) {
		t.Fatal("the mdev part was not applied after the sriov part failed")
	}
}
