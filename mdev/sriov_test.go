package mdev

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
)

// nvmePF adds the lab's nvme SR-IOV PF (3 VFs, VFs probe to nvme).
func nvmePF(tr *hosttest.Tree, noSRIOV bool) host.Address {
	return tr.SRIOVPF(hosttest.PCI{Addr: "0000:00:0a.0", Vendor: 0x1b36, Device: 0x0010, Class: 0x010802, Driver: "nvme"},
		hosttest.VFSpec{Total: 3, VFDevice: 0x0010, VFDriver: "nvme", NoSRIOVDriver: noSRIOV}, 0)
}

func numvfsWrites(k *hosttest.Kernel) []string {
	var out []string
	for _, w := range k.Writes() {
		if strings.HasSuffix(w.Path, "sriov_numvfs") {
			out = append(out, w.Value)
		}
	}
	return out
}

func TestEnableChangeDisable(t *testing.T) {
	tr := hosttest.New(t)
	pf := nvmePF(tr, false)
	m, k := newMgr(tr)
	ctx := context.Background()
	st, err := m.EnableVFs(ctx, pf, 2, EnableOptions{})
	if err != nil || st.NumVFs != 2 || len(st.VFs) != 2 || st.VFs[0].Driver != "nvme" {
		t.Fatalf("enable 2: %v %+v", err, st)
	}
	// Twice converges: no write at all.
	if _, err := m.EnableVFs(ctx, pf, 2, EnableOptions{}); err != nil || len(numvfsWrites(k)) != 1 {
		t.Fatalf("re-enable: %v writes %v", err, numvfsWrites(k))
	}
	// 2 → 3 goes through 0, as the kernel demands (the emulator answers EBUSY otherwise).
	st, err = m.EnableVFs(ctx, pf, 3, EnableOptions{})
	if err != nil || st.NumVFs != 3 {
		t.Fatalf("change to 3: %v %+v", err, st)
	}
	if got := strings.Join(numvfsWrites(k), ","); got != "2,0,3" {
		t.Fatalf("sriov_numvfs writes %s, want 2,0,3", got)
	}
	st, err = m.DisableVFs(ctx, pf, false)
	if err != nil || st.NumVFs != 0 || len(st.VFs) != 0 {
		t.Fatalf("disable: %v %+v", err, st)
	}
	if _, err := m.DisableVFs(ctx, pf, false); err != nil || len(numvfsWrites(k)) != 4 {
		t.Fatalf("second disable wrote: %v", numvfsWrites(k))
	}
}

func TestEnableChecksTotalAndDriver(t *testing.T) {
	tr := hosttest.New(t)
	pf := nvmePF(tr, false)
	m, k := newMgr(tr)
	_, err := m.EnableVFs(context.Background(), pf, 4, EnableOptions{})
	if !errors.Is(err, host.ErrInvalid) || !strings.Contains(err.Error(), "at most 3") {
		t.Fatalf("over total: %v", err)
	}
	if len(k.Writes()) != 0 {
		t.Fatal("wrote despite the total check")
	}

	tr2 := hosttest.New(t)
	pf2 := nvmePF(tr2, true)
	m2, _ := newMgr(tr2)
	_, err = m2.EnableVFs(context.Background(), pf2, 1, EnableOptions{})
	if !errors.Is(err, host.ErrUnsupported) || !strings.Contains(err.Error(), `driver "nvme"`) {
		t.Fatalf("ENOENT: %v", err)
	}

	tr3 := hosttest.New(t)
	gpu := tr3.DatacenterGPU("0000:40:01.0", "0000:41:00.0", "nvidia", 0)
	m3, _ := newMgr(tr3)
	if _, err := m3.EnableVFs(context.Background(), gpu, 1, EnableOptions{}); !errors.Is(err, host.ErrUnsupported) {
		t.Fatalf("no SR-IOV capability: %v", err)
	}
}

func TestEnableVFIOBindsByAddress(t *testing.T) {
	tr := hosttest.New(t)
	pf := nvmePF(tr, false)
	m, k := newMgr(tr)
	st, err := m.EnableVFs(context.Background(), pf, 2, EnableOptions{Driver: DriverVFIO, Persist: true})
	if err != nil {
		t.Fatal(err)
	}
	if st.Autoprobe == nil || *st.Autoprobe {
		t.Fatal("sriov_drivers_autoprobe not 0")
	}
	for _, vf := range st.VFs {
		if vf.Driver != "vfio-pci" {
			t.Fatalf("VF %s on %q", vf.Address, vf.Driver)
		}
	}
	// autoprobe=0 comes before the VFs appear, so nvme never bound: no unbind writes.
	ws := k.Writes()
	if !strings.HasSuffix(ws[0].Path, "sriov_drivers_autoprobe") || ws[0].Value != "0" {
		t.Fatalf("first write %+v", ws[0])
	}
	for _, w := range ws {
		if strings.HasSuffix(w.Path, "/unbind") {
			t.Fatalf("unexpected unbind %+v", w)
		}
	}
	if k.UsedNewID() {
		t.Fatal("new_id used")
	}
	ps, _ := m.PersistedPFs()
	if len(ps) != 1 || ps[0].NumVFs != 2 || ps[0].Driver != "vfio-pci" {
		t.Fatalf("persisted %+v", ps)
	}
}

func TestDryRunNamesVFsBeforeTheyExist(t *testing.T) {
	tr := hosttest.New(t)
	pf := nvmePF(tr, false)
	rec := &host.Recorder{}
	m := New(tr.Root, rec)
	m.DryRun = true
	if _, err := m.EnableVFs(context.Background(), pf, 2, EnableOptions{Driver: DriverVFIO, Persist: true}); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, w := range rec.Writes() {
		lines = append(lines, strings.TrimPrefix(w.Path, tr.Dir())+"="+w.Value)
	}
	want := []string{
		"/sys/bus/pci/devices/0000:00:0a.0/sriov_drivers_autoprobe=0",
		"/sys/bus/pci/devices/0000:00:0a.0/sriov_numvfs=2",
		"/sys/bus/pci/devices/0000:00:0a.1/driver_override=vfio-pci",
		"/sys/bus/pci/drivers_probe=0000:00:0a.1",
		"/sys/bus/pci/devices/0000:00:0a.2/driver_override=vfio-pci",
		"/sys/bus/pci/drivers_probe=0000:00:0a.2",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Fatalf("dry-run writes:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	if host.Exists(m.SRIOVPath()) {
		t.Fatal("dry run persisted")
	}
}

// TestDisableRestoresAutoprobe: enable --driver vfio-pci records the PF's
// sriov_drivers_autoprobe (1) before writing 0; a second enable keeps the original, not its
// own 0; disable writes 1 back and says so, and a second disable writes nothing. A PF whose
// autoprobe vgpu-host never touched keeps whatever the operator set.
func TestDisableRestoresAutoprobe(t *testing.T) {
	tr := hosttest.New(t)
	pf := nvmePF(tr, false)
	m, k := newMgr(tr)
	ctx := context.Background()
	autoprobe := func() string {
		return strings.TrimSpace(tr.ReadFile("sys/bus/pci/devices/" + pf.String() + "/sriov_drivers_autoprobe"))
	}
	if _, err := m.EnableVFs(ctx, pf, 2, EnableOptions{Driver: DriverVFIO}); err != nil {
		t.Fatal(err)
	}
	if autoprobe() != "0" {
		t.Fatal("enable --driver vfio-pci left autoprobe on")
	}
	if st, _ := m.readState(); st.Autoprobe[pf.String()] != "1" {
		t.Fatalf("state records autoprobe %q, want the original 1", st.Autoprobe[pf.String()])
	}
	// Changing the count while autoprobe is 0 already must keep the recorded original (1).
	if _, err := m.EnableVFs(ctx, pf, 3, EnableOptions{Driver: DriverVFIO}); err != nil {
		t.Fatal(err)
	}
	if st, _ := m.readState(); st.Autoprobe[pf.String()] != "1" {
		t.Fatalf("second enable changed the record to %q", st.Autoprobe[pf.String()])
	}
	got, err := m.DisableVFs(ctx, pf, false)
	if err != nil {
		t.Fatal(err)
	}
	if autoprobe() != "1" || !got.AutoprobeRestored || got.Autoprobe == nil || !*got.Autoprobe {
		t.Fatalf("disable: autoprobe %s, result %+v", autoprobe(), got)
	}
	if st, _ := m.readState(); len(st.Autoprobe) != 0 {
		t.Fatalf("record kept after restore: %v", st.Autoprobe)
	}
	n := len(k.Writes())
	if got, err := m.DisableVFs(ctx, pf, false); err != nil || got.AutoprobeRestored || len(k.Writes()) != n {
		t.Fatalf("second disable: %v %+v, %d writes", err, got, len(k.Writes())-n)
	}

	// An operator's own autoprobe=0 is not vgpu-host's to undo.
	if err := k.Write(ctx, tr.Root.PCIDevice(pf, "sriov_drivers_autoprobe"), "0"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.EnableVFs(ctx, pf, 1, EnableOptions{Driver: DriverVFIO}); err != nil {
		t.Fatal(err)
	}
	if got, err := m.DisableVFs(ctx, pf, false); err != nil || got.AutoprobeRestored || autoprobe() != "0" {
		t.Fatalf("disable after an operator's autoprobe=0: %v %+v, autoprobe %s", err, got, autoprobe())
	}
}

// TestDisableRefusesHeldVF: a VF on vfio-pci whose /dev/vfio/N a process (a guest's QEMU)
// holds open makes the kernel's sriov_numvfs=0 block until it lets go; disable and a count
// change refuse instead, naming the holder, and write nothing. --force goes ahead.
func TestDisableRefusesHeldVF(t *testing.T) {
	tr := hosttest.New(t)
	pf := nvmePF(tr, false)
	m, k := newMgr(tr)
	ctx := context.Background()
	st, err := m.EnableVFs(ctx, pf, 2, EnableOptions{Driver: DriverVFIO})
	if err != nil {
		t.Fatal(err)
	}
	vf1 := st.VFs[1].Address
	g := tr.Group(vf1)
	node := filepath.Join(tr.Dir(), "dev/vfio", strconv.Itoa(g))
	if _, err := os.Stat(node); err != nil {
		t.Fatalf("no VFIO node for VF %s: %v", vf1, err)
	}
	fd := filepath.Join(tr.Dir(), "proc/4242/fd")
	if err := os.MkdirAll(fd, 0o755); err != nil {
		t.Fatal(err)
	}
	tr.WriteFile("proc/4242/comm", "qemu-system-x86\n")
	if err := os.Symlink("/dev/vfio/"+strconv.Itoa(g), filepath.Join(fd, "23")); err != nil {
		t.Fatal(err)
	}
	before := len(numvfsWrites(k))
	_, err = m.DisableVFs(ctx, pf, false)
	if !errors.Is(err, host.ErrBusy) || !strings.Contains(err.Error(), "pid 4242 (qemu-system-x86)") || !strings.Contains(err.Error(), vf1.String()) {
		t.Fatalf("disable of a held VF: %v", err)
	}
	_, err = m.EnableVFs(ctx, pf, 3, EnableOptions{Driver: DriverVFIO})
	if !errors.Is(err, host.ErrBusy) || !strings.Contains(err.Error(), "qemu-system-x86") {
		t.Fatalf("count change with a held VF: %v", err)
	}
	if got := numvfsWrites(k)[before:]; len(got) != 0 {
		t.Fatalf("refusals wrote sriov_numvfs: %v", got)
	}
	if st, _ := m.ReadPF(pf); st.NumVFs != 2 {
		t.Fatalf("VFs after refusals: %d", st.NumVFs)
	}
	if st, err := m.DisableVFsWith(ctx, pf, DisableOptions{Force: true}); err != nil || st.NumVFs != 0 {
		t.Fatalf("forced disable: %v %+v", err, st)
	}
}
