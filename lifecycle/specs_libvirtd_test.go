package lifecycle

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/domains"
	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/internal/fetch/httpget"
	"github.com/vgpu-host/vgpu-host/internal/testenv"
	"github.com/vgpu-host/vgpu-host/ledger"
	"github.com/vgpu-host/vgpu-host/virt"
)

// TestWindows11InstallerStarts applies, on the real libvirtd under TCG, a spec with what a
// Windows 11 install needs: os windows11 (an swtpm TPM 2.0, Secure Boot with enrolled keys
// through libvirt's firmware auto-selection, SMM, localtime; the Hyper-V list needs KVM and is left out under TCG), an installer
// CD booting before a blank disk apply creates in the pool, the virtio-win CD, a Looking Glass
// ivshmem device, a CPU topology and a vCPU pin. libvirt defines it with schema validation
// and QEMU starts it; destroy deletes the blank disk. A spec whose ISO is missing fails in
// plan with the path, before anything is created.
func TestWindows11InstallerStarts(t *testing.T) {
	uri := testenv.Libvirtd(t)
	if _, err := exec.LookPath("swtpm"); err != nil {
		testenv.SkipOrFail(t, "needs swtpm (scripts/deps.sh test)")
	}
	root, work := guestRoot(t)
	iso, virtio := filepath.Join(work, "installer.iso"), filepath.Join(work, "virtio-win.iso")
	for _, f := range []string{iso, virtio} {
		if err := os.WriteFile(f, make([]byte, 1<<20), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	name := "vgpuhost-test-win11"
	spec := func(cd string) *domains.VM {
		vm, err := domains.Parse([]byte(fmt.Sprintf(`apiVersion: vgpu-host/v1
kind: VirtualMachine
metadata:
  name: %s
spec:
  os: windows11
  vcpus: 2
  memory: 256MiB
  cpu:
    topology: {sockets: 1, cores: 1, threads: 2}
    pin: [0, 0]
  disks:
    - name: system
      blank: true
      size: 64MiB
      bus: scsi
    - device: cdrom
      %s
  virtioWin: %s
  boot: [cdrom, disk]
  network:
    type: none
  graphics:
    type: none
  devices:
    lookingGlass: {resolution: 1920x1080}
  xmlPatches:
    - add: /domain/devices
      xml: <watchdog model="i6300esb" action="reset"/>
    - set: "/domain/devices/disk[1]/driver/@cache"
      value: none
`, name, cd, virtio)))
		if err != nil {
			t.Fatal(err)
		}
		if err := vm.Validate(); err != nil {
			t.Fatal(err)
		}
		return vm
	}
	conn := libvirtdConn(t, uri, root, name)
	lc := New(Options{Root: root, Conn: conn, VirtType: "qemu", Ledger: ledger.Open(root), CheckFiles: true, Fetch: httpget.Fetch})
	ctx := context.Background()

	missing := filepath.Join(work, "nope.iso")
	if _, err := lc.Plan(ctx, []*domains.VM{spec("path: " + missing)}); !errors.Is(err, host.ErrNotFound) || !strings.Contains(err.Error(), missing) {
		t.Fatalf("plan with a missing ISO: %v", err)
	}

	// The installer comes from a URL: apply fetches it into the pool, checks its checksum,
	// and QEMU (as libvirt-qemu) must be able to read it there.
	isoData, err := os.ReadFile(iso)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(isoData) }))
	defer srv.Close()
	sum := sha256.Sum256(isoData)
	fromURL := fmt.Sprintf("url: %s/installer.iso\n      checksum: sha256:%x", srv.URL, sum)
	if _, err := lc.Apply(ctx, spec(fromURL)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root.StateDir("images"), "installer.iso")); err != nil {
		t.Fatalf("fetched ISO not in the pool: %v", err)
	}
	st, err := conn.State(ctx, name)
	if err != nil || st != virt.StateRunning {
		t.Fatalf("domain state %v, %v; want running", st, err)
	}
	x, err := exec.Command("virsh", "-c", uri, "dumpxml", name).CombinedOutput()
	if err != nil {
		t.Fatalf("dumpxml: %v %s", err, x)
	}
	live := string(x)
	// Debian's firmware descriptors make libvirt pick OVMF_CODE_4M.ms.fd (Secure Boot) with
	// the Microsoft keys' vars template for enrolled-keys.
	for _, want := range []string{"<tpm model='tpm-crb'>", "<backend type='emulator' version='2.0'", "secure='yes'", "OVMF_VARS_4M.ms.fd", "<smm state='on'/>",
		"<clock offset='localtime'>", "<boot order='1'/>", "<shmem name='looking-glass'>", "<size unit='M'>32</size>",
		"<vcpupin vcpu='1' cpuset='0'/>", "threads='2'", "installer.iso", "virtio-win.iso",
		"<watchdog model='i6300esb' action='reset'", "cache='none'"} {
		if !strings.Contains(live, want) {
			t.Errorf("running domain lacks %s", want)
		}
	}
	blank := filepath.Join(root.StateDir("images"), name+"-system.qcow2")
	if info, err := exec.Command("qemu-img", "info", "-U", blank).CombinedOutput(); err != nil || !strings.Contains(string(info), "virtual size: 64 MiB") || strings.Contains(string(info), "backing file") {
		t.Errorf("blank disk %s: %v\n%s", blank, err, info)
	}
	if _, err := lc.Destroy(ctx, name); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(blank); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("blank disk left after destroy: %v", err)
	}
}
