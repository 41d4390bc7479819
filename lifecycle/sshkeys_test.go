package lifecycle

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/domains"
	"github.com/vgpu-host/vgpu-host/host"
)

// TestSSHAuthorizedKeys: keys given as lines and as a .pub file end up in the seed's user-data
// next to what the user wrote; a missing or private key file fails plan, before any change,
// naming the field and the path.
func TestSSHAuthorizedKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	dir := t.TempDir()
	pub := filepath.Join(dir, "id_ed25519.pub")
	if err := os.WriteFile(pub, []byte("ssh-ed25519 AAAAC3NzaFILE me@laptop\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	priv := filepath.Join(dir, "id_ed25519")
	if err := os.WriteFile(priv, []byte("-----BEGIN OPENSSH PRIVATE KEY-----\nb3Bl\n-----END OPENSSH PRIVATE KEY-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	withKeys := func(name string, keys ...string) *domains.VM {
		vm := spec(t, name, "")
		vm.Spec.CloudInit.SSHAuthorizedKeys = keys
		if err := vm.Validate(); err != nil {
			t.Fatal(err)
		}
		return vm
	}

	for _, c := range []struct {
		key, want string
		is        error
	}{
		{filepath.Join(dir, "nope.pub"), "spec.cloudInit.sshAuthorizedKeys[0]: " + filepath.Join(dir, "nope.pub") + " does not exist", host.ErrNotFound},
		{priv, "a private key: give the public one (.pub)", host.ErrInvalid},
	} {
		_, err := e.lc().Plan(ctx, []*domains.VM{withKeys("vgpuhost-test-k1", c.key)})
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, c.is) {
			t.Errorf("plan with key %s: %v, want %q (%v)", c.key, err, c.want, c.is)
		}
	}
	if !e.host.clean() || len(e.conn.Domains()) != 0 {
		t.Fatal("a refused plan changed something")
	}

	vm := withKeys("vgpuhost-test-k2", "ssh-rsa AAAAB3NzaLINE ops@ci", pub)
	if _, err := e.lc().Apply(ctx, vm); err != nil {
		t.Fatal(err)
	}
	seed := e.conn.Volume(PoolName(e.root), "vgpuhost-test-k2-cidata.iso")
	if seed == nil {
		t.Fatal("no seed")
	}
	ud := string(seed.Data) // ISO 9660 keeps file contents as they are
	for _, want := range []string{"#cloud-config\n", "runcmd:", "ssh_authorized_keys:", "ssh-rsa AAAAB3NzaLINE ops@ci", "ssh-ed25519 AAAAC3NzaFILE me@laptop"} {
		if !strings.Contains(ud, want) {
			t.Errorf("user-data lacks %q:\n%s", want, ud)
		}
	}
}
