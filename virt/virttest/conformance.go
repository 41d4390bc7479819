// Package virttest holds the conformance test every virt.Conn over a real libvirtd passes:
// the cgo adapter (virt/native) and the pure-Go one (virt/direct) run the same calls against
// the same daemon and must give the same answers.
package virttest

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/virt"
)

// DomainXML is the conformance test's domain: a TCG guest with a virtio GPU, named
// vgpuhost-test-virt.
const DomainXML = `<domain type='qemu'>
  <name>vgpuhost-test-virt</name>
  <memory unit='MiB'>64</memory>
  <vcpu>1</vcpu>
  <os><type arch='x86_64'>hvm</type></os>
  <devices>
    <video><model type='virtio' heads='1'/></video>
    <graphics type='vnc' listen='127.0.0.1' autoport='yes'/>
  </devices>
</domain>`

// Conformance runs every virt.Conn method on c, connected to the real libvirtd at uri: a TCG
// domain with a virtio GPU is defined, started, asked over QMP for its PCI devices, and
// removed; a schema-invalid domain is refused; a dir pool gets a qcow2 overlay with a backing
// store and an uploaded raw volume; missing objects give the sentinel errors.
func Conformance(t *testing.T, c virt.Conn, uri string) {
	t.Helper()
	ctx := context.Background()
	types, err := c.VirtTypes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if types[len(types)-1] != "qemu" {
		t.Fatalf("VirtTypes = %v, want qemu offered last", types)
	}

	name := "vgpuhost-test-virt"
	cleanup := func() { _ = c.Destroy(ctx, name); _ = c.Undefine(ctx, name) }
	cleanup()
	t.Cleanup(cleanup)

	// A missing domain, pool or volume is the sentinel error, naming the object.
	for call, f := range map[string]func() error{
		"State":     func() error { _, err := c.State(ctx, name); return err },
		"Start":     func() error { return c.Start(ctx, name) },
		"Destroy":   func() error { return c.Destroy(ctx, name) },
		"Undefine":  func() error { return c.Undefine(ctx, name) },
		"DomainXML": func() error { _, err := c.DomainXML(ctx, name); return err },
		"QMP":       func() error { _, err := c.QMP(ctx, name, `{"execute":"query-status"}`); return err },
	} {
		if err := f(); !errors.Is(err, virt.ErrNoDomain) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s of a missing domain: %v, want virt.ErrNoDomain naming %s", call, err, name)
		}
	}
	if _, err := c.VolumePath(ctx, "vgpuhost-test-no-pool", "v"); !errors.Is(err, virt.ErrNoPool) {
		t.Errorf("VolumePath in a missing pool: %v, want virt.ErrNoPool", err)
	}
	// libvirtd checks the domain against its schema: an element it does not know is refused,
	// not dropped.
	bad := strings.Replace(DomainXML, "<vcpu>1</vcpu>", "<vcpu>1</vcpu><no-such-element/>", 1)
	if got, err := c.Define(ctx, bad); err == nil || virt.IsNotFound(err) || errors.Is(err, virt.ErrConnection) {
		t.Fatalf("Define of a schema-invalid domain = %q, %v; want libvirt's refusal", got, err)
	}
	if _, err := c.State(ctx, name); !errors.Is(err, virt.ErrNoDomain) {
		t.Fatalf("a refused Define left domain %s: %v", name, err)
	}
	got, err := c.Define(ctx, DomainXML)
	if err != nil || got != name {
		t.Fatalf("Define = %q, %v", got, err)
	}
	if s, err := c.State(ctx, name); err != nil || s != virt.StateShutoff {
		t.Fatalf("State after define = %q, %v", s, err)
	}
	if err := c.Start(ctx, name); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx, name); err != nil {
		t.Fatalf("second Start: %v", err)
	}
	if s, _ := c.State(ctx, name); s != virt.StateRunning {
		t.Fatalf("State after start = %q", s)
	}
	out, err := c.QMP(ctx, name, `{"execute":"query-pci"}`)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, `"vendor": 6900`) && !strings.Contains(out, `"vendor":6900`) {
		t.Fatalf("query-pci shows no 0x1af4 (virtio) device: %.400s", out)
	}
	all, err := c.ListDomainXMLs(ctx)
	if err != nil || !strings.Contains(all[name], "virtio") {
		t.Fatalf("ListDomainXMLs: %v, %q", err, all[name])
	}
	if err := c.Destroy(ctx, name); err != nil {
		t.Fatal(err)
	}
	if err := c.Destroy(ctx, name); err != nil {
		t.Fatalf("second Destroy: %v", err)
	}
	if err := c.Undefine(ctx, name); err != nil {
		t.Fatal(err)
	}

	// Storage: a dir pool, a base image, an overlay on it, an uploaded raw volume.
	dir := t.TempDir()
	pool := "vgpuhost-test-pool"
	if err := c.EnsureDirPool(ctx, pool, dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = exec.Command("virsh", "-c", uri, "pool-destroy", pool).Run()
		_ = exec.Command("virsh", "-c", uri, "pool-undefine", pool).Run()
	})
	if err := c.EnsureDirPool(ctx, pool, dir); err != nil {
		t.Fatalf("second EnsureDirPool: %v", err)
	}
	base := filepath.Join(t.TempDir(), "base.qcow2")
	if out, err := exec.Command("qemu-img", "create", "-f", "qcow2", base, "64M").CombinedOutput(); err != nil {
		t.Fatalf("qemu-img: %v: %s", err, out)
	}
	if err := c.CreateVolume(ctx, pool, virt.Volume{Name: "vgpuhost-test-overlay.qcow2", Format: "qcow2", Capacity: 128 << 20, BackingPath: base, BackingFormat: "qcow2"}); err != nil {
		t.Fatal(err)
	}
	p, err := c.VolumePath(ctx, pool, "vgpuhost-test-overlay.qcow2")
	if err != nil {
		t.Fatal(err)
	}
	info, err := exec.Command("qemu-img", "info", "-U", p).CombinedOutput()
	if err != nil || !strings.Contains(string(info), "backing file: "+base) || !strings.Contains(string(info), "backing file format: qcow2") {
		t.Fatalf("overlay is not backed by %s: %v\n%s", base, err, info)
	}
	data := []byte(strings.Repeat("seed", 1000))
	if err := c.UploadVolume(ctx, pool, "vgpuhost-test-seed.iso", data); err != nil {
		t.Fatal(err)
	}
	sp, _ := c.VolumePath(ctx, pool, "vgpuhost-test-seed.iso")
	if b, err := os.ReadFile(sp); err != nil || string(b) != string(data) {
		t.Fatalf("uploaded volume content differs: %v (%d bytes)", err, len(b))
	}
	for _, v := range []string{"vgpuhost-test-overlay.qcow2", "vgpuhost-test-seed.iso"} {
		if err := c.DeleteVolume(ctx, pool, v); err != nil {
			t.Fatal(err)
		}
		if err := c.DeleteVolume(ctx, pool, v); !errors.Is(err, virt.ErrNoVolume) {
			t.Fatalf("second delete of %s: %v, want virt.ErrNoVolume", v, err)
		}
	}
}
