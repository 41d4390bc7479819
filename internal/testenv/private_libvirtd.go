package testenv

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// PrivateLibvirtd is a libvirtd of a test's own: a second (third…) "host" on this machine, for
// tests of what happens between hosts (live migration).
type PrivateLibvirtd struct {
	// Dir holds its configuration (etc/), state (run/, lib/, cache/, log/) and socket (sock/).
	Dir string
	// URI reaches it: qemu+unix:///system?socket=DIR/sock/libvirt-sock.
	URI string
	// HostUUID is its host_uuid (libvirt refuses to migrate between daemons of one UUID).
	HostUUID string
}

// StartPrivateLibvirtd starts a libvirtd in a mount namespace of its own, in which
// /etc/libvirt, /run/libvirt, /var/lib/libvirt, /var/cache/libvirt and /var/log/libvirt are
// directories under dir: its domains, their QEMU monitors and its configuration are its own,
// and this machine's libvirt state is not touched. It listens on dir/sock/libvirt-sock, uses
// host_uuid uuid and QEMU migration ports from portMin (20 of them), runs QEMU as root without
// cgroups or a security driver, and has a qemu hook that refuses every migration to it while
// the file dir/refuse-migration exists (RefuseMigrations). When the test ends its domains are
// destroyed and it is stopped. It needs root and EnvLibvirtd, as Libvirtd does.
func StartPrivateLibvirtd(t testing.TB, dir, uuid string, portMin int) *PrivateLibvirtd {
	t.Helper()
	if os.Getenv(EnvLibvirtd) == "" {
		skipOrFail(t, "needs a real libvirtd: run with "+EnvLibvirtd+"=1 (make test does)")
	}
	RequireRoot(t)
	for _, tool := range []string{"libvirtd", "unshare", "virsh"} {
		if _, err := exec.LookPath(tool); err != nil {
			skipOrFail(t, "needs "+tool+" (libvirt-daemon-system, util-linux, libvirt-clients)")
		}
	}
	p := &PrivateLibvirtd{Dir: dir, HostUUID: uuid}
	sock := filepath.Join(dir, "sock", "libvirt-sock")
	p.URI = "qemu+unix:///system?socket=" + sock
	mounts := map[string]string{"etc": "/etc/libvirt", "run": "/run/libvirt", "lib": "/var/lib/libvirt", "cache": "/var/cache/libvirt", "log": "/var/log/libvirt"}
	for _, d := range []string{"etc/hooks", "run", "lib", "cache", "log", "sock"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		"etc/libvirtd.conf": fmt.Sprintf("unix_sock_dir = %q\nauth_unix_rw = \"none\"\nauth_unix_ro = \"none\"\nhost_uuid = %q\nlog_outputs = \"3:file:%s\"\n",
			filepath.Dir(sock), uuid, filepath.Join(dir, "libvirtd.log")),
		"etc/qemu.conf": fmt.Sprintf("stdio_handler = \"file\"\ncgroup_controllers = [ ]\nsecurity_driver = \"none\"\nuser = \"root\"\ngroup = \"root\"\n"+
			"namespaces = [ ]\nremember_owner = 0\nmigration_port_min = %d\nmigration_port_max = %d\n", portMin, portMin+20),
		"etc/hooks/qemu": fmt.Sprintf("#!/bin/sh\nif [ \"$2\" = migrate ] && [ -e %s ]; then echo 'refused by the test (refuse-migration)' >&2; exit 1; fi\nexit 0\n",
			filepath.Join(dir, "refuse-migration")),
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var sh strings.Builder
	for _, d := range []string{"etc", "run", "lib", "cache", "log"} {
		fmt.Fprintf(&sh, "mount --bind %s %s && ", filepath.Join(dir, d), mounts[d])
	}
	fmt.Fprintf(&sh, "exec libvirtd -f /etc/libvirt/libvirtd.conf -p %s", filepath.Join(dir, "libvirtd.pid"))
	cmd := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", sh.String())
	out, err := os.Create(filepath.Join(dir, "libvirtd.out"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start private libvirtd: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait(); out.Close() }()
	t.Cleanup(func() {
		// Every domain of this daemon is the test's: stop them (their QEMU would outlive it).
		if names, err := exec.Command("virsh", "-c", p.URI, "list", "--name").Output(); err == nil {
			for _, n := range strings.Fields(string(names)) {
				_ = exec.Command("virsh", "-c", p.URI, "destroy", n).Run()
			}
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		if c, err := net.DialTimeout("unix", sock, time.Second); err == nil {
			c.Close()
			return p
		}
		select {
		case err := <-exited:
			b, _ := os.ReadFile(filepath.Join(dir, "libvirtd.out"))
			t.Fatalf("private libvirtd in %s exited: %v\n%s", dir, err, b)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("private libvirtd in %s: socket %s does not answer after 60 s", dir, sock)
		}
	}
}

// RefuseMigrations makes the daemon's qemu hook refuse (true) or accept (false) incoming
// migrations.
func (p *PrivateLibvirtd) RefuseMigrations(t testing.TB, refuse bool) {
	t.Helper()
	f := filepath.Join(p.Dir, "refuse-migration")
	if !refuse {
		if err := os.Remove(f); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		return
	}
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}
