package lifecycle

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/domains"
	"github.com/vgpu-host/vgpu-host/host"
)

func TestCheckSpecFiles(t *testing.T) {
	t.Parallel()
	if os.Getuid() != 0 {
		t.Skip("needs root to make files another user cannot read")
	}
	if lookupQEMU([]string{"nobody"}) == nil {
		t.Fatal("no user nobody")
	}
	dir := t.TempDir()
	// t.TempDir makes its directories 0700: open them to the test user.
	_ = os.Chmod(filepath.Dir(dir), 0o755)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ok := filepath.Join(dir, "ok.iso")
	secret := filepath.Join(dir, "secret.iso")
	closed := filepath.Join(dir, "closed")
	hidden := filepath.Join(closed, "hidden.iso")
	acl := filepath.Join(dir, "acl.iso")
	for _, f := range []struct {
		path string
		mode os.FileMode
	}{{ok, 0o644}, {secret, 0o600}, {acl, 0o600}} {
		if err := os.WriteFile(f.path, []byte("x"), f.mode); err != nil {
			t.Fatal(err)
		}
		_ = os.Chmod(f.path, f.mode)
	}
	if err := os.Mkdir(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(hidden, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	users := []string{"nobody"}
	if err := CheckSpecFiles([]SpecFile{{Field: "spec.disks[0].path", Path: ok}}, users); err != nil {
		t.Errorf("readable file refused: %v", err)
	}
	err := CheckSpecFiles([]SpecFile{{Field: "spec.disks[1].path", Path: filepath.Join(dir, "missing.iso")}}, users)
	if !errors.Is(err, host.ErrNotFound) || !strings.Contains(err.Error(), "spec.disks[1].path") || !strings.Contains(err.Error(), "missing.iso does not exist") {
		t.Errorf("missing file: %v", err)
	}
	err = CheckSpecFiles([]SpecFile{{Field: "spec.virtioWin", Path: secret}}, users)
	if err == nil || errors.Is(err, host.ErrNotFound) || !strings.Contains(err.Error(), "chmod o+r "+secret) || !strings.Contains(err.Error(), "setfacl -m u:nobody:r") {
		t.Errorf("unreadable file: %v", err)
	}
	err = CheckSpecFiles([]SpecFile{{Field: "spec.disks[0].image", Path: hidden}}, users)
	if err == nil || !strings.Contains(err.Error(), "directory "+closed) || !strings.Contains(err.Error(), "chmod o+x "+closed) {
		t.Errorf("unsearchable directory: %v", err)
	}
	// An ACL granting the user read access makes a 0600 file readable.
	if _, lerr := lookPath("setfacl"); lerr == nil {
		if out, err := runCmd("setfacl", "-m", "u:nobody:r", acl); err != nil {
			t.Fatalf("setfacl: %v %s", err, out)
		}
		if err := CheckSpecFiles([]SpecFile{{Field: "spec.disks[0].path", Path: acl}}, users); err != nil {
			t.Errorf("file readable through its ACL refused: %v", err)
		}
	} else {
		t.Log("no setfacl here: ACL case not run")
	}
	// Device nodes: existence only.
	if err := CheckSpecFiles([]SpecFile{{Field: "spec.devices.evdev[0].path", Path: "/dev/input/by-id/none-event-kbd", Device: true}}, users); !errors.Is(err, host.ErrNotFound) {
		t.Errorf("missing evdev: %v", err)
	}
}

func TestSpecFiles(t *testing.T) {
	t.Parallel()
	vm, err := domains.Load("../examples/windows11-gaming.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range SpecFiles(vm, domains.BuildOptions{}) {
		got = append(got, f.Field+"="+f.Path)
	}
	want := []string{
		"spec.disks[1].path=/var/lib/libvirt/images/Win11_23H2_English_x64.iso",
		"spec.virtioWin=/var/lib/libvirt/images/virtio-win.iso",
		"spec.devices.evdev[0].path=/dev/input/by-id/usb-Logitech_USB_Receiver-event-kbd",
		"spec.devices.evdev[1].path=/dev/input/by-id/usb-Logitech_USB_Receiver-if01-event-mouse",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("SpecFiles:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func lookPath(name string) (string, error) { return exec.LookPath(name) }

func runCmd(name string, args ...string) ([]byte, error) {
	return exec.Command(name, args...).CombinedOutput()
}
