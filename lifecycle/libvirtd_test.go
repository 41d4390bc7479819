package lifecycle

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"libvirt.org/go/libvirtxml"

	"github.com/vgpu-host/vgpu-host/domains"
	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/internal/testenv"
	"github.com/vgpu-host/vgpu-host/ledger"
	"github.com/vgpu-host/vgpu-host/virt"
	"github.com/vgpu-host/vgpu-host/virt/native"
)

// guestInit is the tiny initramfs's /init: it lists the guest's PCI functions from sysfs the
// way lspci -n would (no drivers needed: the PCI core enumerates them) and powers off.
const guestInit = `#!/bin/busybox sh
/bin/busybox --install -s /bin
mkdir -p /proc /sys
mount -t proc proc /proc
mount -t sysfs sysfs /sys
for d in /sys/bus/pci/devices/*; do
  echo "PCI ${d##*/} $(cat $d/vendor | cut -c3-):$(cat $d/device | cut -c3-) class=$(cat $d/class)"
done
echo VGPUHOST-GUEST-DONE
poweroff -f
`

// initramfs builds a gzip'd newc cpio with a static busybox and guestInit.
func initramfs(t *testing.T, dir string) string {
	t.Helper()
	return initramfsWith(t, dir, guestInit)
}

// initramfsWith builds a gzip'd newc cpio with a static busybox and init as /init.
func initramfsWith(t *testing.T, dir, init string) string {
	t.Helper()
	tree := filepath.Join(dir, "initramfs")
	if err := os.MkdirAll(filepath.Join(tree, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	bb, err := os.ReadFile("/usr/bin/busybox")
	if err != nil {
		testenv.SkipOrFail(t, fmt.Sprintf("needs busybox-static: %v", err))
	}
	if err := os.WriteFile(filepath.Join(tree, "bin", "busybox"), bb, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tree, "init"), []byte(init), 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "initrd.gz")
	c := exec.Command("sh", "-c", "find . | cpio -o -H newc --quiet | gzip -1 > "+out)
	c.Dir = tree
	if b, err := c.CombinedOutput(); err != nil {
		t.Fatalf("cpio: %v: %s", err, b)
	}
	return out
}

// TestGuestBootsAndSeesVirtioGPU applies a VM whose gpus[] falls back to virtio-gpu, boots
// Debian's kernel with a tiny initramfs by direct kernel boot under TCG, and reads the
// guest's serial console (a file): the guest lists a 1af4:1050 (virtio-gpu) PCI function.
// apply's wait for shutdown sees it power off, and image export flattens its overlay.
func TestGuestBootsAndSeesVirtioGPU(t *testing.T) {
	uri := testenv.Libvirtd(t)
	kernels, _ := filepath.Glob("/boot/vmlinuz-*")
	if len(kernels) == 0 {
		t.Fatal("no /boot/vmlinuz-* (Debian's linux-image-amd64)")
	}
	root, work := guestRoot(t)
	initrd := initramfs(t, work)
	serial := filepath.Join(work, "serial.log")
	base := filepath.Join(work, "base.qcow2")
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", base, "32M").CombinedOutput(); err != nil {
		t.Fatalf("qemu-img: %v: %s", err, out)
	}

	name := "vgpuhost-test-boot"
	vm, err := domains.Parse([]byte(fmt.Sprintf(`apiVersion: vgpu-host/v1
kind: VirtualMachine
metadata:
  name: %s
spec:
  vcpus: 1
  memory: 256MiB
  firmware: bios
  disks:
    - name: root
      image: %s
      size: 64MiB
  network:
    type: none
  graphics:
    type: none
  gpus:
    - passthrough:
        vendor: "10de"
      fallback: virtio-gpu
`, name, base)))
	if err != nil {
		t.Fatal(err)
	}
	if err := vm.Validate(); err != nil {
		t.Fatal(err)
	}
	conn := libvirtdConn(t, uri, root, name)
	lc := New(Options{Root: root, Conn: conn, VirtType: "qemu", Ledger: ledger.Open(root),
		Customize: func(_ *domains.VM, d *libvirtxml.Domain) error {
			d.OS.Kernel, d.OS.Initrd = kernels[len(kernels)-1], initrd
			d.OS.Cmdline = "console=ttyS0 rdinit=/init panic=-1 quiet"
			src := &libvirtxml.DomainChardevSource{File: &libvirtxml.DomainChardevSourceFile{Path: serial}}
			d.Devices.Serials = []libvirtxml.DomainSerial{{Source: src, Target: &libvirtxml.DomainSerialTarget{Port: new(uint)}}}
			d.Devices.Consoles = nil
			return nil
		}})
	ctx := context.Background()
	res, err := lc.Apply(ctx, vm)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Fallback) != 1 {
		t.Fatalf("fallback not reported: %+v", res)
	}
	wctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	if err := lc.WaitShutdown(wctx, name, nil); err != nil {
		log, _ := os.ReadFile(serial)
		t.Fatalf("guest did not power off: %v\nserial:\n%s", err, tail(string(log)))
	}
	log, err := os.ReadFile(serial)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "VGPUHOST-GUEST-DONE") || !strings.Contains(string(log), " 1af4:1050 class=0x03") {
		t.Fatalf("guest did not list a virtio-gpu (1af4:1050, display class):\n%s", tail(string(log)))
	}
	for _, l := range strings.Split(string(log), "\n") {
		if strings.HasPrefix(l, "PCI ") {
			t.Log(strings.TrimSpace(l))
		}
	}

	img := filepath.Join(work, "exported.qcow2")
	if _, err := lc.Export(ctx, name, img, ExportOptions{NoCompress: true}); err != nil {
		t.Fatal(err)
	}
	info, err := exec.Command("qemu-img", "info", img).CombinedOutput()
	if err != nil || strings.Contains(string(info), "backing file") || !strings.Contains(string(info), "virtual size: 64 MiB") {
		t.Fatalf("exported image is not standalone 64 MiB: %v\n%s", err, info)
	}

	if _, err := lc.Destroy(ctx, name); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.State(ctx, name); !virt.IsNotFound(err) {
		t.Fatalf("domain left after destroy: %v", err)
	}
	if vols, _ := filepath.Glob(filepath.Join(root.StateDir("images"), name+"-*")); len(vols) != 0 {
		t.Fatalf("volumes left: %v", vols)
	}
}

// guestRoot is a fake host root whose directories QEMU (libvirt-qemu) may enter, and its
// guest/ directory for the files a test VM uses.
func guestRoot(t *testing.T) (host.Root, string) {
	t.Helper()
	root := hosttest.New(t).Root
	for d := root.Dir(); d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		_ = os.Chmod(d, 0o755)
	}
	work := root.Path("guest")
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	return root, work
}

func tail(s string) string {
	if len(s) > 3000 {
		return s[len(s)-3000:]
	}
	return s
}

// libvirtdConn connects to the real libvirtd at uri for a test of VM name under root; when
// the test ends the domain (with its NVRAM and TPM state), its pool and the connection go.
func libvirtdConn(t *testing.T, uri string, root host.Root, name string) *native.Libvirt {
	t.Helper()
	conn, err := native.Open(uri)
	if err != nil {
		t.Fatal(err)
	}
	pool := PoolName(root)
	t.Cleanup(func() {
		_ = conn.Destroy(context.Background(), name)
		_ = exec.Command("virsh", "-c", uri, "undefine", "--nvram", "--tpm", name).Run()
		_ = conn.Undefine(context.Background(), name)
		_ = exec.Command("virsh", "-c", uri, "pool-destroy", pool).Run()
		_ = exec.Command("virsh", "-c", uri, "pool-undefine", pool).Run()
		conn.Close()
	})
	return conn
}
