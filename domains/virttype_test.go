package domains_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/domains"
	"github.com/vgpu-host/vgpu-host/host"
)

// TestVirtTypeAutoReadsKVMInRoot: virtType auto picks kvm when the inventory's host has
// /dev/kvm, else qemu with a note. The node is looked up in the inventory's root and inside
// it: a tree whose dev/kvm is a link to this machine's /dev/null (or its /dev/kvm) has no KVM.
// Before, resolve stat'ed ROOT/dev/kvm itself (host.Exists: a read of the host outside package
// host), following such a link out of the tree.
func TestVirtTypeAutoReadsKVMInRoot(t *testing.T) {
	t.Parallel()
	vm, err := domains.Load(filepath.Join("..", "examples", "virtio-gpu-fallback.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	vm.Spec.VirtType = "auto"
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	inv := &host.Inventory{Root: root}
	want := func(what, vt string) {
		t.Helper()
		a, err := domains.Resolve(vm, inv, domains.ResolveOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if a.VirtType != vt || (vt == "qemu") != strings.Contains(strings.Join(a.Notes, "\n"), "no /dev/kvm") {
			t.Errorf("%s: virt type %s, notes %q; want %s", what, a.VirtType, a.Notes, vt)
		}
	}
	want("no dev/kvm", "qemu")
	kvm := filepath.Join(root, "dev", "kvm")
	if err := os.Symlink("/dev/null", kvm); err != nil {
		t.Fatal(err)
	}
	want("dev/kvm linked out of the tree", "qemu")
	if err := os.Remove(kvm); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kvm, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	want("dev/kvm in the tree", "kvm")
}
