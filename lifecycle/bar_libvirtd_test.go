package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/domains"
	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/internal/testenv"
	"github.com/vgpu-host/vgpu-host/ledger"
	"github.com/vgpu-host/vgpu-host/vfio"
)

// barInit is the guest's /init: it prints the kernel's view of the ivshmem device's BAR 2 and
// powers off.
const barInit = `#!/bin/sh
/bin/busybox mount -t proc proc /proc
echo BARTEST-BEGIN
/bin/busybox dmesg | /bin/busybox grep -E "1af4:1110|BAR 2"
echo BARTEST-END
/bin/busybox poweroff -f
`

// TestLargeBARPrediction proves plan's 64-bit MMIO prediction (domains.PredictMMIO) against
// real guests on the real libvirtd under TCG: Debian's OVMF boots the host's kernel with an
// ivshmem-plain device whose BAR 2 is as large as a big GPU's (a sparse shared-memory file),
// and the guest kernel says whether it could assign it. With QEMU's default 40 physical
// address bits OVMF's window is an eighth of the space, 128 GiB, and a 128 GiB BAR behind
// libvirt's PCIe ports does not fit in it ("no compatible bridge window"): plan predicts that
// and refuses (check mmio64; forced here to watch the guest fail). With mmio64 the guest gets
// <maxphysaddr mode='emulate' bits='41'/> (256 GiB window) or 42 (512 GiB), and a 128 GiB or
// 256 GiB BAR is assigned, as predicted.
func TestLargeBARPrediction(t *testing.T) {
	uri := testenv.Libvirtd(t)
	testenv.RequireTool(t, "cpio", "cpio")
	busybox := testenv.RequireTool(t, "busybox", "busybox-static")
	kernels, _ := filepath.Glob("/boot/vmlinuz-*")
	if len(kernels) == 0 {
		testenv.SkipOrFail(t, "needs a kernel in /boot (Debian package linux-image-amd64)")
	}
	sort.Strings(kernels)
	root, work := guestRoot(t)
	kernel, initrd := filepath.Join(work, "vmlinuz"), filepath.Join(work, "initrd.cpio")
	if out, err := exec.Command("cp", kernels[len(kernels)-1], kernel).CombinedOutput(); err != nil {
		t.Fatalf("copy kernel: %v %s", err, out)
	}
	tree := filepath.Join(t.TempDir(), "initrd")
	for _, d := range []string{"bin", "proc", "dev"} {
		if err := os.MkdirAll(filepath.Join(tree, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command("cp", busybox, filepath.Join(tree, "bin", "busybox")).CombinedOutput(); err != nil {
		t.Fatalf("copy busybox: %v %s", err, out)
	}
	if err := os.Symlink("busybox", filepath.Join(tree, "bin", "sh")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tree, "init"), []byte(barInit), 0o755); err != nil {
		t.Fatal(err)
	}
	// /dev/console, so init's output reaches the serial console.
	cpio := exec.Command("sh", "-c", "mknod dev/console c 5 1 && find . | cpio -o -H newc >"+initrd)
	cpio.Dir = tree
	if out, err := cpio.CombinedOutput(); err != nil {
		t.Fatalf("initrd: %v %s", err, out)
	}

	assigned := regexp.MustCompile(`BAR 2 \[mem 0x[0-9a-f]+-0x[0-9a-f]+ 64bit pref\]`)
	for _, c := range []struct {
		name   string
		gib    int
		mmio64 string
		fits   bool
	}{
		{"128GiB-default-bits", 128, "off", false},
		{"128GiB-mmio64-256GiB", 128, "256GiB", true},
		{"256GiB-mmio64-512GiB", 256, "512GiB", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			name := fmt.Sprintf("vgpuhost-test-bar%d-%s", c.gib, strings.ToLower(c.mmio64))
			log := filepath.Join(work, name+".log")
			vm, err := domains.Parse([]byte(fmt.Sprintf(`apiVersion: vgpu-host/v1
kind: VirtualMachine
metadata:
  name: %s
spec:
  vcpus: 1
  memory: 512MiB
  mmio64: %q
  network: {type: none}
  graphics: {type: none}
  xmlPatches:
    - {set: /domain/os/kernel, value: %s}
    - {set: /domain/os/initrd, value: %s}
    - {set: /domain/os/cmdline, value: "console=ttyS0 quiet"}
    - {set: "/domain/devices/serial/log/@file", value: %s}
    - add: /domain/devices
      xml: <shmem name="%s"><model type="ivshmem-plain"/><size unit="G">%d</size></shmem>
`, name, c.mmio64, kernel, initrd, log, name, c.gib)))
			if err != nil {
				t.Fatal(err)
			}
			if err := vm.Validate(); err != nil {
				t.Fatal(err)
			}
			conn := libvirtdConn(t, uri, root, name)
			t.Cleanup(func() { os.Remove("/dev/shm/" + name) })
			lc := func(force ...string) *Lifecycle {
				return New(Options{Root: root, Conn: conn, VirtType: "qemu", Ledger: ledger.Open(root), Force: force})
			}
			ctx := context.Background()
			plans, err := lc().Plan(ctx, []*domains.VM{vm})
			if err != nil {
				t.Fatal(err)
			}
			f := plans[0].MMIO64
			if f == nil || f.Fits != c.fits {
				t.Fatalf("prediction %+v, want fits=%v", f, c.fits)
			}
			t.Logf("predicted: fits=%v (%s): %s", f.Fits, f.BitsFrom, f.Reason)
			var force []string
			if !c.fits {
				if err := plans[0].Refused(); !errors.Is(err, host.ErrRefused) || !strings.Contains(err.Error(), "mmio64") {
					t.Fatalf("plan that will not fit: %v, want a refusal naming mmio64", err)
				}
				if _, err := lc().Apply(ctx, vm); !errors.Is(err, host.ErrRefused) {
					t.Fatalf("apply without --force=mmio64: %v", err)
				}
				force = []string{vfio.CheckMMIO64} // to watch the guest fail
			}
			if _, err := lc(force...).Apply(ctx, vm); err != nil {
				t.Fatal(err)
			}
			var out string
			for deadline := time.Now().Add(4 * time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
				b, _ := os.ReadFile(log)
				if out = string(b); strings.Contains(out, "BARTEST-END") {
					break
				}
			}
			if !strings.Contains(out, "BARTEST-END") {
				t.Fatalf("the guest did not report in 4 minutes:\n%s", tail(out))
			}
			got := assigned.MatchString(out) && !strings.Contains(out, "no space")
			if got != c.fits {
				t.Errorf("predicted fits=%v, the guest assigned BAR 2: %v:\n%s", c.fits, got, tail(out))
			}
			if _, err := lc().Destroy(ctx, name); err != nil {
				t.Fatal(err)
			}
		})
	}
}
