package remote

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/virt"
)

const domXML = `<domain type='qemu'><name>vgpuhost-test-remote</name><memory unit='MiB'>64</memory><os><type arch='x86_64'>hvm</type></os></domain>`

// dialFake connects a Client to a Server backed by f over an in-process pipe.
func dialFake(t *testing.T, f *virt.Fake) *Client {
	t.Helper()
	a, b := net.Pipe()
	done := make(chan error, 1)
	go func() { done <- Serve(func(string) (virt.Conn, error) { return f, nil }, b) }()
	c, err := Dial("test:///fake", a)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		<-done
	})
	return c
}

func TestClientForwardsEveryCall(t *testing.T) {
	f := virt.NewFake("kvm", "qemu")
	c := dialFake(t, f)
	ctx := context.Background()
	types, err := c.VirtTypes(ctx)
	if err != nil || strings.Join(types, ",") != "kvm,qemu" {
		t.Fatalf("VirtTypes = %v, %v", types, err)
	}
	name, err := c.Define(ctx, domXML)
	if err != nil || name != "vgpuhost-test-remote" {
		t.Fatalf("Define = %q, %v", name, err)
	}
	if err := c.Start(ctx, name); err != nil {
		t.Fatal(err)
	}
	if st, err := c.State(ctx, name); err != nil || st != virt.StateRunning {
		t.Fatalf("State = %q, %v", st, err)
	}
	xmls, err := c.ListDomainXMLs(ctx)
	if err != nil || !strings.Contains(xmls[name], "<name>vgpuhost-test-remote</name>") {
		t.Fatalf("ListDomainXMLs = %v, %v", xmls, err)
	}
	if err := c.EnsureDirPool(ctx, "p", t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if err := c.UploadVolume(ctx, "p", "seed.iso", []byte("cidata")); err != nil {
		t.Fatal(err)
	}
	if got := f.Volume("p", "seed.iso"); got == nil || string(got.Data) != "cidata" {
		t.Fatalf("uploaded volume = %+v", got)
	}
	if err := c.CreateVolume(ctx, "p", virt.Volume{Name: "root.qcow2", Format: "qcow2", Capacity: 1 << 30, BackingPath: "/b.qcow2", BackingFormat: "qcow2"}); err != nil {
		t.Fatal(err)
	}
	if got := f.Volume("p", "root.qcow2"); got == nil || got.BackingPath != "/b.qcow2" || got.Capacity != 1<<30 {
		t.Fatalf("created volume = %+v", got)
	}
	if err := c.DeleteVolume(ctx, "p", "root.qcow2"); err != nil {
		t.Fatal(err)
	}
	if err := c.Destroy(ctx, name); err != nil {
		t.Fatal(err)
	}
	if err := c.Undefine(ctx, name); err != nil {
		t.Fatal(err)
	}
}

// Sentinels survive the pipe, so callers' errors.Is checks work through the helper.
func TestErrorsKeepTheirSentinels(t *testing.T) {
	f := virt.NewFake()
	c := dialFake(t, f)
	ctx := context.Background()
	_, err := c.State(ctx, "missing")
	if !errors.Is(err, virt.ErrNoDomain) || !virt.IsNotFound(err) || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("State(missing) = %v, want ErrNoDomain naming the domain", err)
	}
	if err := c.DeleteVolume(ctx, "nopool", "x"); !virt.IsNotFound(err) {
		t.Fatalf("DeleteVolume in a missing pool = %v", err)
	}
	if err := c.EnsureDirPool(ctx, "p", t.TempDir()); err != nil {
		t.Fatal(err)
	}
	v := virt.Volume{Name: "a.qcow2", Format: "qcow2", Capacity: 1 << 20}
	if err := c.CreateVolume(ctx, "p", v); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateVolume(ctx, "p", v); !errors.Is(err, virt.ErrVolumeExists) {
		t.Fatalf("second CreateVolume = %v, want ErrVolumeExists", err)
	}
	boom := errors.New("boom: libvirt said no")
	f.Fail("Start", boom)
	err = c.Start(ctx, "x")
	if err == nil || !strings.Contains(err.Error(), boom.Error()) || virt.IsNotFound(err) {
		t.Fatalf("Start = %v, want the server's message and no sentinel", err)
	}
}

func TestHelperPath(t *testing.T) {
	t.Setenv(EnvHelper, filepath.Join(t.TempDir(), "nope"))
	if _, err := HelperPath(); !errors.Is(err, ErrNoHelper) || !errors.Is(err, host.ErrUnsupported) {
		t.Fatalf("missing helper: %v", err)
	}
	if _, err := Open("test:///default"); !errors.Is(err, host.ErrUnsupported) {
		t.Fatalf("Open without a helper: %v", err)
	}
}

// TestHelperProcess builds the real helper and drives libvirt's in-process test driver through
// it: the path vgpu-host takes, without a daemon.
func TestHelperProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the helper")
	}
	bin := filepath.Join(t.TempDir(), HelperName)
	out, err := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin, "../../cmd/vgpu-host-libvirt").CombinedOutput()
	if err != nil {
		t.Fatalf("build helper: %v\n%s", err, out)
	}
	t.Setenv(EnvHelper, bin)
	c, err := Open("test:///default")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	name, err := c.Define(ctx, domXML)
	if err != nil || name != "vgpuhost-test-remote" {
		t.Fatalf("Define through the helper = %q, %v", name, err)
	}
	if _, err := c.State(ctx, "vgpuhost-test-absent"); !errors.Is(err, virt.ErrNoDomain) {
		t.Fatalf("State(absent) through the helper = %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// The helper refuses to be run by hand.
	cmd := exec.Command(bin)
	cmd.Stdin = os.Stdin
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "vgpu-host runs it") {
		t.Fatalf("helper without --serve: %v %s", err, out)
	}
}
