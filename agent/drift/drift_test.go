package drift

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/ledger"
	"github.com/vgpu-host/vgpu-host/virt"
)

var bg = context.Background()

// domainXML is a small TCG domain whose hostdevs are the PCI functions addrs (managed='no', as
// apply defines them) and the mdev instances uuids.
func domainXML(name string, addrs []host.Address, uuids []string) string {
	var hd strings.Builder
	for _, a := range addrs {
		fmt.Fprintf(&hd, `<hostdev mode='subsystem' type='pci' managed='no'><source><address domain='0x%04x' bus='0x%02x' slot='0x%02x' function='0x%x'/></source></hostdev>`,
			a.Domain, a.Bus, a.Device, a.Function)
	}
	for _, u := range uuids {
		fmt.Fprintf(&hd, `<hostdev mode='subsystem' type='mdev' model='vfio-pci'><source><address uuid='%s'/></source></hostdev>`, u)
	}
	return fmt.Sprintf(`<domain type='qemu'><name>%s</name><memory unit='MiB'>64</memory><vcpu>1</vcpu>
<os><type arch='x86_64' machine='q35'>hvm</type></os><devices>%s</devices></domain>`, name, hd.String())
}

// applied records vm in the ledger as applied on uri, holding claims.
func applied(t *testing.T, l *ledger.Ledger, vm, uri string, claims ...ledger.Claim) {
	t.Helper()
	err := l.Update(func(b *ledger.Book) error {
		if err := b.Claim(vm, claims...); err != nil {
			return err
		}
		e := b.Entry(vm)
		e.Phase, e.URI = ledger.PhaseApplied, uri
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// recorder is a Recorder that remembers, and a Release that records its calls.
type recorder struct {
	mu       sync.Mutex
	seen     []string
	resolved []string
	released []string
}

func (r *recorder) Drift(vm, kind string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, vm+"/"+kind)
}

func (r *recorder) ResolveDrift(vm, kind string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.resolved = append(r.resolved, vm+"/"+kind)
}

func (r *recorder) release(_ context.Context, d Drift) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.released = append(r.released, d.VM)
	return nil
}

func (r *recorder) get() (seen, resolved, released []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.seen...), append([]string(nil), r.resolved...), append([]string(nil), r.released...)
}

// TestPolicy: an undefined domain is released when nothing holds its devices and kept,
// naming the holder, when a process holds its /dev/vfio/N; a detached device is kept; drift
// that goes away is resolved; a VM whose apply is in flight is not judged.
func TestPolicy(t *testing.T) {
	tr := hosttest.New(t)
	gpu, audio := tr.ConsumerGPU("0000:00:04.0", "0000:01:00.0", "vfio-pci")
	a100 := tr.DatacenterGPU("0000:00:05.0", "0000:41:00.0", "vfio-pci", 0)
	l := ledger.Open(tr.Root)
	f := virt.NewFake()
	pci := func(a host.Address) ledger.Claim { return ledger.Claim{Kind: ledger.KindPCI, ID: a.String()} }
	applied(t, l, "gone-free", f.URI(), pci(gpu), pci(audio))
	applied(t, l, "gone-held", f.URI(), pci(a100))
	applied(t, l, "detached", f.URI(), ledger.Claim{Kind: ledger.KindMdev, ID: "83c32df7-d52e-4ec1-9668-1f3c7e4df107"})
	applied(t, l, "fine", f.URI(), ledger.Claim{Kind: ledger.KindMdev, ID: "93c32df7-d52e-4ec1-9668-1f3c7e4df107"})
	_ = l.Update(func(b *ledger.Book) error {
		b.Entry("in-flight").Phase = ledger.PhaseApplying
		return b.Claim("in-flight", ledger.Claim{Kind: ledger.KindMdev, ID: "a3c32df7-d52e-4ec1-9668-1f3c7e4df107"})
	})
	f.AddForeignDomain("detached", domainXML("detached", nil, nil), true)
	f.AddForeignDomain("fine", domainXML("fine", nil, []string{"93C32DF7-D52E-4EC1-9668-1F3C7E4DF107"}), true)
	// A QEMU that outlived its definition still has the A100's group open.
	g := tr.Group(a100)
	tr.HoldOpen(4242, "qemu-system-x86", fmt.Sprintf("/dev/vfio/%d", g))

	rec := &recorder{}
	w := &Watcher{Conn: f, Ledger: l, Root: tr.Root, Metrics: rec, Release: rec.release}
	got, err := w.Check(bg)
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]Drift{}
	for _, d := range got {
		by[d.VM] = d
	}
	if len(got) != 3 {
		t.Fatalf("drifts %+v, want gone-free, gone-held and detached", got)
	}
	if d := by["gone-free"]; d.Kind != KindDomainUndefined || d.Action != ActionRelease || len(d.Devices) != 2 {
		t.Errorf("gone-free: %+v", d)
	}
	if d := by["gone-held"]; d.Action != ActionKeep || len(d.Holders) != 1 || d.Holders[0].PID != 4242 || !strings.Contains(d.Reason, "pid 4242 (qemu-system-x86)") {
		t.Errorf("gone-held: %+v", d)
	}
	if d := by["detached"]; d.Kind != KindDeviceDetached || d.Action != ActionKeep || d.Devices[0] != "mdev:83c32df7-d52e-4ec1-9668-1f3c7e4df107" {
		t.Errorf("detached: %+v", d)
	}
	seen, _, released := rec.get()
	if len(seen) != 3 || strings.Join(released, ",") != "gone-free" {
		t.Errorf("recorded %v, released %v", seen, released)
	}
	// Seen again: no new events, no second release.
	if _, err := w.Check(bg); err != nil {
		t.Fatal(err)
	}
	if seen2, _, released2 := rec.get(); len(seen2) != 3 || len(released2) != 1 {
		t.Errorf("second check recorded %v, released %v", seen2, released2)
	}
	// The device comes back: the drift is resolved.
	f.AddForeignDomain("detached", domainXML("detached", nil, []string{"83c32df7-d52e-4ec1-9668-1f3c7e4df107"}), true)
	if _, err := w.Check(bg); err != nil {
		t.Fatal(err)
	}
	if _, resolved, _ := rec.get(); strings.Join(resolved, ",") != "detached/"+KindDeviceDetached {
		t.Errorf("resolved %v", resolved)
	}
	if ds := w.Drifts(); len(ds) != 2 || ds[0].VM != "gone-free" || ds[1].VM != "gone-held" {
		t.Errorf("current drifts %+v", ds)
	}
}

// flaky is a virt.Conn whose open fails while down is set, and whose calls report the
// connection lost while broken is set.
type flaky struct {
	virt.Conn
	broken *bool
}

func (f flaky) ListDomainXMLs(ctx context.Context) (map[string]string, error) {
	if *f.broken {
		return nil, fmt.Errorf("list domains: %w: Cannot recv data: Connection reset by peer", virt.ErrConnection)
	}
	return f.Conn.ListDomainXMLs(ctx)
}

// TestConnReconnectsWithBackoff: the warm connection is opened once and shared; while libvirtd
// is down, opens are spaced by a growing back-off (not one per call); a call that reports the
// connection lost makes the next call open a new one.
func TestConnReconnectsWithBackoff(t *testing.T) {
	down, broken := true, false
	opens := 0
	fake := virt.NewFake()
	clock := time.Unix(0, 0)
	c := NewConn("fake:///", func() (virt.Conn, error) {
		opens++
		if down {
			return nil, errors.New("Failed to connect socket to '/run/libvirt/libvirt-sock': No such file or directory")
		}
		return flaky{fake, &broken}, nil
	}, nil)
	c.now = func() time.Time { return clock }

	for i := 0; i < 5; i++ {
		if _, err := c.ListDomainXMLs(bg); !errors.Is(err, ErrNotConnected) {
			t.Fatalf("call %d while down: %v", i, err)
		}
	}
	if opens != 1 {
		t.Fatalf("%d opens for 5 calls within the back-off, want 1", opens)
	}
	clock = clock.Add(MinBackoff)
	c.ListDomainXMLs(bg)
	clock = clock.Add(MinBackoff) // the back-off doubled: not yet
	c.ListDomainXMLs(bg)
	if opens != 2 {
		t.Fatalf("%d opens, want 2 (back-off doubled to %s)", opens, 2*MinBackoff)
	}
	down = false
	clock = clock.Add(MaxBackoff)
	if _, err := c.ListDomainXMLs(bg); err != nil || opens != 3 || !c.Connected() {
		t.Fatalf("after libvirtd came up: %v, %d opens", err, opens)
	}
	for i := 0; i < 3; i++ {
		if _, err := c.ListDomainXMLs(bg); err != nil {
			t.Fatal(err)
		}
	}
	if opens != 3 {
		t.Fatalf("%d opens: the connection was not kept warm", opens)
	}
	// libvirtd restarts: the call fails with the connection lost, the next one reconnects.
	broken = true
	if _, err := c.ListDomainXMLs(bg); !errors.Is(err, virt.ErrConnection) || c.Connected() {
		t.Fatalf("lost connection: %v, connected %v", err, c.Connected())
	}
	broken = false
	if _, err := c.ListDomainXMLs(bg); err != nil || opens != 4 || c.Reconnects() != 1 {
		t.Fatalf("reconnect: %v, %d opens, %d reconnects", err, opens, c.Reconnects())
	}
	// An ordinary error (no such domain) keeps the connection.
	if _, err := c.DomainXML(bg, "nope"); !virt.IsNotFound(err) || !c.Connected() || opens != 4 {
		t.Fatalf("not-found: %v, connected %v, %d opens", err, c.Connected(), opens)
	}
}
