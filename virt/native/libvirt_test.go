package native

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/internal/testenv"
	"github.com/vgpu-host/vgpu-host/virt"
)

const testDomainXML = `<domain type='qemu'>
  <name>vgpuhost-test-virt</name>
  <memory unit='MiB'>64</memory>
  <vcpu>1</vcpu>
  <os><type arch='x86_64'>hvm</type></os>
  <devices>
    <video><model type='virtio' heads='1'/></video>
    <graphics type='vnc' listen='127.0.0.1' autoport='yes'/>
  </devices>
</domain>`

// TestLibvirtAdapter runs every virt.Conn method against a real libvirtd: a TCG domain with a
// virtio GPU is defined, started, asked over QMP for its PCI devices, and removed; a dir pool
// gets a qcow2 overlay with a backing store and an uploaded raw volume.
func TestLibvirtAdapter(t *testing.T) {
	uri := testenv.Libvirtd(t)
	ctx := context.Background()
	c, err := Open(uri)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

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

	if _, err := c.State(ctx, name); !errors.Is(err, virt.ErrNoDomain) {
		t.Fatalf("State of missing domain: %v, want virt.ErrNoDomain", err)
	}
	got, err := c.Define(ctx, testDomainXML)
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
