package virt

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
)

// TestFileConnAcrossConnections: what one FileConn defines, another on the same file sees (as
// apply's and destroy's processes must); a damaged file is an error naming it.
func TestFileConnAcrossConnections(t *testing.T) {
	ctx := context.Background()
	p := filepath.Join(t.TempDir(), "libvirt.json")
	a, err := OpenFile(FileScheme + "://" + p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Define(ctx, `<domain type="qemu"><name>vm1</name><memory unit="MiB">64</memory><os><type>hvm</type></os></domain>`); err != nil {
		t.Fatal(err)
	}
	if err := a.EnsureDirPool(ctx, "pool", "/img"); err != nil {
		t.Fatal(err)
	}
	if err := a.CreateVolume(ctx, "pool", Volume{Name: "vm1.qcow2", Format: "qcow2", Capacity: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	b, _ := OpenFile(a.URI())
	if st, err := b.State(ctx, "vm1"); err != nil || st != StateShutoff {
		t.Fatalf("second connection: %v %v", st, err)
	}
	if path, err := b.VolumePath(ctx, "pool", "vm1.qcow2"); err != nil || path != "/img/vm1.qcow2" {
		t.Fatalf("volume %q %v", path, err)
	}
	if err := b.Undefine(ctx, "vm1"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.State(ctx, "vm1"); !errors.Is(err, ErrNoDomain) {
		t.Fatalf("undefined domain still there: %v", err)
	}
	if err := os.WriteFile(p, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := a.ListDomainXMLs(ctx); err == nil {
		t.Fatal("a damaged file was read")
	}
	for _, bad := range []string{"vgpu-fake://relative.json", "vgpu-fake:///a/../b.json", "qemu:///system"} {
		if _, err := OpenFile(bad); !errors.Is(err, host.ErrInvalid) {
			t.Errorf("OpenFile(%q) = %v", bad, err)
		}
	}
}
