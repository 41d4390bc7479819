package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/domains"
	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/ledger"
	"github.com/vgpu-host/vgpu-host/step"
	"github.com/vgpu-host/vgpu-host/vfio"
	"github.com/vgpu-host/vgpu-host/virt"
)

// fakeHost is a HostPrep that keeps the host state in maps, so tests can assert that nothing
// is left bound or created.
type fakeHost struct {
	mu    sync.Mutex
	bound map[string]string // function -> VM
	mdevs map[string]string // uuid -> type
	vgpus map[string]string // VF -> type
	fail  string            // action to fail
	// refuse are the refusals Preflight reports for every group.
	refuse []vfio.Refusal
}

func (h *fakeHost) Preflight(context.Context, []host.Address) ([]vfio.Refusal, error) {
	return h.refuse, nil
}

func newFakeHost() *fakeHost {
	return &fakeHost{bound: map[string]string{}, mdevs: map[string]string{}, vgpus: map[string]string{}}
}

func (h *fakeHost) AssignVGPU(_ context.Context, _ string, vf host.Address, typ string, _ int) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.vgpus[vf.String()] = typ
	return nil
}

func (h *fakeHost) ClearVGPU(_ context.Context, _ string, vf host.Address, _ string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.vgpus, vf.String())
	return nil
}

func (h *fakeHost) BindGroup(_ context.Context, vm string, addrs []host.Address, _ []string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fail == string(step.ActBindGroup) {
		return fmt.Errorf("bind: %w", host.ErrBusy)
	}
	for _, a := range addrs {
		h.bound[a.String()] = vm
	}
	return nil
}

func (h *fakeHost) RestoreGroup(_ context.Context, _ string, addrs []host.Address) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, a := range addrs {
		delete(h.bound, a.String())
	}
	return nil
}

func (h *fakeHost) CreateMdev(_ context.Context, _, _, typ, uuid string, _ int) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.mdevs[uuid] = typ
	return nil
}

func (h *fakeHost) RemoveMdev(_ context.Context, _, uuid string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.mdevs, uuid)
	return nil
}

func (h *fakeHost) clean() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.bound) == 0 && len(h.mdevs) == 0 && len(h.vgpus) == 0
}

// inventory has four NVIDIA GPUs, each with an HDMI audio companion, in groups of their own.
func inventory(root string) *host.Inventory {
	inv := &host.Inventory{Root: root, IOMMU: true}
	for i := 0; i < 4; i++ {
		gpu := host.Address{Bus: uint8(0x41 + i)}
		audio := host.Address{Bus: uint8(0x41 + i), Function: 1}
		inv.Devices = append(inv.Devices,
			host.Device{Address: gpu, VendorID: "10de", DeviceID: "2236", DeviceName: "GA102GL [A10]", Class: "030200", Driver: "nvidia", IOMMUGroup: 20 + i, NUMANode: -1, IsGPU: true, Companions: []host.Address{audio}},
			host.Device{Address: audio, VendorID: "10de", DeviceID: "1aef", Class: "040300", Driver: "snd_hda_intel", IOMMUGroup: 20 + i, NUMANode: -1})
		inv.Groups = append(inv.Groups, host.Group{ID: 20 + i, Members: []host.GroupMember{{Address: gpu}, {Address: audio}}})
	}
	return inv
}

type env struct {
	root   host.Root
	conn   *virt.Fake
	host   *fakeHost
	ledger *ledger.Ledger
}

func newEnv(t *testing.T) *env {
	root, err := host.NewRoot(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return &env{root: root, conn: virt.NewFake("qemu"), host: newFakeHost(), ledger: ledger.Open(root)}
}

func (e *env) lc(mod ...func(*Options)) *Lifecycle {
	o := Options{Root: e.root, Conn: e.conn, Host: e.host, Ledger: e.ledger, LateDefineGrace: 300 * time.Millisecond,
		Scan: func(r host.Root) (*host.Inventory, error) { return inventory(r.Dir()), nil }}
	for _, m := range mod {
		m(&o)
	}
	return New(o)
}

func spec(t testing.TB, name, gpus string) *domains.VM {
	t.Helper()
	y := fmt.Sprintf(`apiVersion: vgpu-host/v1
kind: VirtualMachine
metadata:
  name: %s
spec:
  vcpus: 1
  memory: 512MiB
  firmware: bios
  disks:
    - name: root
      image: /images/base.qcow2
      size: 1GiB
  cloudInit:
    userData: |
      #cloud-config
      runcmd: [poweroff]
  network:
    type: none
  gpus:
%s`, name, gpus)
	vm, err := domains.Parse([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	if err := vm.Validate(); err != nil {
		t.Fatal(err)
	}
	return vm
}

const anyNvidia = "    - passthrough:\n        vendor: \"10de\"\n"
const anyNvidiaOrVirtio = anyNvidia + "      fallback: virtio-gpu\n"

// assertGone checks that nothing of vm is left: domain, volumes, ledger entry, host state.
func (e *env) assertGone(t *testing.T, vm string) {
	t.Helper()
	if slices.Contains(e.conn.Domains(), vm) {
		t.Errorf("domain %s still defined", vm)
	}
	for _, v := range e.conn.Volumes(PoolName(e.root)) {
		if strings.HasPrefix(v, vm+"-") {
			t.Errorf("volume %s left behind", v)
		}
	}
	b, err := e.ledger.Read()
	if err != nil {
		t.Fatal(err)
	}
	if b.VM(vm) != nil {
		t.Errorf("ledger still has %s: %+v", vm, b.VM(vm))
	}
	if !e.host.clean() {
		t.Errorf("host state left: bound %v mdevs %v", e.host.bound, e.host.mdevs)
	}
}

func TestApplyReapplyDestroy(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	vm := spec(t, "vgpuhost-test-a", anyNvidia)

	plans, err := e.lc().Plan(ctx, []*domains.VM{vm})
	if err != nil {
		t.Fatal(err)
	}
	var acts []string
	for _, s := range plans[0].Steps {
		acts = append(acts, string(s.Action()))
	}
	if want := []string{string(step.ActBindGroup), string(step.ActEnsurePool), string(step.ActCreateOverlay), string(step.ActWriteSeed), string(step.ActDefine), string(step.ActStart)}; !slices.Equal(acts, want) {
		t.Fatalf("plan steps %v, want %v", acts, want)
	}
	for _, c := range e.conn.Calls() {
		if !strings.HasPrefix(c, "ListDomainXMLs") && !strings.HasPrefix(c, "VirtTypes") {
			t.Fatalf("plan called %s", c)
		}
	}
	if !e.host.clean() {
		t.Fatal("plan changed the host")
	}

	res, err := e.lc().Apply(ctx, vm)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Changed || res.State != virt.StateRunning || len(res.Claims) != 2 {
		t.Fatalf("apply: %+v", res)
	}
	if e.host.bound["0000:41:00.0"] != vm.Metadata.Name || e.host.bound["0000:41:00.1"] != vm.Metadata.Name {
		t.Fatalf("GPU and audio not bound: %v", e.host.bound)
	}
	ov := e.conn.Volume(PoolName(e.root), "vgpuhost-test-a-root.qcow2")
	if ov == nil || ov.BackingPath != "/images/base.qcow2" || ov.BackingFormat != "qcow2" || ov.Capacity != 1<<30 {
		t.Fatalf("overlay: %+v", ov)
	}
	if seed := e.conn.Volume(PoolName(e.root), "vgpuhost-test-a-cidata.iso"); seed == nil || !strings.Contains(string(seed.Data), "runcmd") {
		t.Fatal("seed ISO missing or without user-data")
	}
	x, _ := e.conn.DomainXML(ctx, vm.Metadata.Name)
	if !strings.Contains(x, "<hostdev") || !strings.Contains(x, "cidata.iso") {
		t.Fatalf("domain XML lacks hostdev or seed:\n%s", x)
	}

	calls := len(e.conn.Calls())
	res, err = e.lc().Apply(ctx, vm)
	if err != nil {
		t.Fatal(err)
	}
	if res.Changed {
		t.Fatalf("re-apply of an unchanged spec changed: %+v", res)
	}
	for _, c := range e.conn.Calls()[calls:] {
		if !strings.HasPrefix(c, "ListDomainXMLs") && !strings.HasPrefix(c, "VirtTypes") {
			t.Fatalf("re-apply called %s", c)
		}
	}

	// A changed spec with the same devices: redefined, restart needed.
	vm2 := spec(t, "vgpuhost-test-a", anyNvidia)
	vm2.Spec.Memory = domains.MustSize("1GiB")
	res, err = e.lc().Apply(ctx, vm2)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Changed || !res.RestartNeeded {
		t.Fatalf("changed spec: %+v", res)
	}
	if x, _ := e.conn.DomainXML(ctx, vm.Metadata.Name); !strings.Contains(x, "1073741824") && !strings.Contains(x, ">1048576<") {
		t.Fatalf("domain not redefined with 1GiB:\n%s", x)
	}

	st, err := e.lc().Status(ctx)
	if err != nil || len(st) != 1 || st[0].State != virt.StateRunning || len(st[0].Claims) != 2 {
		t.Fatalf("status: %+v %v", st, err)
	}

	if _, err := e.lc().Destroy(ctx, vm.Metadata.Name); err != nil {
		t.Fatal(err)
	}
	e.assertGone(t, vm.Metadata.Name)
	if _, err := e.lc().Destroy(ctx, vm.Metadata.Name); !errors.Is(err, host.ErrNotFound) {
		t.Fatalf("second destroy: %v, want ErrNotFound", err)
	}
}

func TestFallbackWhenAllTaken(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	for i := 0; i < 4; i++ {
		if _, err := e.lc().Apply(ctx, spec(t, fmt.Sprintf("vgpuhost-test-g%d", i), anyNvidia)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.lc().Apply(ctx, spec(t, "vgpuhost-test-x", anyNvidia)); !errors.Is(err, host.ErrBusy) {
		t.Fatalf("fifth GPU VM without fallback: %v, want ErrBusy", err)
	}
	res, err := e.lc().Apply(ctx, spec(t, "vgpuhost-test-fb", anyNvidiaOrVirtio))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Fallback) != 1 || !strings.Contains(res.Fallback[0], "virtio-gpu") || len(res.Claims) != 0 {
		t.Fatalf("fallback not reported: %+v", res)
	}
	if x, _ := e.conn.DomainXML(ctx, "vgpuhost-test-fb"); !strings.Contains(x, `type="virtio"`) && !strings.Contains(x, `type='virtio'`) {
		t.Fatalf("no virtio video:\n%s", x)
	}
}

func TestForeignDomainDevicesAreNotTaken(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.conn.AddForeignDomain("someone-elses", `<domain type='kvm'><name>someone-elses</name><devices>
	  <hostdev mode='subsystem' type='pci' managed='yes'><source><address domain='0x0000' bus='0x41' slot='0x00' function='0x0'/></source></hostdev>
	</devices></domain>`, true)
	_, err := e.lc().Apply(ctx, spec(t, "vgpuhost-test-f", "    - passthrough:\n        address: \"0000:41:00.0\"\n"))
	if !errors.Is(err, host.ErrBusy) {
		t.Fatalf("apply of a device another domain holds: %v, want ErrBusy", err)
	}
	e.assertGone(t, "vgpuhost-test-f")
	if _, err := e.lc().Apply(ctx, spec(t, "someone-elses", anyNvidiaOrVirtio)); !errors.Is(err, host.ErrBusy) {
		t.Fatalf("apply over a domain vgpu-host did not create: %v, want ErrBusy", err)
	}
	if x, _ := e.conn.DomainXML(ctx, "someone-elses"); !strings.Contains(x, "0x41") {
		t.Fatal("the foreign domain was redefined")
	}
	res, err := e.lc().Apply(ctx, spec(t, "vgpuhost-test-f", anyNvidia))
	if err != nil {
		t.Fatal(err)
	}
	if res.Claims[0].ID == "0000:41:00.0" {
		t.Fatalf("took the GPU held by a foreign domain: %+v", res.Claims)
	}
}

func TestFailedApplyUndoesInReverse(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.conn.Fail("Define", errors.New("schema says no"))
	_, err := e.lc().Apply(context.Background(), spec(t, "vgpuhost-test-u", anyNvidia))
	if err == nil || !strings.Contains(err.Error(), "schema says no") {
		t.Fatalf("apply: %v", err)
	}
	e.assertGone(t, "vgpuhost-test-u")
	calls := strings.Join(e.conn.Calls(), "\n")
	if i, j := strings.Index(calls, "DeleteVolume vgpuhost-test-u-cidata.iso"), strings.Index(calls, "DeleteVolume vgpuhost-test-u-root.qcow2"); i < 0 || j < 0 || i > j {
		t.Fatalf("volumes not deleted newest first:\n%s", calls)
	}
}

// TestCrashAtEveryStep stops apply dead (runtime.Goexit: no defers of ours, no rollback) at
// every step, before and after taking it, then checks that both a new apply and a destroy
// converge with nothing leaked.
func TestCrashAtEveryStep(t *testing.T) {
	t.Parallel()
	const steps = 6 // bind, pool, overlay, seed, define, start
	for _, before := range []bool{false, true} {
		for n := 1; n <= steps; n++ {
			for _, then := range []string{"apply", "destroy"} {
				t.Run(fmt.Sprintf("step%d-before=%v-then-%s", n, before, then), func(t *testing.T) {
					e := newEnv(t)
					ctx := context.Background()
					vm := spec(t, "vgpuhost-test-c", anyNvidia)
					done := make(chan struct{})
					go func() {
						defer close(done)
						_, _ = e.lc(func(o *Options) { o.CrashAt, o.CrashBefore, o.Crash = n, before, runtime.Goexit }).Apply(ctx, vm)
						t.Errorf("apply did not crash at step %d", n)
					}()
					<-done
					b, _ := e.ledger.Read()
					if b.VM(vm.Metadata.Name) == nil || b.VM(vm.Metadata.Name).Phase != ledger.PhaseApplying {
						t.Fatalf("crashed apply left no applying entry: %+v", b.Names())
					}
					switch then {
					case "apply":
						res, err := e.lc().Apply(ctx, vm)
						if err != nil {
							t.Fatal(err)
						}
						if len(res.Converged) == 0 || res.State != virt.StateRunning {
							t.Fatalf("re-apply did not converge: %+v", res)
						}
						if n := len(e.conn.Volumes(PoolName(e.root))); n != 2 {
							t.Fatalf("%d volumes after converging, want 2: %v", n, e.conn.Volumes(PoolName(e.root)))
						}
						if _, err := e.lc().Destroy(ctx, vm.Metadata.Name); err != nil {
							t.Fatal(err)
						}
					case "destroy":
						if _, err := e.lc().Destroy(ctx, vm.Metadata.Name); err != nil {
							t.Fatal(err)
						}
					}
					e.assertGone(t, vm.Metadata.Name)
				})
			}
		}
	}
}

// TestLateDefineAfterCrash: an apply dies (kill -9) with its define sent but not answered;
// libvirtd finishes the call, and the domain appears only once parsed and checked, which can
// be after the next destroy found no domain. Here the apply stops dead right before its
// define, and the define lands 100 ms into the destroy: destroy watches for it and removes it.
func TestLateDefineAfterCrash(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	vm := spec(t, "vgpuhost-test-late", anyNvidia)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = e.lc(func(o *Options) { o.CrashAt, o.CrashBefore, o.Crash = 5, true, runtime.Goexit }).Apply(ctx, vm)
	}()
	<-done
	b, _ := e.ledger.Read()
	if j := b.VM(vm.Metadata.Name).Journal; len(j) == 0 || j[len(j)-1].Action != "define" || j[len(j)-1].Status != ledger.StepStarted {
		t.Fatalf("the crashed apply's journal does not end with a started define: %+v", j)
	}
	landed := make(chan error, 1)
	go func() {
		time.Sleep(100 * time.Millisecond)
		_, err := e.conn.Define(ctx, "<domain type='qemu'><name>"+vm.Metadata.Name+"</name></domain>")
		landed <- err
	}()
	res, err := e.lc().Destroy(ctx, vm.Metadata.Name)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-landed; err != nil {
		t.Fatal(err)
	}
	e.assertGone(t, vm.Metadata.Name)
	if undo := strings.Join(res.Undone, ", "); !strings.Contains(undo, "define") {
		t.Errorf("destroy undid %q, want the define among them", undo)
	}
}

// TestRace16For4 runs 16 applies at once, each with its own Lifecycle and ledger handle (so
// each takes its own flock), all wanting one of four GPUs: exactly four win.
func TestRace16For4(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make([]error, 16)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lc := e.lc(func(o *Options) { o.Ledger = ledger.OpenPath(filepath.Join(e.root.StateDir(), "ledger.json")) })
			_, errs[i] = lc.Apply(ctx, spec(t, fmt.Sprintf("vgpuhost-test-r%02d", i), anyNvidia))
		}()
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		if err == nil {
			won++
		} else if !errors.Is(err, host.ErrBusy) {
			t.Errorf("loser failed without ErrBusy: %v", err)
		}
	}
	if won != 4 {
		t.Fatalf("%d applies won, want 4", won)
	}
	b, _ := e.ledger.Read()
	held := map[string]string{}
	for _, name := range b.Names() {
		vm := b.VM(name)
		if vm.Phase != ledger.PhaseApplied {
			t.Errorf("%s left in phase %s", name, vm.Phase)
		}
		for _, c := range vm.Claims {
			if h, dup := held[c.ID]; dup {
				t.Fatalf("%s held by %s and %s", c.ID, h, name)
			}
			held[c.ID] = name
		}
	}
	if b.Len() != 4 || len(held) != 8 || len(e.host.bound) != 8 || len(e.conn.Domains()) != 4 {
		t.Fatalf("ledger %d VMs %d claims, host %d bound, %d domains", b.Len(), len(held), len(e.host.bound), len(e.conn.Domains()))
	}
}

func TestVerifyFake(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.conn.QMPFunc = func(_, _, _ string) (string, error) {
		return `{"return":[{"bus":0,"devices":[{"bus":0,"slot":2,"function":0,"class_info":{"class":768},"id":{"vendor":6900,"device":4176},"qdev_id":"video0","regions":[]}]}]}`, nil
	}
	vm := spec(t, "vgpuhost-test-v", "    - virtioGpu: {}\n")
	if _, err := e.lc().Apply(ctx, vm); err != nil {
		t.Fatal(err)
	}
	// The fake returns the persistent XML, which has no aliases: add the one libvirt would.
	x, _ := e.conn.DomainXML(ctx, vm.Metadata.Name)
	x = strings.Replace(x, `<model type="virtio"`, `<alias name="video0"></alias><model type="virtio"`, 1)
	e.conn.AddForeignDomain(vm.Metadata.Name, x, true)
	res, err := e.lc().Verify(ctx, vm.Metadata.Name)
	if err != nil {
		t.Fatalf("verify: %v (%+v)", err, res)
	}
	if len(res.Checks) != 1 || res.Checks[0].Guest != "00:02.0 1af4:1050" {
		t.Fatalf("checks: %+v", res.Checks)
	}
	e.conn.QMPFunc = func(_, _, _ string) (string, error) { return `{"return":[{"bus":0,"devices":[]}]}`, nil }
	if _, err := e.lc().Verify(ctx, vm.Metadata.Name); !errors.Is(err, ErrMissingInGuest) {
		t.Fatalf("verify without the device: %v", err)
	}
}
