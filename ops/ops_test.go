package ops

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/lifecycle"
	"github.com/vgpu-host/vgpu-host/virt"
)

// fakeEnv is an Env for the fake tree tr, its libvirt the file-backed fake beside it; its
// writes go to the tree.
func fakeEnv(t *testing.T, tr *hosttest.Tree) Env {
	t.Helper()
	root, err := host.NewRoot(tr.Dir())
	if err != nil {
		t.Fatal(err)
	}
	uri := virt.FileScheme + "://" + filepath.Join(tr.Dir(), "libvirt.json")
	return Env{
		Root:     root,
		OpenConn: func() (virt.Conn, error) { return virt.OpenFile(uri) },
		HostIO:   func() (host.Writer, host.ModuleLoader) { return host.SysfsWriter{Root: root}, nil },
	}
}

func TestExitCode(t *testing.T) {
	for _, c := range []struct {
		err  error
		want int
	}{
		{nil, ExitOK},
		{errors.New("plain"), ExitFailure},
		{Usagef("--x %q", "y"), ExitUsage},
		{fmt.Errorf("spec: %w", host.ErrInvalid), ExitUsage},
		{fmt.Errorf("journal: %w: %w", host.ErrInvalid, lifecycle.ErrDamagedJournal), ExitFailure},
		{fmt.Errorf("x: %w", host.ErrNotReady), ExitNotReady},
		{fmt.Errorf("x: %w", host.ErrRefused), ExitRefused},
		{fmt.Errorf("x: %w", host.ErrBusy), ExitBusy},
		{fmt.Errorf("x: %w", host.ErrNotFound), ExitNotFound},
		{fmt.Errorf("x: %w", host.ErrUnsupported), ExitUnsupported},
		{fmt.Errorf("wrapped: %w", &Error{Code: ExitBusy, Err: errors.New("held")}), ExitBusy},
	} {
		if got := ExitCode(c.err); got != c.want {
			t.Errorf("ExitCode(%v) = %d, want %d", c.err, got, c.want)
		}
	}
	e := Fail(fmt.Errorf("gone: %w", host.ErrNotFound))
	var oe *Error
	if !errors.As(e, &oe) || oe.Code != ExitNotFound || !strings.HasPrefix(e.Error(), "gone: ") || !errors.Is(e, host.ErrNotFound) {
		t.Errorf("Fail: %#v", e)
	}
	if Fail(nil) != nil {
		t.Error("Fail(nil) is not nil")
	}
}

func TestInventory(t *testing.T) {
	tr := hosttest.New(t)
	gpu, _ := tr.ConsumerGPU("0000:00:04.0", "0000:01:00.0", "nouveau")
	env := fakeEnv(t, tr)
	var asked []bool
	env.MIG = func(_ context.Context, inv *host.Inventory, live bool) *MIGInventory {
		asked = append(asked, live)
		return &MIGInventory{Note: "test"}
	}
	res, err := Inventory(context.Background(), env, InventoryRequest{MIG: true})
	if err != nil {
		t.Fatal(err)
	}
	rep, ok := res.Value().(*InventoryReport)
	if !ok || len(rep.Devices) == 0 || rep.Devices[0].Address != gpu || rep.MIG == nil || rep.MIG.Note != "test" || fmt.Sprint(asked) != "[true]" {
		t.Fatalf("whole inventory: %#v (MIG asked %v)", res.Value(), asked)
	}

	res, err = Inventory(context.Background(), env, InventoryRequest{Target: gpu.String()})
	if err != nil {
		t.Fatal(err)
	}
	if d, ok := res.Value().(*DeviceReport); !ok || d.Device.Address != gpu || d.Group == nil {
		t.Fatalf("inspect %s: %#v", gpu, res.Value())
	}

	for _, c := range []struct {
		target string
		code   int
		words  string
	}{
		{"01:00", ExitUsage, "(or name an mdev instance by its UUID)"},
		{"0000:09:00.0", ExitNotFound, "0000:09:00.0"},
		{"6f1d3c1e-9c6a-4a4b-8d0b-3f2a1b0c9d8e", ExitNotFound, "6f1d3c1e-9c6a-4a4b-8d0b-3f2a1b0c9d8e"},
	} {
		v, err := Run(context.Background(), env, &InventoryRequest{Target: c.target})
		var oe *Error
		if v != nil || !errors.As(err, &oe) || oe.Code != c.code || !strings.Contains(err.Error(), c.words) {
			t.Errorf("inspect %s: %v, %v; want exit %d naming %q", c.target, v, err, c.code, c.words)
		}
	}
}

// TestInventoryHostOnly: HostOnly is host.Scan's inventory alone, what the device plugin and
// the DRA driver advertise from: MIG is not asked and the quarantine records are not listed
// (their catalog reads each device's own), where inspect's whole inventory has both.
func TestInventoryHostOnly(t *testing.T) {
	tr := hosttest.New(t)
	gpu, _ := tr.ConsumerGPU("0000:00:04.0", "0000:01:00.0", "nouveau")
	env := fakeEnv(t, tr)
	asked := 0
	env.MIG = func(context.Context, *host.Inventory, bool) *MIGInventory {
		asked++
		return &MIGInventory{Note: "test"}
	}
	if err := host.SaveQuarantine(env.Root, &host.Quarantine{Address: gpu, Problems: []host.Problem{{Check: "config-space", Detail: "reads 0xffff"}}}); err != nil {
		t.Fatal(err)
	}
	full, err := Inventory(context.Background(), env, InventoryRequest{})
	if err != nil || full.Inventory == nil || full.Inventory.MIG == nil || len(full.Inventory.Quarantined) != 1 || asked != 1 {
		t.Fatalf("whole inventory: %#v, %v (MIG asked %d times); want MIG and the quarantined GPU", full, err, asked)
	}
	res, err := Inventory(context.Background(), env, InventoryRequest{HostOnly: true})
	if err != nil || res.Inventory == nil || res.Device != nil || res.Mdev != nil {
		t.Fatalf("host only: %#v, %v", res, err)
	}
	if rep := res.Inventory; rep.MIG != nil || rep.Quarantined != nil || asked != 1 {
		t.Errorf("host only: MIG %v, quarantined %v, MIG asked %d times; want neither, not asked", rep.MIG, rep.Quarantined, asked)
	}
	inv, err := host.Scan(env.Root)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(res.Inventory.Inventory, inv) {
		t.Errorf("host only is not host.Scan's inventory:\n%+v\nwant\n%+v", *res.Inventory.Inventory, *inv)
	}
	if len(inv.Devices) == 0 || inv.Devices[0].Address != gpu {
		t.Errorf("the fake host's inventory has no GPU %s: %+v", gpu, inv.Devices)
	}
}

func TestCheckNotReadyKeepsTheReport(t *testing.T) {
	tr := hosttest.New(t)
	tr.ConsumerGPU("0000:00:04.0", "0000:01:00.0", "nouveau")
	tr.NoIOMMU()
	env := fakeEnv(t, tr)
	v, err := Run(context.Background(), env, &CheckRequest{})
	r, ok := v.(*host.Readiness)
	if !ok || r.Assignable || ExitCode(err) != ExitNotReady || !strings.Contains(err.Error(), env.Root.Dir()) {
		t.Fatalf("check without an IOMMU: %#v, %v; want the report and exit 3", v, err)
	}
}

func TestStatus(t *testing.T) {
	tr := hosttest.New(t)
	env := fakeEnv(t, tr)
	res, err := Status(context.Background(), env, StatusRequest{})
	if err != nil || res == nil || len(res.VMs) != 0 {
		t.Fatalf("status of an empty ledger: %#v, %v", res, err)
	}
	v, err := Run(context.Background(), env, &StatusRequest{Names: []string{"nope"}})
	if vms, ok := v.([]lifecycle.VMStatus); !ok || vms == nil || len(vms) != 0 {
		t.Errorf("status nope: %#v; want an empty list printed", v)
	}
	if ExitCode(err) != ExitNotFound || !strings.Contains(err.Error(), `no VM "nope" in the ledger`) {
		t.Errorf("status nope: %v; want exit 6 naming the VM", err)
	}
	env.OpenConn = func() (virt.Conn, error) { return nil, fmt.Errorf("libvirt down: %w", host.ErrUnsupported) }
	if v, err := Run(context.Background(), env, &StatusRequest{}); v != nil || ExitCode(err) != ExitUnsupported {
		t.Errorf("status without libvirt: %#v, %v; want the connection's error first", v, err)
	}
}

func TestRequestsSettings(t *testing.T) {
	if r := (InventoryRequest{MIG: true}); !r.Bool("mig") || !r.IsSet("mig") || r.Bool("dry-run") || r.Op() != "inspect" {
		t.Errorf("%+v: settings wrong", r)
	}
	if _, err := Run(context.Background(), Env{}, nil); ExitCode(err) != ExitUsage {
		t.Errorf("Run(nil): %v", err)
	}
}

func TestDestroyRefusals(t *testing.T) {
	tr := hosttest.New(t)
	env := fakeEnv(t, tr)
	opened := 0
	open := env.OpenConn
	env.OpenConn = func() (virt.Conn, error) { opened++; return open() }
	for _, c := range []struct {
		names []string
		code  int
		words string
	}{
		{nil, ExitUsage, "destroy needs at least one VM name or spec file"},
		{[]string{"ok", "../../etc"}, ExitUsage, `VM name "../../etc"`},
	} {
		v, err := Run(context.Background(), env, &DestroyRequest{Names: c.names})
		if v != nil || ExitCode(err) != c.code || !strings.Contains(err.Error(), c.words) {
			t.Errorf("destroy %q: %v, %v; want exit %d saying %q", c.names, v, err, c.code, c.words)
		}
	}
	if opened != 0 {
		t.Errorf("a refused destroy opened libvirt %d times; want none (names are checked first)", opened)
	}
	v, err := Run(context.Background(), env, &DestroyRequest{Names: []string{"gone"}})
	if v != nil || ExitCode(err) != ExitNotFound || !strings.Contains(err.Error(), "gone") || opened != 1 {
		t.Errorf("destroy gone: %v, %v (libvirt opened %d times); want exit 6 naming it, nothing printed", v, err, opened)
	}
}

// TestTickWriter: a helper's progress (qemu-img -p redrawing its line with carriage returns,
// virt-sysprep's lines) becomes tick events, each line ended by an empty tick.
func TestTickWriter(t *testing.T) {
	var got []string
	env := Env{Progress: func(e Event) {
		if e.Kind != EventTick || e.Op != "image export" || e.Subject != "vm1" {
			t.Errorf("event %+v", e)
		}
		got = append(got, e.Message)
	}}
	w := &tickWriter{env: env, op: "image export", subject: "vm1"}
	for _, s := range []string{"    (0.00/100%)\r", "    (50.", "00/100%)\r    (100.00/100%)\r\n", "[   0.0] Examining the guest ...\n", "tail"} {
		w.Write([]byte(s))
	}
	w.flush()
	want := []string{"    (0.00/100%)", "    (50.00/100%)", "    (100.00/100%)", "", "[   0.0] Examining the guest ...", "", "tail"}
	if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", want) {
		t.Errorf("ticks %q, want %q", got, want)
	}
}
