package lifecycle

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"libvirt.org/go/libvirtxml"

	"github.com/vgpu-host/vgpu-host/domains"
	"github.com/vgpu-host/vgpu-host/internal/testenv"
	"github.com/vgpu-host/vgpu-host/ledger"
	"github.com/vgpu-host/vgpu-host/step"
	"github.com/vgpu-host/vgpu-host/virt"
)

// tickInit is the migrating guest's /init: it counts, one line a second, on its serial port.
const tickInit = `#!/bin/busybox sh
/bin/busybox --install -s /bin
i=0
while true; do echo "TICK $i"; i=$((i+1)); sleep 1; done
`

// lastTick returns the highest TICK the serial log holds, -1 for none.
func lastTick(t *testing.T, serial string) int {
	t.Helper()
	b, _ := os.ReadFile(serial)
	n := -1
	for _, m := range tickRE.FindAllStringSubmatch(string(b), -1) {
		if v, _ := strconv.Atoi(m[1]); v > n {
			n = v
		}
	}
	return n
}

var tickRE = regexp.MustCompile(`(?m)^TICK (\d+)\r?$`)

// waitTick waits until the guest has counted past n.
func waitTick(t *testing.T, serial string, n int, within time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if v := lastTick(t, serial); v > n {
			return v
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(serial)
			t.Fatalf("the guest did not count past %d in %s:\n%s", n, within, tail(string(b)))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// TestMigrateLiveBetweenTwoLibvirtds runs two "hosts" on this machine (two libvirtds, each in
// its own mount namespace with its own host_uuid, and two vgpu-host roots and ledgers): a TCG
// guest with a virtio-gpu, applied on A, first fails to migrate (B's qemu hook refuses it) and
// keeps running on A with both ledgers as they were; then it migrates live to B and keeps
// counting on its serial port, run by B's QEMU (A's is gone), B's ledger holding it and A's
// not; destroy on B removes it.
func TestMigrateLiveBetweenTwoLibvirtds(t *testing.T) {
	base := t.TempDir()
	for d := base; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		_ = os.Chmod(d, 0o755)
	}
	pa := testenv.StartPrivateLibvirtd(t, filepath.Join(base, "a"), "5ee1c0de-0000-4000-8000-00000000000a", 49400)
	pb := testenv.StartPrivateLibvirtd(t, filepath.Join(base, "b"), "5ee1c0de-0000-4000-8000-00000000000b", 49500)
	kernels, _ := filepath.Glob("/boot/vmlinuz-*")
	if len(kernels) == 0 {
		t.Fatal("no /boot/vmlinuz-* (Debian's linux-image-amd64)")
	}
	rootA, work := guestRoot(t)
	rootB, _ := guestRoot(t)
	initrd := initramfsWith(t, work, tickInit)
	serial := filepath.Join(work, "serial.log")

	name := "vgpuhost-test-migrate"
	vm, err := domains.Parse([]byte(fmt.Sprintf(`apiVersion: vgpu-host/v1
kind: VirtualMachine
metadata:
  name: %s
spec:
  vcpus: 1
  memory: 192MiB
  firmware: bios
  network:
    type: none
  graphics:
    type: none
  gpus:
    - virtioGpu: {}
`, name)))
	if err != nil {
		t.Fatal(err)
	}
	if err := vm.Validate(); err != nil {
		t.Fatal(err)
	}
	customize := func(_ *domains.VM, d *libvirtxml.Domain) error {
		d.OS.Kernel, d.OS.Initrd = kernels[len(kernels)-1], initrd
		d.OS.Cmdline = "console=ttyS0 rdinit=/init panic=-1 quiet"
		// append: the target's QEMU opens the same file and goes on where the source's stopped.
		src := &libvirtxml.DomainChardevSource{File: &libvirtxml.DomainChardevSourceFile{Path: serial, Append: "on"}}
		d.Devices.Serials = []libvirtxml.DomainSerial{{Source: src, Target: &libvirtxml.DomainSerialTarget{Port: new(uint)}}}
		d.Devices.Consoles = nil
		return nil
	}
	connA := libvirtdConn(t, pa.URI, rootA, name)
	connB := libvirtdConn(t, pb.URI, rootB, name)
	la := New(Options{Root: rootA, Conn: connA, VirtType: "qemu", Ledger: ledger.Open(rootA), Customize: customize})
	lb := New(Options{Root: rootB, Conn: connB, VirtType: "qemu", Ledger: ledger.Open(rootB), Customize: customize})
	ctx := context.Background()
	start := time.Now()
	if _, err := la.Apply(ctx, vm); err != nil {
		t.Fatal(err)
	}
	n := waitTick(t, serial, 1, 3*time.Minute)
	t.Logf("guest counting on A after %s", time.Since(start).Round(time.Second))
	opts := MigrateOptions{Target: &localTarget{l: lb}, DestURI: pb.URI, MigrateURI: "tcp://127.0.0.1"}

	// B refuses (its qemu hook): the VM runs on A, both ledgers as they were.
	pb.RefuseMigrations(t, true)
	before := entryOf(t, la.o.Ledger, name)
	_, err = la.Migrate(ctx, name, opts)
	if err == nil || !strings.Contains(err.Error(), "refused by the test") || !strings.Contains(err.Error(), "running on "+pa.URI) {
		t.Fatalf("migration to a refusing target: %v", err)
	}
	if st, err := connA.State(ctx, name); err != nil || st != virt.StateRunning {
		t.Fatalf("after the failed migration the VM is %s (%v) on A", st, err)
	}
	if _, err := connB.State(ctx, name); !virt.IsNotFound(err) {
		t.Fatalf("after the failed migration B has the domain: %v", err)
	}
	if after := entryOf(t, la.o.Ledger, name); after == nil || after.Phase != ledger.PhaseApplied || len(after.Live()) != len(before.Live()) {
		t.Fatalf("A's ledger changed: %+v", after)
	}
	if e := entryOf(t, lb.o.Ledger, name); e != nil {
		t.Fatalf("B's ledger keeps the reservation: %+v", e)
	}
	waitTick(t, serial, n, time.Minute) // the guest still runs on A

	// B accepts: the VM moves, live.
	pb.RefuseMigrations(t, false)
	start = time.Now()
	res, err := la.Migrate(ctx, name, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("migrated in %s: source %v, target %v", time.Since(start).Round(100*time.Millisecond), res.SourceSteps, res.TargetSteps)
	if _, err := connA.State(ctx, name); !virt.IsNotFound(err) {
		t.Fatalf("A still has the domain: %v", err)
	}
	if st, err := connB.State(ctx, name); err != nil || st != virt.StateRunning {
		t.Fatalf("on B the VM is %s (%v)", st, err)
	}
	if _, err := connB.DomainXML(ctx, name); err != nil {
		t.Fatalf("B has no persistent definition: %v", err)
	}
	at := lastTick(t, serial)
	got := waitTick(t, serial, at+2, time.Minute)
	t.Logf("guest counted from %d (migration ended) to %d on B", at, got)
	if entryOf(t, la.o.Ledger, name) != nil {
		t.Fatal("A's ledger still has the VM")
	}
	e := entryOf(t, lb.o.Ledger, name)
	if e == nil || e.Phase != ledger.PhaseApplied || len(e.Live()) != 1 || e.Live()[0].Action != string(step.ActDefine) {
		t.Fatalf("B's ledger entry: %+v", e)
	}
	if _, err := lb.Destroy(ctx, name); err != nil {
		t.Fatal(err)
	}
	if _, err := connB.State(ctx, name); !virt.IsNotFound(err) {
		t.Fatalf("destroy on B left the domain: %v", err)
	}
}
