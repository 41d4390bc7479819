package lifecycle

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"libvirt.org/go/libvirtxml"

	"github.com/vgpu-host/vgpu-host/domains"
	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/ledger"
	"github.com/vgpu-host/vgpu-host/vgpu"
	"github.com/vgpu-host/vgpu-host/virt"
)

// migrationHost is a host with the kernel's mtty sample (type mtty-2, two free), mbochs, and an
// L40S VF at vf with vendor-VFIO types 557 NVIDIA L40S-4Q and 558 NVIDIA L40S-8Q.
func migrationHost(root string, vf string, mtty bool) *host.Inventory {
	a := host.MustParseAddress
	pf := a(vf)
	pf.Function = 0
	pf.Device = 0
	inv := &host.Inventory{Root: root, IOMMU: true,
		Devices: []host.Device{
			{Address: pf, VendorID: "10de", DeviceID: "26b9", DeviceName: "AD102GL [L40S]", Class: "030200", IsGPU: true,
				Driver: "nvidia", IOMMUGroup: 50, NUMANode: -1, SRIOV: &host.SRIOV{TotalVFs: 32, NumVFs: 1, VFs: []host.Address{a(vf)}}},
			{Address: a(vf), VendorID: "10de", DeviceID: "26b9", DeviceName: "AD102GL [L40S]", Class: "030200", IsGPU: true,
				Driver: "nvidia", IOMMUGroup: 51, NUMANode: -1, PhysFn: &pf,
				VendorVGPU: &host.VendorVGPU{Creatable: []host.VendorVGPUType{{ID: 557, Name: "NVIDIA L40S-4Q"}, {ID: 558, Name: "NVIDIA L40S-8Q"}}}},
		},
		MdevParents: []host.MdevParent{{Parent: "mbochs", Types: []host.MdevType{{ID: "mbochs-1", Name: "mbochs-1", DeviceAPI: "vfio-pci", AvailableInstances: 1}}}},
	}
	if mtty {
		inv.MdevParents = append(inv.MdevParents, host.MdevParent{Parent: "mtty", Types: []host.MdevType{{ID: "mtty-2", Name: "Dual-port-serial", DeviceAPI: "vfio-pci", AvailableInstances: 2}}})
	}
	return inv
}

// localTarget is the target's vgpu-host in this process; it records the ops it was asked.
type localTarget struct {
	l   *Lifecycle
	mu  sync.Mutex
	ops []IncomingOp
}

func (t *localTarget) Incoming(ctx context.Context, req IncomingRequest) (*IncomingReply, error) {
	t.mu.Lock()
	t.ops = append(t.ops, req.Op)
	t.mu.Unlock()
	return t.l.Incoming(ctx, req)
}

const targetURI = "qemu+ssh://host-b/system"

// twoHosts returns the source (VF 0000:41:00.4) and target (VF 0000:c1:00.6) of a migration,
// the target reachable from the source's fake libvirt at targetURI.
func twoHosts(t *testing.T, targetMtty bool) (a, b *env, la, lb *Lifecycle) {
	a, b = newEnv(t), newEnv(t)
	a.conn.AddPeer(targetURI, b.conn)
	la = a.lc(func(o *Options) {
		o.Scan = func(r host.Root) (*host.Inventory, error) { return migrationHost(r.Dir(), "0000:41:00.4", true), nil }
	})
	lb = b.lc(func(o *Options) {
		o.Scan = func(r host.Root) (*host.Inventory, error) {
			return migrationHost(r.Dir(), "0000:c1:00.6", targetMtty), nil
		}
	})
	return a, b, la, lb
}

const mttyAndL40S = "    - vgpu:\n        profile: mtty-2\n    - vgpu:\n        profile: L40S-4Q\n        mode: vendor-vfio\n"

// applied applies the spec on a and checks it runs with its two devices.
func applied(t *testing.T, a *env, la *Lifecycle, name, gpus string) {
	t.Helper()
	if _, err := la.Apply(context.Background(), spec(t, name, gpus)); err != nil {
		t.Fatal(err)
	}
	if st, _ := a.conn.State(context.Background(), name); st != virt.StateRunning {
		t.Fatalf("state %s", st)
	}
}

func entryOf(t *testing.T, l *ledger.Ledger, name string) *ledger.VM {
	t.Helper()
	b, err := l.Read()
	if err != nil {
		t.Fatal(err)
	}
	return b.VM(name)
}

func TestMigrateMovesVMDevicesAndClaims(t *testing.T) {
	t.Parallel()
	a, b, la, lb := twoHosts(t, true)
	ctx := context.Background()
	name := "vgpuhost-mig-a"
	applied(t, a, la, name, mttyAndL40S)
	before := entryOf(t, a.ledger, name)
	mdevUUID := vgpu.InstanceUUID(name, 0)

	res, err := la.Migrate(ctx, name, MigrateOptions{Target: &localTarget{l: lb}, DestURI: targetURI, SharedStorage: true})
	if err != nil {
		t.Fatal(err)
	}
	// The source: no domain, no ledger entry, its mdev removed and VF type cleared.
	if slices.Contains(a.conn.Domains(), name) || entryOf(t, a.ledger, name) != nil || !a.host.clean() {
		t.Fatalf("source keeps something: domains %v, entry %+v, mdevs %v vgpus %v", a.conn.Domains(), entryOf(t, a.ledger, name), a.host.mdevs, a.host.vgpus)
	}
	if len(res.Released) != len(before.Claims) {
		t.Errorf("released %v, held %v", res.Released, before.Claims)
	}
	// The target: the domain runs, with the target's VF and its mdev, both in its ledger.
	if st, err := b.conn.State(ctx, name); err != nil || st != virt.StateRunning {
		t.Fatalf("target state %s, %v", st, err)
	}
	e := entryOf(t, b.ledger, name)
	if e == nil || e.Phase != ledger.PhaseApplied {
		t.Fatalf("target ledger entry %+v", e)
	}
	want := []string{"mdev:" + mdevUUID, "vendor-vgpu:0000:c1:00.6"}
	var got []string
	for _, c := range e.Claims {
		got = append(got, c.Key())
	}
	if !slices.Equal(got, want) {
		t.Errorf("target claims %v, want %v", got, want)
	}
	if b.host.mdevs[mdevUUID] != "mtty-2" || b.host.vgpus["0000:c1:00.6"] == "" {
		t.Errorf("target host: mdevs %v vgpus %v", b.host.mdevs, b.host.vgpus)
	}
	x, _ := b.conn.DomainXML(ctx, name)
	hd, ok := virt.DomainHostdevs(x)
	if !ok || len(hd.PCI) != 1 || hd.PCI[0].String() != "0000:c1:00.6" || len(hd.Mdevs) != 1 || hd.Mdevs[0] != mdevUUID {
		t.Errorf("target domain's hostdevs %+v, want VF 0000:c1:00.6 and mdev %s", hd, mdevUUID)
	}
	// The target owns it now: destroy there stops and undefines it and gives its devices back.
	if _, err := lb.Destroy(ctx, name); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(b.conn.Domains(), name) || !b.host.clean() {
		t.Errorf("target destroy left domains %v, host mdevs %v vgpus %v", b.conn.Domains(), b.host.mdevs, b.host.vgpus)
	}
}

// TestMigrateFailureLeavesSource: the target's libvirt refuses the migration after the target
// prepared its devices: the VM runs on the source with its ledger and devices as they were, and
// the target's reservation and devices are gone.
func TestMigrateFailureLeavesSource(t *testing.T) {
	t.Parallel()
	a, b, la, lb := twoHosts(t, true)
	ctx := context.Background()
	name := "vgpuhost-mig-b"
	applied(t, a, la, name, mttyAndL40S)
	before := entryOf(t, a.ledger, name)
	b.conn.Fail("MigrateIn", errors.New("hook refused"))
	tg := &localTarget{l: lb}
	_, err := la.Migrate(ctx, name, MigrateOptions{Target: tg, DestURI: targetURI, SharedStorage: true})
	if err == nil || !strings.Contains(err.Error(), "hook refused") || !strings.Contains(err.Error(), "running on") {
		t.Fatalf("err %v", err)
	}
	if !slices.Equal(tg.ops, []IncomingOp{OpPrepare, OpAbort}) {
		t.Errorf("target ops %v", tg.ops)
	}
	if st, _ := a.conn.State(ctx, name); st != virt.StateRunning {
		t.Errorf("source state %s", st)
	}
	after := entryOf(t, a.ledger, name)
	if after == nil || after.Phase != ledger.PhaseApplied || !vgpu.SameClaims(after.Claims, before.Claims) || len(after.Live()) != len(before.Live()) {
		t.Errorf("source ledger changed: %+v, was %+v", after, before)
	}
	if len(a.host.mdevs) != 1 || len(a.host.vgpus) != 1 {
		t.Errorf("source devices changed: %v %v", a.host.mdevs, a.host.vgpus)
	}
	if entryOf(t, b.ledger, name) != nil || !b.host.clean() || len(b.conn.Domains()) != 0 {
		t.Errorf("target not rolled back: entry %+v, mdevs %v vgpus %v, domains %v", entryOf(t, b.ledger, name), b.host.mdevs, b.host.vgpus, b.conn.Domains())
	}
	// And it can migrate once the target accepts.
	b.conn.Fail("MigrateIn", nil)
	if _, err := la.Migrate(ctx, name, MigrateOptions{Target: tg, DestURI: targetURI, SharedStorage: true}); err != nil {
		t.Fatal(err)
	}
}

// TestMigrateTargetWithoutDevice: a target without the mdev type refuses in prepare; nothing
// changed on either side.
func TestMigrateTargetWithoutDevice(t *testing.T) {
	t.Parallel()
	a, b, la, lb := twoHosts(t, false)
	ctx := context.Background()
	name := "vgpuhost-mig-c"
	applied(t, a, la, name, mttyAndL40S)
	_, err := la.Migrate(ctx, name, MigrateOptions{Target: &localTarget{l: lb}, DestURI: targetURI, SharedStorage: true})
	if err == nil || !strings.Contains(err.Error(), "no equivalent device") || !strings.Contains(err.Error(), "mtty-2") {
		t.Fatalf("err %v", err)
	}
	if st, _ := a.conn.State(ctx, name); st != virt.StateRunning || entryOf(t, a.ledger, name).Phase != ledger.PhaseApplied {
		t.Errorf("source changed: %s", st)
	}
	if entryOf(t, b.ledger, name) != nil || !b.host.clean() {
		t.Errorf("target changed")
	}
}

// TestMigrateRefusesEarly: what cannot migrate is refused before the target is asked anything.
func TestMigrateRefusesEarly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name, gpus string
		opts       MigrateOptions
		want       []string
		is         error
	}{
		{"mbochs", "    - vgpu:\n        profile: mbochs-1\n", MigrateOptions{SharedStorage: true}, []string{"mbochs", "no VFIO migration"}, host.ErrUnsupported},
		{"virgl", "    - virtioGpu:\n        virgl: true\n  graphics:\n    type: egl-headless\n", MigrateOptions{SharedStorage: true}, []string{"virgl"}, host.ErrUnsupported},
		{"disk", "    - vgpu:\n        profile: mtty-2\n", MigrateOptions{}, []string{"host disk", "--copy-storage"}, host.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b, la, lb := twoHosts(t, true)
			name := "vgpuhost-mig-" + tc.name
			applied(t, a, la, name, tc.gpus)
			tg := &localTarget{l: lb}
			tc.opts.Target, tc.opts.DestURI = tg, targetURI
			_, err := la.Migrate(ctx, name, tc.opts)
			if err == nil || !errors.Is(err, tc.is) {
				t.Fatalf("err %v, want %v", err, tc.is)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err %q does not say %q", err, w)
				}
			}
			if len(tg.ops) != 0 || entryOf(t, b.ledger, name) != nil {
				t.Errorf("target was asked %v", tg.ops)
			}
			if st, _ := a.conn.State(ctx, name); st != virt.StateRunning {
				t.Errorf("source state %s", st)
			}
		})
	}
}

// TestMigratePassthroughRefusedNamingDriver: a passthrough GPU on vfio-pci cannot migrate.
func TestMigratePassthroughRefusedNamingDriver(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	la := e.lc()
	name := "vgpuhost-mig-pt"
	if _, err := la.Apply(ctx, spec(t, name, anyNvidia)); err != nil {
		t.Fatal(err)
	}
	_, err := la.Migrate(ctx, name, MigrateOptions{Target: &localTarget{l: newEnv(t).lc()}, DestURI: targetURI, SharedStorage: true})
	if !errors.Is(err, host.ErrUnsupported) || !strings.Contains(err.Error(), "bound to nvidia") || !strings.Contains(err.Error(), "mlx5_vfio_pci") {
		t.Fatalf("err %v", err)
	}
}

// TestMigrateDryRunChangesNothing prints both hosts' steps and changes neither.
func TestMigrateDryRunChangesNothing(t *testing.T) {
	t.Parallel()
	a, b, la, lb := twoHosts(t, true)
	ctx := context.Background()
	name := "vgpuhost-mig-d"
	applied(t, a, la, name, mttyAndL40S)
	res, err := la.Migrate(ctx, name, MigrateOptions{Target: &localTarget{l: lb}, DestURI: targetURI, SharedStorage: true, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	all := strings.Join(append(res.SourceSteps, res.TargetSteps...), "\n")
	for _, w := range []string{"vendor-vgpu 0000:41:00.4 -> 0000:c1:00.6", "migrate domain " + name + " to " + targetURI, "undo create-mdev", "undo assign-vgpu",
		"create mdev", "mtty-2", "assign vGPU type 557"} {
		if !strings.Contains(all, w) {
			t.Errorf("dry run does not say %q:\n%s", w, all)
		}
	}
	if entryOf(t, b.ledger, name) != nil || !b.host.clean() || len(b.conn.Domains()) != 0 {
		t.Error("dry run changed the target")
	}
	if st, _ := a.conn.State(ctx, name); st != virt.StateRunning || entryOf(t, a.ledger, name) == nil {
		t.Error("dry run changed the source")
	}
}

// TestMigrateTargetAbortRefusesRunningDomain: the target never pulls devices from under a
// domain that arrived; commit refuses without the domain.
func TestMigrateTargetAbortRefusesRunningDomain(t *testing.T) {
	t.Parallel()
	b := newEnv(t)
	lb := b.lc(func(o *Options) {
		o.Scan = func(r host.Root) (*host.Inventory, error) { return migrationHost(r.Dir(), "0000:c1:00.6", true), nil }
	})
	ctx := context.Background()
	name := "vgpuhost-mig-e"
	req := IncomingRequest{Op: OpPrepare, VM: name, Devices: []MigratingDevice{{Kind: vgpu.ClaimMdev, Type: "mtty-2", Source: vgpu.InstanceUUID(name, 0)}}}
	if _, err := lb.Incoming(ctx, req); err != nil {
		t.Fatal(err)
	}
	if e := entryOf(t, b.ledger, name); e == nil || e.Phase != ledger.PhaseIncoming {
		t.Fatalf("entry %+v", e)
	}
	if _, err := lb.Incoming(ctx, IncomingRequest{Op: OpCommit, VM: name}); !virt.IsNotFound(err) {
		t.Errorf("commit without the domain: %v", err)
	}
	b.conn.AddForeignDomain(name, "<domain type='qemu'><name>"+name+"</name></domain>", true)
	if _, err := lb.Incoming(ctx, IncomingRequest{Op: OpAbort, VM: name}); !errors.Is(err, host.ErrBusy) {
		t.Errorf("abort with the domain running: %v", err)
	}
	if len(b.host.mdevs) != 1 {
		t.Errorf("abort pulled the mdev: %v", b.host.mdevs)
	}
	// A malformed request is refused as such.
	if _, err := lb.Incoming(ctx, IncomingRequest{Op: "prepare", VM: "../x"}); !errors.Is(err, host.ErrInvalid) {
		t.Errorf("bad name: %v", err)
	}
	if _, err := lb.Incoming(ctx, IncomingRequest{Op: "prepare", VM: "x", Devices: []MigratingDevice{{Kind: vgpu.ClaimPCI, Type: "t", Source: "s"}}}); !errors.Is(err, host.ErrInvalid) {
		t.Errorf("pci device: %v", err)
	}
}

// TestRewriteXMLTyped rewrites an mdev UUID and a VF address, and refuses a device that is not
// in the domain.
func TestRewriteXMLTyped(t *testing.T) {
	t.Parallel()
	x := `<domain type='qemu'><name>v</name><devices>
<hostdev mode='subsystem' type='mdev' model='vfio-pci'><source><address uuid='11111111-1111-1111-1111-111111111111'/></source></hostdev>
<hostdev mode='subsystem' type='pci' managed='no'><source><address domain='0x0000' bus='0x41' slot='0x00' function='0x4'/></source></hostdev>
</devices></domain>`
	var d libvirtxml.Domain
	if err := d.Unmarshal(x); err != nil {
		t.Fatal(err)
	}
	out, err := rewriteXML(&d, []MigratingDevice{
		{Kind: vgpu.ClaimMdev, Source: "11111111-1111-1111-1111-111111111111", Target: "22222222-2222-2222-2222-222222222222"},
		{Kind: vgpu.ClaimVendorVGPU, Source: "0000:41:00.4", Target: "0000:c1:00.6"},
	})
	if err != nil {
		t.Fatal(err)
	}
	hd, _ := virt.DomainHostdevs(out)
	if len(hd.Mdevs) != 1 || hd.Mdevs[0] != "22222222-2222-2222-2222-222222222222" || len(hd.PCI) != 1 || hd.PCI[0].String() != "0000:c1:00.6" {
		t.Errorf("rewritten %+v:\n%s", hd, out)
	}
	if hd0, _ := virt.DomainHostdevs(x); hd0.PCI[0].String() != "0000:41:00.4" {
		t.Error("rewrite changed its input")
	}
	if _, err := rewriteXML(&d, []MigratingDevice{{Kind: vgpu.ClaimMdev, Source: "33333333-3333-3333-3333-333333333333", Target: "x"}}); !errors.Is(err, host.ErrInvalid) {
		t.Errorf("missing device: %v", err)
	}
	if _, err := domains.Marshal(&d); err != nil {
		t.Fatal(err)
	}
}

// TestMigrateMttyOnFakeSysfs migrates a VM with an mtty mdev between two fake sysfs trees with
// the real host preparation (mdev manager over hosttest's kernel emulator, host.Scan of each
// tree): the target's mtty parent gets the instance (same UUID: it derives from the VM's name)
// and the source's loses it.
func TestMigrateMttyOnFakeSysfs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	type side struct {
		tree *hosttest.Tree
		conn *virt.Fake
		l    *Lifecycle
	}
	mk := func() side {
		tree := hosttest.New(t)
		tree.MdevParentVirtual("mtty", []hosttest.MdevType{{ID: "mtty-2", Name: "Dual-port-serial", Available: 2}})
		k := hosttest.NewKernel(tree)
		conn := virt.NewFake("qemu")
		return side{tree, conn, New(Options{Root: tree.Root, Conn: conn, Host: NewSysfsPrep(tree.Root, k, k), Ledger: ledger.Open(tree.Root)})}
	}
	a, b := mk(), mk()
	a.conn.AddPeer(targetURI, b.conn)
	name := "vgpuhost-mig-sysfs"
	if _, err := a.l.Apply(ctx, spec(t, name, "    - vgpu:\n        profile: mtty-2\n")); err != nil {
		t.Fatal(err)
	}
	uuid := vgpu.InstanceUUID(name, 0)
	instance := func(s side) bool {
		_, err := os.Lstat(s.tree.Root.Path("sys/bus/mdev/devices", uuid))
		return err == nil
	}
	if !instance(a) || instance(b) {
		t.Fatalf("before: instance on A %v, on B %v", instance(a), instance(b))
	}
	res, err := a.l.Migrate(ctx, name, MigrateOptions{Target: &localTarget{l: b.l}, DestURI: targetURI, SharedStorage: true})
	if err != nil {
		t.Fatal(err)
	}
	if instance(a) || !instance(b) {
		t.Fatalf("after: instance on A %v, on B %v; %+v", instance(a), instance(b), res)
	}
	if len(res.Devices) != 1 || res.Devices[0].Target != uuid {
		t.Errorf("devices %+v", res.Devices)
	}
	if _, err := b.l.Destroy(ctx, name); err != nil {
		t.Fatal(err)
	}
	if instance(b) {
		t.Error("destroy on B left the instance")
	}
}

// TestMigrateFinishesInterrupted: the source's vgpu-host died after libvirt moved the domain
// (its ledger still holds the VM, the target's holds an incoming reservation): migrate again
// commits the target and releases the source. A VM on neither host is said so, and nothing
// changes.
func TestMigrateFinishesInterrupted(t *testing.T) {
	t.Parallel()
	a, b, la, lb := twoHosts(t, true)
	ctx := context.Background()
	name := "vgpuhost-mig-f"
	applied(t, a, la, name, mttyAndL40S)
	tg := &localTarget{l: lb}
	// What the dead process did: the target's prepare, then libvirt's migration.
	src, err := la.migrationSource(ctx, name, MigrateOptions{SharedStorage: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lb.Incoming(ctx, IncomingRequest{Op: OpPrepare, VM: name, Devices: src.devices}); err != nil {
		t.Fatal(err)
	}
	if err := a.conn.Migrate(ctx, name, virt.MigrateOptions{DestURI: targetURI}); err != nil {
		t.Fatal(err)
	}
	res, err := la.Migrate(ctx, name, MigrateOptions{Target: tg, DestURI: targetURI, SharedStorage: true})
	if err != nil {
		t.Fatal(err)
	}
	if entryOf(t, a.ledger, name) != nil || !a.host.clean() || len(res.Released) != 2 {
		t.Errorf("source not released: %+v, mdevs %v vgpus %v", res, a.host.mdevs, a.host.vgpus)
	}
	if e := entryOf(t, b.ledger, name); e == nil || e.Phase != ledger.PhaseApplied {
		t.Errorf("target entry %+v", e)
	}

	// On neither host: said, nothing changed.
	name = "vgpuhost-mig-g"
	applied(t, a, la, name, "    - vgpu:\n        profile: mtty-2\n")
	if err := a.conn.Destroy(ctx, name); err != nil {
		t.Fatal(err)
	}
	if err := a.conn.Undefine(ctx, name); err != nil {
		t.Fatal(err)
	}
	_, err = la.Migrate(ctx, name, MigrateOptions{Target: tg, DestURI: targetURI, SharedStorage: true})
	if err == nil || !strings.Contains(err.Error(), "nor does the target") {
		t.Fatalf("err %v", err)
	}
	if e := entryOf(t, a.ledger, name); e == nil || e.Phase != ledger.PhaseApplied {
		t.Errorf("source entry changed: %+v", e)
	}
}
