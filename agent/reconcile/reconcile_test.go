package reconcile

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/mdev"
	"github.com/vgpu-host/vgpu-host/vfio"
)

var ctx = context.Background()

// lab is a host with an SR-IOV PF (nvme, as in the real-kernel lab), the mbochs mdev parent and
// a consumer GPU with its audio function in one IOMMU group, all on their boot drivers.
type lab struct {
	tr         *hosttest.Tree
	k          *hosttest.Kernel
	pf         hosttest.PCI
	gpu, audio host.Address
}

func newLab(t *testing.T) *lab {
	t.Helper()
	tr := hosttest.New(t)
	tr.Mbochs()
	pf := hosttest.PCI{Addr: "0000:00:0a.0", Vendor: 0x1b36, Device: 0x0010, Class: 0x010802, Driver: "nvme"}
	tr.SRIOVPF(pf, hosttest.VFSpec{Total: 3, VFDevice: 0x0010, VFDriver: "nvme"}, 0)
	gpu, audio := tr.ConsumerGPU("0000:00:04.0", "0000:01:00.0", "")
	return &lab{tr: tr, k: hosttest.NewKernel(tr), pf: pf, gpu: gpu, audio: audio}
}

func (l *lab) reconciler(log *slog.Logger) *Reconciler {
	return &Reconciler{
		Mdev:   mdev.New(l.tr.Root, l.k),
		Binder: &vfio.Binder{Root: l.tr.Root, W: l.k, Modules: l.k, Timeout: 2 * time.Second},
		Log:    log,
	}
}

// persist does what an admin does before a reboot: 2 VFs on vfio-pci, two mdevs defined, the
// GPU's group bound — each with its --persist.
func (l *lab) persist(t *testing.T) []string {
	t.Helper()
	r := l.reconciler(nil)
	pf := host.MustParseAddress(l.pf.Addr)
	if _, err := r.Mdev.EnableVFs(ctx, pf, 2, mdev.EnableOptions{Driver: mdev.DriverVFIO, Persist: true}); err != nil {
		t.Fatal(err)
	}
	ins, err := r.Mdev.Create(ctx, mdev.CreateRequest{Parent: "mbochs", Profile: "small", Count: 2, Owner: "desk"})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, in := range ins {
		if _, err := r.Mdev.Define(mdev.Definition{UUID: in.UUID}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, in.UUID)
	}
	if _, err := r.Binder.Bind(ctx, []host.Address{l.gpu}, vfio.BindOptions{Persist: true}); err != nil {
		t.Fatal(err)
	}
	return ids
}

// reboot builds the same machine afresh, as the kernel boots it (no VFs, no mdevs, every
// function on its boot driver), and carries over what a reboot keeps: /etc and /var/lib.
func (l *lab) reboot(t *testing.T) *lab {
	t.Helper()
	n := newLab(t)
	for _, d := range []string{"etc", "var/lib"} {
		src := filepath.Join(l.tr.Dir(), d)
		if _, err := os.Stat(src); err != nil {
			continue
		}
		dst := filepath.Join(n.tr.Dir(), d)
		if err := os.MkdirAll(dst, 0o755); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("cp", "-a", src+"/.", dst+"/").CombinedOutput(); err != nil {
			t.Fatalf("cp %s: %v %s", d, err, out)
		}
	}
	return n
}

// TestReconcileAfterReboot: after a reboot every persisted piece comes back, in dependency
// order (VFs, then mdevs, then the binding), each step logged with its duration; a second run
// finds everything already there and writes nothing.
func TestReconcileAfterReboot(t *testing.T) {
	before := newLab(t)
	ids := before.persist(t)
	l := before.reboot(t)
	if got := l.tr.Driver(l.gpu); got == vfio.DriverName {
		t.Fatal("the rebooted lab starts with the GPU on vfio-pci")
	}

	var logs bytes.Buffer
	res, err := l.reconciler(slog.New(slog.NewJSONHandler(&logs, nil))).Run(ctx)
	if err != nil {
		t.Fatalf("reconcile: %v\n%+v", err, res)
	}
	var kinds []string
	for _, s := range res.Steps {
		if len(kinds) == 0 || kinds[len(kinds)-1] != s.Kind {
			kinds = append(kinds, s.Kind)
		}
		if s.Result != Applied {
			t.Errorf("step %+v: want applied", s)
		}
		if s.Duration <= 0 || s.Took == "" {
			t.Errorf("step %+v has no duration", s)
		}
	}
	if got := strings.Join(kinds, ","); got != "sriov,mdev,vfio" {
		t.Fatalf("step order %s, want sriov,mdev,vfio: %+v", got, res.Steps)
	}
	if res.Applied != 4 || res.Failed != 0 || res.Count(KindMdev, Applied) != 2 {
		t.Errorf("totals %+v", res)
	}
	if last := res.Steps[len(res.Steps)-1]; last.Target != l.gpu.String()+","+l.audio.String() || !strings.Contains(last.Want, "on vfio-pci") {
		t.Errorf("vfio step %+v", last)
	}
	// The host agrees.
	pf, err := mdev.New(l.tr.Root, nil).ReadPF(host.MustParseAddress(l.pf.Addr))
	if err != nil || pf.NumVFs != 2 {
		t.Fatalf("VFs after reconcile: %+v %v", pf, err)
	}
	for _, id := range ids {
		if !host.Exists(l.tr.Root.Sys("bus", "mdev", "devices", id)) {
			t.Errorf("mdev %s not restored", id)
		}
	}
	for _, a := range []host.Address{l.gpu, l.audio} {
		if got := l.tr.Driver(a); got != vfio.DriverName {
			t.Errorf("%s on %q after reconcile, want vfio-pci (its whole group)", a, got)
		}
	}
	// One log line per step with its duration, and a summary.
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	var stepLines int
	for _, ln := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(ln), &m); err != nil {
			t.Fatalf("log line %q: %v", ln, err)
		}
		if m["msg"] == "reconcile step" {
			stepLines++
			if _, ok := m["duration"]; !ok || m["kind"] == nil || m["result"] == nil {
				t.Errorf("step log line without kind/result/duration: %s", ln)
			}
		}
	}
	if stepLines != len(res.Steps) || !strings.Contains(logs.String(), `"msg":"reconcile: done"`) {
		t.Errorf("%d step lines for %d steps:\n%s", stepLines, len(res.Steps), logs.String())
	}

	// Again: everything is in place, nothing is written.
	n := len(l.k.Writes())
	again, err := l.reconciler(nil).Run(ctx)
	if err != nil || again.Already != len(again.Steps) || len(again.Steps) != len(res.Steps) {
		t.Fatalf("second reconcile: %v %+v", err, again)
	}
	if w := l.k.Writes()[n:]; len(w) != 0 {
		t.Errorf("second reconcile wrote %v", w)
	}
}

// TestReconcileGoesOnPastFailures: a persisted PF that is gone and a persisted binding whose
// device is gone are failed steps naming the device; the mdevs between them are still
// restored, the error joins both failures, and the summary counts them.
func TestReconcileGoesOnPastFailures(t *testing.T) {
	before := newLab(t)
	ids := before.persist(t)
	l := before.reboot(t)
	// The PF and the GPU's audio "disappear": persisted entries point at nothing.
	l.tr.WriteFile("etc/vgpu-host/sriov.json", `{"version":1,"pfs":[{"address":"0000:99:00.0","num_vfs":2,"driver":"vfio-pci"}]}`)
	gone := host.MustParseAddress("0000:77:00.0")
	b, _ := vfio.LoadLedger(l.tr.Root)
	e := b.Devices[l.gpu.String()]
	e.Address = gone
	bl, _ := json.Marshal(map[string]any{"version": 1, "devices": map[string]any{gone.String(): e}})
	l.tr.WriteFile("var/lib/vgpu-host/vfio.json", string(bl))
	l.tr.WriteFile("etc/driverctl.d/pci-"+gone.String(), "vfio-pci\n")

	res, err := l.reconciler(nil).Run(ctx)
	if err == nil || res.OK() {
		t.Fatalf("reconcile with two missing devices: %v %+v", err, res)
	}
	for _, want := range []string{"0000:99:00.0", gone.String()} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %s: %v", want, err)
		}
	}
	if res.Failed != 2 || res.Count(KindMdev, Applied) != len(ids) || res.Steps[0].Kind != KindSRIOV || res.Steps[len(res.Steps)-1].Kind != KindVFIO {
		t.Errorf("steps %+v", res.Steps)
	}
	if !strings.Contains(res.Summary(), "2 failed") {
		t.Errorf("summary %q", res.Summary())
	}
}

// TestRemovedOverrideIsNotRestored: an admin who ran `driverctl unset-override` after bind
// --persist does not get the binding back at boot.
func TestRemovedOverrideIsNotRestored(t *testing.T) {
	before := newLab(t)
	before.persist(t)
	l := before.reboot(t)
	for _, a := range []host.Address{l.gpu, l.audio} {
		os.Remove(vfio.DriverctlPath(l.tr.Root, a))
	}
	res, err := l.reconciler(nil).Run(ctx)
	if err != nil || res.Count(KindVFIO, Applied)+res.Count(KindVFIO, Already) != 0 {
		t.Fatalf("reconcile: %v %+v", err, res.Steps)
	}
	if got := l.tr.Driver(l.gpu); got == vfio.DriverName {
		t.Error("bound although the override is gone")
	}
}

// TestDryRunWritesNothing: a dry run lists the vfio writes it would make and changes nothing.
func TestDryRunWritesNothing(t *testing.T) {
	before := newLab(t)
	before.persist(t)
	l := before.reboot(t)
	r := l.reconciler(nil)
	rec := &host.Recorder{}
	r.Mdev.W, r.Mdev.DryRun = rec, true
	snap := hosttest.State(t, l.tr.Dir())
	res, err := r.Run(ctx)
	if err != nil || !res.DryRun {
		t.Fatalf("dry run: %v %+v", err, res)
	}
	last := res.Steps[len(res.Steps)-1]
	if last.Kind != KindVFIO || len(last.Writes) == 0 || !strings.Contains(last.Writes[0].Path, "driver_override") {
		t.Errorf("vfio dry-run step %+v", last)
	}
	if len(l.k.Writes()) != 0 {
		t.Errorf("dry run wrote %v", l.k.Writes())
	}
	after := hosttest.State(t, l.tr.Dir())
	for p, v := range after {
		if snap[p] != v {
			t.Errorf("dry run changed %s", p)
		}
	}
}
