package clitree

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/internal/testenv"
	"github.com/vgpu-host/vgpu-host/lifecycle"
)

// bakeVMSpec is a small cloud VM on image under TCG: SeaBIOS boots the image's extlinux, the
// seed CD carries userData, and the serial console is logged to serial (for the failure
// message).
func bakeVMSpec(name, image, serial, userData string) string {
	return fmt.Sprintf(`apiVersion: vgpu-host/v1
kind: VirtualMachine
metadata:
  name: %s
spec:
  vcpus: 1
  memory: 768MiB
  firmware: bios
  disks:
    - name: root
      image: %s
      size: 2GiB
  network: {type: none}
  graphics: {type: none}
  cloudInit:
    userData: |
%s
  xmlPatches:
    - add: /domain/devices/serial[1]
      xml: <log file="%s" append="on"/>
`, name, image, indent(userData, "      "), serial)
}

func indent(s, by string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i := range lines {
		lines[i] = by + lines[i]
	}
	return strings.Join(lines, "\n")
}

// The builder's userData bakes a file into the image and records the builder's identity in
// it (machine-id, SSH host key, cloud-init instance), then powers off.
const builderUserData = `#cloud-config
write_files:
  - path: /var/lib/bake/baked
    content: "baked by the builder\n"
runcmd:
  - [sh, -c, 'cat /etc/machine-id > /var/lib/bake/builder-machine-id; cat /etc/ssh/ssh_host_ed25519_key.pub > /var/lib/bake/builder-hostkey']
power_state: {mode: poweroff, delay: now}
`

// The fresh VM's userData records what its own first boot made.
const freshUserData = `#cloud-config
runcmd:
  - [sh, -c, 'cat /etc/machine-id > /var/lib/bake/fresh-machine-id; cat /etc/ssh/ssh_host_ed25519_key.pub > /var/lib/bake/fresh-hostkey; ls /var/lib/cloud/instances > /var/lib/bake/fresh-instances']
power_state: {mode: poweroff, delay: now}
`

// testImage builds (or finds in its cache) the Debian 12 cloud image of scripts/test-image.sh.
func testImage(t *testing.T) string {
	t.Helper()
	testenv.RequireRoot(t)
	for _, tool := range []string{"debootstrap", "extlinux", "virt-sysprep", "guestfish"} {
		pkg := map[string]string{"debootstrap": "debootstrap", "extlinux": "extlinux"}[tool]
		if pkg == "" {
			pkg = "libguestfs-tools"
		}
		testenv.RequireTool(t, tool, pkg)
	}
	start := time.Now()
	cmd := exec.Command(filepath.Join("..", "..", "scripts", "test-image.sh"))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("scripts/test-image.sh: %v\n%s", err, stderr.String())
	}
	t.Logf("test image %s (%s)", strings.TrimSpace(string(out)), time.Since(start).Round(time.Second))
	return strings.TrimSpace(string(out))
}

// guestFiles reads files from disk images (backing chains included) in one read-only
// guestfish run: an appliance launch costs close to a minute under TCG. Each image is one ext4
// filesystem without a partition table (scripts/test-image.sh), mounted at /0, /1, … in the
// order given; the keys of the result are "N:/path". A missing file reads as "<missing>".
func guestFiles(t *testing.T, images []string, paths ...string) map[string]string {
	t.Helper()
	args := []string{"--ro"}
	var script strings.Builder
	script.WriteString("run\n")
	for i, img := range images {
		args = append(args, "--format=qcow2", "-a", img)
		fmt.Fprintf(&script, "mkmountpoint /%d\nmount-ro /dev/sd%c /%d\n", i, 'a'+i, i)
	}
	var keys []string
	for i := range images {
		for _, p := range paths {
			k := fmt.Sprintf("%d:%s", i, p)
			keys = append(keys, k)
			fmt.Fprintf(&script, "echo ==%d==\n-cat /%d%s\n", len(keys)-1, i, p)
		}
	}
	cmd := exec.Command("guestfish", args...)
	cmd.Env = append(os.Environ(), "LIBGUESTFS_BACKEND=direct")
	cmd.Stdin = strings.NewReader(script.String())
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("guestfish %v: %v\n%s", images, err, stderr.String())
	}
	t.Logf("guestfish read %d files of %d images in %s", len(keys), len(images), time.Since(start).Round(time.Second))
	parts := regexp.MustCompile(`(?m)^==\d+==\n`).Split(string(out), -1)
	if len(parts) != len(keys)+1 {
		t.Fatalf("guestfish: %d answers for %d files:\n%s\n%s", len(parts)-1, len(keys), out, stderr.String())
	}
	got := map[string]string{}
	for i, k := range keys {
		got[k] = strings.TrimRight(parts[i+1], "\n") // guestfish ends each answer with a newline
		// -cat of a missing file prints nothing and an error naming it on stderr.
		if n := strings.IndexByte(k, ':'); strings.Contains(stderr.String(), "/"+k[:n]+k[n+1:]+": No such file or directory") {
			got[k] = "<missing>"
		}
	}
	return got
}

// fileSum is the SHA-256 of a file's bytes.
func fileSum(t *testing.T, path string) string {
	t.Helper()
	out, err := exec.Command("sha256sum", path).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(out))[0]
}

// TestBakeLibvirtd proves the image pipeline end to end on the real libvirtd under TCG: a
// builder VM from a Debian 12 cloud image built here runs its cloud-init and powers off
// (apply --wait-shutdown); `image export --seal` writes a sealed copy and leaves the builder's
// disk byte for byte as it was; the copy has the builder's baked file but no machine-id, SSH
// host keys, cloud-init state or logs; a new VM from the copy runs cloud-init as a first boot:
// its own instance alone, a new machine-id, new SSH host keys.
func TestBakeLibvirtd(t *testing.T) {
	uri := testenv.Libvirtd(t)
	binary(t) // the libvirt helper
	base := testImage(t)
	// libguestfs's appliance under TCG: /dev/kvm exists here but nested KVM hangs.
	t.Setenv("LIBGUESTFS_BACKEND_SETTINGS", "force_tcg")
	root := hosttest.New(t).Root
	for d := root.Dir(); d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		_ = os.Chmod(d, 0o755) // QEMU opens the overlays, seeds and the sealed image under the root
	}
	work := root.Path("bake")
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	g := []string{"--host-root", root.Dir()}
	cmd := func(args ...string) []string { return append(append([]string{}, g...), args...) }
	builder, fresh := "vgpuhost-test-bake-builder", "vgpuhost-test-bake-fresh"
	for _, n := range []string{builder, fresh} {
		t.Cleanup(func() {
			if _, err := virsh(uri, "dominfo", n); err == nil {
				runCLI(t, cmd("destroy", "--connect", uri, n)...)
			}
		})
	}
	t.Cleanup(func() {
		pool := lifecycle.PoolName(root)
		virsh(uri, "pool-destroy", pool)
		virsh(uri, "pool-undefine", pool)
	})
	boot := func(name, image, userData string) string {
		t.Helper()
		serial := filepath.Join(work, name+".serial")
		spec := filepath.Join(work, name+".yaml")
		if err := os.WriteFile(spec, []byte(bakeVMSpec(name, image, serial, userData)), 0o644); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		out, errs, code := runAll(t, cmd("apply", "--connect", uri, "--virt-type", "qemu", "--wait-shutdown", "--timeout", "8m", spec)...)
		if code != 0 || !strings.Contains(out, name+": applied, shutoff") {
			log, _ := os.ReadFile(serial)
			t.Fatalf("apply --wait-shutdown %s: exit %d\n%s%s\nserial console:\n%s", name, code, out, errs, tailOf(string(log), 4000))
		}
		t.Logf("%s: booted, ran cloud-init, powered off in %s", name, time.Since(start).Round(time.Second))
		ov, _ := filepath.Glob(filepath.Join(root.StateDir("images"), name+"-root*.qcow2"))
		if len(ov) != 1 {
			t.Fatalf("%s: overlay %v", name, ov)
		}
		return ov[0]
	}

	// 1. The builder: its cloud-init bakes a file, records its identity and powers off.
	builderDisk := boot(builder, base, builderUserData)

	// 2. Export and seal. (Compression is TestExportFormatsLibvirtd's: here it would add a
	// minute of zlib to the test.)
	sealed := filepath.Join(work, "baked.qcow2")
	before := fileSum(t, builderDisk)
	start := time.Now()
	out, errs, code := runAll(t, cmd("-o", "json", "image", "export", "--connect", uri, builder, "--to", sealed, "--seal", "--no-compress")...)
	var res lifecycle.ExportResult
	if err := json.Unmarshal([]byte(out), &res); code != 0 || err != nil || !res.Sealed || res.Format != "qcow2" || res.Compressed ||
		res.VirtualSize != 2<<30 || res.Allocated <= 0 || len(res.SealOps) == 0 {
		t.Fatalf("export --seal: exit %d (%v)\n%s%s", code, err, out, errs)
	}
	t.Logf("export --seal: %s (%.0f MiB on disk)", time.Since(start).Round(time.Second), float64(res.Allocated)/(1<<20))
	if info, err := exec.Command("qemu-img", "info", sealed).CombinedOutput(); err != nil || strings.Contains(string(info), "backing file") {
		t.Fatalf("sealed image is not standalone: %v\n%s", err, info)
	}
	if fileSum(t, builderDisk) != before {
		t.Errorf("the seal changed the builder's disk %s", builderDisk)
	}
	if out, code := runCLI(t, cmd("destroy", "--connect", uri, builder)...); code != 0 {
		t.Fatalf("destroy builder: exit %d\n%s", code, out)
	}

	// 3. A new VM from the sealed image: cloud-init runs again as a first boot. (The sealed
	// image is its backing file, read only: reading it after this boot is reading it before.)
	freshDisk := boot(fresh, sealed, freshUserData)

	// 4. Both disks in one appliance: /0 the sealed image as exported, /1 the new VM's.
	f := guestFiles(t, []string{sealed, freshDisk},
		"/var/lib/bake/baked", "/var/lib/bake/builder-machine-id", "/var/lib/bake/builder-hostkey",
		"/etc/machine-id", "/etc/ssh/ssh_host_ed25519_key.pub", "/var/lib/cloud/data/instance-id",
		"/var/lib/cloud/instance/user-data.txt", "/var/log/cloud-init.log",
		"/var/lib/bake/fresh-machine-id", "/var/lib/bake/fresh-hostkey", "/var/lib/bake/fresh-instances")
	builderID, builderKey := f["0:/var/lib/bake/builder-machine-id"], f["0:/var/lib/bake/builder-hostkey"]
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(builderID) || !strings.HasPrefix(builderKey, "ssh-ed25519 ") {
		t.Fatalf("the builder's cloud-init did not record its machine-id and host key: %q %q", builderID, builderKey)
	}
	// The sealed image: what the builder baked, none of its identity or cloud-init state.
	if f["0:/var/lib/bake/baked"] != "baked by the builder" {
		t.Errorf("the sealed image lost what the builder baked: %q", f["0:/var/lib/bake/baked"])
	}
	if f["0:/etc/machine-id"] != "" {
		t.Errorf("the sealed image keeps a machine-id: %q", f["0:/etc/machine-id"])
	}
	for _, p := range []string{"/etc/ssh/ssh_host_ed25519_key.pub", "/var/lib/cloud/data/instance-id", "/var/lib/cloud/instance/user-data.txt", "/var/log/cloud-init.log"} {
		if f["0:"+p] != "<missing>" {
			t.Errorf("the sealed image keeps %s: %q", p, tailOf(f["0:"+p], 300))
		}
	}
	// The new VM: its own first boot.
	if id := f["1:/var/lib/cloud/data/instance-id"]; id != fresh || f["1:/var/lib/bake/fresh-instances"] != fresh {
		t.Errorf("the new VM's cloud-init instance %q, instances %q; want %s alone", id, f["1:/var/lib/bake/fresh-instances"], fresh)
	}
	if m := f["1:/var/lib/bake/fresh-machine-id"]; !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(m) || m == builderID || m != f["1:/etc/machine-id"] {
		t.Errorf("machine-id not regenerated: builder %q, new VM %q (its /etc/machine-id %q)", builderID, m, f["1:/etc/machine-id"])
	}
	if k := f["1:/var/lib/bake/fresh-hostkey"]; !strings.HasPrefix(k, "ssh-ed25519 ") || k == builderKey {
		t.Errorf("SSH host key not regenerated: builder %q, new VM %q", builderKey, k)
	}
	if f["1:/var/lib/bake/baked"] != "baked by the builder" {
		t.Errorf("the new VM lost the baked file: %q", f["1:/var/lib/bake/baked"])
	}
	if n := strings.Count(f["1:/var/log/cloud-init.log"], "running 'init-local'"); n != 1 {
		t.Errorf("the new VM's cloud-init.log shows %d boots, want its first alone", n)
	}
	if out, code := runCLI(t, cmd("destroy", "--connect", uri, fresh)...); code != 0 {
		t.Fatalf("destroy fresh: exit %d\n%s", code, out)
	}
	assertClean(t, uri, root, builder)
	assertClean(t, uri, root, fresh)
}

func tailOf(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
