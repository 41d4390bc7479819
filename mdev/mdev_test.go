package mdev

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
)

// fakeDomains is a DomainUsers over a map from instance ID to domain names.
type fakeDomains map[string][]string

func (f fakeDomains) DomainsUsing(_ context.Context, in Instance) ([]string, error) {
	return f[in.ID()], nil
}

func newMgr(tr *hosttest.Tree) (*Manager, *hosttest.Kernel) {
	k := hosttest.NewKernel(tr)
	return New(tr.Root, k), k
}

func avail(t *testing.T, tr *hosttest.Tree, parentDir, typ string) string {
	t.Helper()
	return strings.TrimSpace(tr.ReadFile(filepath.Join(parentDir, "mdev_supported_types", typ, "available_instances")))
}

func countWrites(k *hosttest.Kernel, suffix string) int {
	n := 0
	for _, w := range k.Writes() {
		if strings.HasSuffix(w.Path, suffix) {
			n++
		}
	}
	return n
}

func TestMbochsCreateListRemove(t *testing.T) {
	tr := hosttest.New(t)
	dir := tr.Mbochs()
	m, _ := newMgr(tr)
	ctx := context.Background()

	const id = "83c32df7-d52e-4ec1-9668-1f3c7e4df107"
	got, err := m.Create(ctx, CreateRequest{Parent: "mbochs", Profile: "mbochs-medium", UUIDs: []string{strings.ToUpper(id)}})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].UUID != id || got[0].Type != "mbochs-medium" || got[0].TypeName != "medium" {
		t.Fatalf("created %+v", got)
	}
	if a := avail(t, tr, dir, "mbochs-medium"); a != "3" {
		t.Fatalf("available_instances after create = %s, want 3", a)
	}
	list, err := m.Instances()
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].UUID != id || !list[0].Active || list[0].Parent != "mbochs" || list[0].TypeName != "medium" {
		t.Fatalf("list = %+v", list)
	}
	// By name, the type resolves too ("small" is mbochs-small's name).
	if _, _, err := m.ResolveType("mbochs", "small"); err != nil {
		t.Fatal(err)
	}
	rm, err := m.Remove(ctx, []string{id}, RemoveOptions{})
	if err != nil || len(rm) != 1 {
		t.Fatalf("remove: %v %+v", err, rm)
	}
	if host.Exists(tr.Root.Sys("bus", "mdev", "devices", id)) {
		t.Fatal("instance still there")
	}
	if a := avail(t, tr, dir, "mbochs-medium"); a != "4" {
		t.Fatalf("available_instances after remove = %s", a)
	}
	// Removing again is a no-op.
	if rm, err := m.Remove(ctx, []string{id}, RemoveOptions{}); err != nil || len(rm) != 0 {
		t.Fatalf("second remove: %v %+v", err, rm)
	}
}

func TestOverAskRefusedNothingCreated(t *testing.T) {
	tr := hosttest.New(t)
	dir := tr.Mbochs()
	m, k := newMgr(tr)
	_, err := m.Create(context.Background(), CreateRequest{Parent: "mbochs", Profile: "mbochs-large", Count: 3, Owner: "vm1"})
	if !errors.Is(err, host.ErrBusy) || !strings.Contains(err.Error(), "available_instances=2") {
		t.Fatalf("err = %v", err)
	}
	if n := countWrites(k, "/create"); n != 0 {
		t.Fatalf("%d create writes for a refused request", n)
	}
	if a := avail(t, tr, dir, "mbochs-large"); a != "2" {
		t.Fatalf("available = %s", a)
	}
}

func TestCreateAllOrNoneReverts(t *testing.T) {
	tr := hosttest.New(t)
	dir := tr.Mbochs()
	m, k := newMgr(tr)
	creates := 0
	k.FailWrite = func(path, value string) error {
		if strings.HasSuffix(path, "/create") {
			creates++
			if creates == 3 {
				return syscall.EIO
			}
		}
		return nil
	}
	_, err := m.Create(context.Background(), CreateRequest{Parent: "mbochs", Profile: "mbochs-small", Count: 4, Owner: "vm1"})
	if err == nil || !errors.Is(err, syscall.EIO) {
		t.Fatalf("err = %v", err)
	}
	ents, _ := os.ReadDir(tr.Root.Sys("bus", "mdev", "devices"))
	if len(ents) != 0 {
		t.Fatalf("%d instances left after a failed all-or-none create", len(ents))
	}
	if n := countWrites(k, "/remove"); n != 2 {
		t.Fatalf("%d remove writes, want 2 (the two created before the failure)", n)
	}
	if a := avail(t, tr, dir, "mbochs-small"); a != "8" {
		t.Fatalf("available = %s", a)
	}
	if list, _ := m.Instances(); len(list) != 0 {
		t.Fatalf("state still lists %+v", list)
	}
}

func TestDeterministicUUIDsConverge(t *testing.T) {
	tr := hosttest.New(t)
	dir := tr.Mbochs()
	m, k := newMgr(tr)
	ctx := context.Background()
	req := CreateRequest{Parent: "mbochs", Profile: "mbochs-small", Count: 2, Owner: "desktop-1"}
	a, err := m.Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if a[0].UUID != InstanceUUID("desktop-1", 0) || a[1].UUID != InstanceUUID("desktop-1", 1) || a[0].UUID == a[1].UUID {
		t.Fatalf("uuids %s %s", a[0].UUID, a[1].UUID)
	}
	b, err := m.Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if b[0].UUID != a[0].UUID || b[1].UUID != a[1].UUID {
		t.Fatal("re-run gave other UUIDs")
	}
	if n := countWrites(k, "/create"); n != 2 {
		t.Fatalf("%d create writes over two runs, want 2", n)
	}
	if av := avail(t, tr, dir, "mbochs-small"); av != "6" {
		t.Fatalf("available = %s, want 6", av)
	}
	// Owner is recorded and listed.
	own, err := m.OwnerInstances("desktop-1")
	if err != nil || len(own) != 2 || own[1].Index != 1 {
		t.Fatalf("owner instances %+v %v", own, err)
	}
	// The same UUID of another type is a conflict, not a success.
	_, err = m.Create(ctx, CreateRequest{Parent: "mbochs", Profile: "mbochs-medium", Owner: "desktop-1"})
	if !errors.Is(err, host.ErrBusy) {
		t.Fatalf("type conflict: %v", err)
	}
	// Release by owner.
	if rm, err := m.RemoveOwner(ctx, "desktop-1", RemoveOptions{}); err != nil || len(rm) != 2 {
		t.Fatalf("remove owner: %v %+v", err, rm)
	}
	if av := avail(t, tr, dir, "mbochs-small"); av != "8" {
		t.Fatalf("available = %s after release", av)
	}
}

func TestRemoveRefusedWhenDomainUsesIt(t *testing.T) {
	tr := hosttest.New(t)
	tr.Mbochs()
	m, k := newMgr(tr)
	ctx := context.Background()
	in, err := m.Create(ctx, CreateRequest{Parent: "mbochs", Profile: "mbochs-small", Owner: "vm1"})
	if err != nil {
		t.Fatal(err)
	}
	m.Domains = fakeDomains{in[0].UUID: {"vm1"}}
	_, err = m.Remove(ctx, []string{in[0].UUID}, RemoveOptions{})
	if !errors.Is(err, host.ErrRefused) || !strings.Contains(err.Error(), "vm1") {
		t.Fatalf("err = %v", err)
	}
	if countWrites(k, "/remove") != 0 {
		t.Fatal("refused remove wrote")
	}
	if _, err := m.Remove(ctx, []string{in[0].UUID}, RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	if host.Exists(tr.Root.Sys("bus", "mdev", "devices", in[0].UUID)) {
		t.Fatal("forced remove left the instance")
	}
}

func TestA100MdevByNameAndOneTypePerGPU(t *testing.T) {
	tr := hosttest.New(t)
	gpu := tr.DatacenterGPU("0000:40:01.0", "0000:41:00.0", "nvidia", 0)
	tr.A100Mdev(gpu)
	m, _ := newMgr(tr)
	p, ty, err := m.ResolveType("0000:41:00.0", "A100-4C")
	if err != nil || ty.ID != "nvidia-471" || p.NUMA != 0 || p.Driver != "nvidia" || p.Backend != BackendMdev {
		t.Fatalf("resolve: %v %+v %+v", err, p, ty)
	}
	if _, ty, _ := m.ResolveType("0000:41:00.0", "GRID A100-10C"); ty.ID != "nvidia-474" {
		t.Fatalf("full name resolved to %q", ty.ID)
	}
	if _, _, err := m.ResolveType("0000:41:00.0", "A100-7C"); !errors.Is(err, host.ErrNotFound) || !strings.Contains(err.Error(), "nvidia-475 (GRID A100-20C)") {
		t.Fatalf("unknown type: %v", err)
	}
	if _, err := m.Create(context.Background(), CreateRequest{Parent: "0000:41:00.0", Profile: "A100-4C", Owner: "vm"}); err != nil {
		t.Fatal(err)
	}
	// NVIDIA's driver drops other types' availability to 0 while one runs: emulate it and
	// check that Parents reports the running type (placement explains refusals with it).
	tr.WriteFile("sys/devices/pci0000:00/0000:40:01.0/0000:41:00.0/mdev_supported_types/nvidia-475/available_instances", "0\n")
	p, _ = m.Parent("0000:41:00.0")
	if len(p.Running) != 1 || p.Running[0] != "nvidia-471" {
		t.Fatalf("running = %v", p.Running)
	}
	_, err = Place(Request{Profile: "A100-20C", Count: 1, NUMA: -1}, []Parent{p})
	if !errors.Is(err, host.ErrBusy) || !strings.Contains(err.Error(), "0000:41:00.0 runs A100-4C") {
		t.Fatalf("place: %v", err)
	}
}

func TestIntelGVTg(t *testing.T) {
	tr := hosttest.New(t)
	tr.IntelGVTg()
	m, _ := newMgr(tr)
	ps, err := m.Parents()
	if err != nil || len(ps) != 1 || ps[0].Name != "0000:00:02.0" || ps[0].Driver != "i915" || len(ps[0].Types) != 2 {
		t.Fatalf("parents %+v %v", ps, err)
	}
	got, err := m.Create(context.Background(), CreateRequest{Parent: "0000:00:02.0", Profile: "GVTg_V5_8", Count: 2})
	if err != nil || len(got) != 2 || got[0].Type != "i915-GVTg_V5_8" {
		t.Fatalf("create: %v %+v", err, got)
	}
	if got[0].UUID == got[1].UUID {
		t.Fatal("random UUIDs collided")
	}
	if a := avail(t, tr, "sys/devices/pci0000:00/0000:00:02.0", "i915-GVTg_V5_8"); a != "5" {
		t.Fatalf("available = %s", a)
	}
}

func TestDryRunRecordsWritesOnly(t *testing.T) {
	tr := hosttest.New(t)
	tr.Mbochs()
	rec := &host.Recorder{}
	m := New(tr.Root, rec)
	m.DryRun = true
	_, err := m.Create(context.Background(), CreateRequest{Parent: "mbochs", Profile: "mbochs-small", Count: 2, Owner: "vm1"})
	if err != nil {
		t.Fatal(err)
	}
	w := rec.Writes()
	if len(w) != 2 || w[0].Value != InstanceUUID("vm1", 0) || !strings.HasSuffix(w[0].Path, "mbochs/mdev_supported_types/mbochs-small/create") {
		t.Fatalf("writes %+v", w)
	}
	if host.Exists(tr.Root.StateDir(stateFileName)) {
		t.Fatal("dry run wrote the state file")
	}
	ents, _ := os.ReadDir(tr.Root.Sys("bus", "mdev", "devices"))
	if len(ents) != 0 {
		t.Fatal("dry run created instances")
	}
}

func TestDefineWritesMdevctlFormat(t *testing.T) {
	tr := hosttest.New(t)
	tr.Mbochs()
	m, _ := newMgr(tr)
	ctx := context.Background()
	in, err := m.Create(ctx, CreateRequest{Parent: "mbochs", Profile: "mbochs-small", Owner: "vm1"})
	if err != nil {
		t.Fatal(err)
	}
	d, err := m.Define(Definition{UUID: in[0].UUID})
	if err != nil {
		t.Fatal(err)
	}
	want := tr.Root.Etc("mdevctl.d", "mbochs", in[0].UUID)
	if d.Path != want {
		t.Fatalf("path %s, want %s", d.Path, want)
	}
	b, err := os.ReadFile(want)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != "{\n  \"mdev_type\": \"mbochs-small\",\n  \"start\": \"auto\",\n  \"attrs\": []\n}\n" {
		t.Fatalf("mdevctl file:\n%s", b)
	}
	var generic map[string]any
	if err := json.Unmarshal(b, &generic); err != nil || len(generic) != 3 {
		t.Fatalf("not mdevctl's three keys: %v %v", generic, err)
	}
	// Defining a stopped instance needs parent and type; by name works.
	const other = "5cf14a12-a437-4c82-a13f-70e945782d7b"
	if _, err := m.Define(Definition{UUID: other}); !errors.Is(err, host.ErrNotFound) {
		t.Fatalf("define inactive without type: %v", err)
	}
	if d, err := m.Define(Definition{UUID: other, Parent: "mbochs", Type: "large", Start: "manual"}); err != nil || d.Type != "mbochs-large" {
		t.Fatalf("define by name: %v %+v", err, d)
	}
	defs, _ := m.Definitions()
	if len(defs) != 2 {
		t.Fatalf("definitions %+v", defs)
	}
	list, _ := m.Instances()
	var defined, active int
	for _, in := range list {
		if in.Defined {
			defined++
		}
		if in.Active {
			active++
		}
	}
	if len(list) != 2 || defined != 2 || active != 1 {
		t.Fatalf("instances %+v", list)
	}
	if rm, err := m.Undefine(other); err != nil || len(rm) != 1 || host.Exists(rm[0]) {
		t.Fatalf("undefine: %v %v", err, rm)
	}
}

// TestKilledCreateConverges: a create killed (kill -9) after two of its three kernel writes,
// before its one state update, left two instances and no record (plus a temporary file of an
// atomic write it never renamed). Re-running the same command creates only the third, records
// all three for the owner, and a release then removes all three.
func TestKilledCreateConverges(t *testing.T) {
	tr := hosttest.New(t)
	dir := tr.Mbochs()
	tr.CreateMdev(dir, "mbochs-small", InstanceUUID("vm", 0))
	tr.CreateMdev(dir, "mbochs-small", InstanceUUID("vm", 1))
	tr.WriteFile("var/lib/vgpu-host/.vgpu-instances.json.tmp123", `{"version":1,"instan`)
	m, k := newMgr(tr)
	ctx := context.Background()
	got, err := m.Create(ctx, CreateRequest{Parent: "mbochs", Profile: "small", Count: 3, Owner: "vm"})
	if err != nil || len(got) != 3 {
		t.Fatalf("re-run: %v %+v", err, got)
	}
	if n := countWrites(k, "/create"); n != 1 {
		t.Fatalf("%d create writes, want 1 (the instance the killed run did not make)", n)
	}
	own, err := m.OwnerInstances("vm")
	if err != nil || len(own) != 3 || own[2].UUID != InstanceUUID("vm", 2) {
		t.Fatalf("owner after re-run: %v %+v", err, own)
	}
	if rm, err := m.RemoveOwner(ctx, "vm", RemoveOptions{}); err != nil || len(rm) != 3 {
		t.Fatalf("release: %v %+v", err, rm)
	}
	if av := avail(t, tr, dir, "mbochs-small"); av != "8" {
		t.Fatalf("available = %s after release", av)
	}
}

// TestCorruptStateNamesFileAndFix: a state file something else truncated is an error naming
// the file and how to recover, and nothing is created on top of it.
func TestCorruptStateNamesFileAndFix(t *testing.T) {
	tr := hosttest.New(t)
	tr.Mbochs()
	tr.WriteFile("var/lib/vgpu-host/vgpu-instances.json", `{"version":1,"instances":[{"backend":"md`)
	m, k := newMgr(tr)
	path := tr.Root.StateDir("vgpu-instances.json")
	for name, f := range map[string]func() error{
		"list": func() error { _, err := m.Instances(); return err },
		"create": func() error {
			_, err := m.Create(context.Background(), CreateRequest{Parent: "mbochs", Profile: "small", Owner: "vm"})
			return err
		},
		"remove": func() error { _, err := m.RemoveOwner(context.Background(), "vm", RemoveOptions{}); return err },
	} {
		err := f()
		if !errors.Is(err, host.ErrInvalid) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "mv "+path) {
			t.Fatalf("%s with a corrupt state: %v", name, err)
		}
	}
	if n := countWrites(k, "/create"); n != 0 {
		t.Fatalf("%d create writes with a corrupt state", n)
	}
}
