package remote

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/internal/testenv"
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

// DialAsync returns before the server has opened libvirt; calls made meanwhile wait for the
// open and then run, and a long-lived open reaches the backend's PrepareDefine while it opens.
func TestDialAsyncWaitsForTheOpen(t *testing.T) {
	f := virt.NewFake("qemu")
	release := make(chan struct{})
	prepared := make(chan struct{})
	a, b := net.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- ServeBackend(Backend{
			Open:          func(string) (virt.Conn, error) { <-release; return f, nil },
			PrepareDefine: func() { close(prepared) },
		}, b)
	}()
	c := DialAsync("test:///fake", a, OpenOptions{LongLived: true})
	defer func() { c.Close(); <-done }()
	// The hint arrives with the Open, before the open has finished.
	select {
	case <-prepared:
	case <-time.After(5 * time.Second):
		t.Fatal("PrepareDefine was not called while libvirt was opening")
	}
	got := make(chan error, 1)
	go func() { _, err := c.Define(context.Background(), domXML); got <- err }()
	select {
	case err := <-got:
		t.Fatalf("Define returned before the open finished: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Opened(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Opened with a cancelled context while opening = %v", err)
	}
	close(release)
	if err := <-got; err != nil {
		t.Fatalf("Define after the open: %v", err)
	}
	if _, err := c.State(context.Background(), "vgpuhost-test-remote"); err != nil {
		t.Fatalf("State after the open: %v", err)
	}
}

// A short-lived open prepares nothing; an open that fails is every call's error.
func TestDialAsyncOpenErrorIsEveryCallsError(t *testing.T) {
	a, b := net.Pipe()
	done := make(chan error, 1)
	prepared := false
	go func() {
		done <- ServeBackend(Backend{
			Open:          func(string) (virt.Conn, error) { return nil, errors.New("connect to libvirt at test:///fake: refused") },
			PrepareDefine: func() { prepared = true },
		}, b)
	}()
	c := DialAsync("test:///fake", a, OpenOptions{})
	for _, call := range []func() error{
		func() error { return c.Opened(context.Background()) },
		func() error { _, err := c.State(context.Background(), "x"); return err },
		func() error { _, err := c.Define(context.Background(), domXML); return err },
	} {
		if err := call(); err == nil || !strings.Contains(err.Error(), "refused") || virt.IsNotFound(err) {
			t.Fatalf("call after a failed open = %v, want the open's error", err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close after a failed open: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if prepared {
		t.Fatal("PrepareDefine ran for a short-lived connection")
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
	out, err := exec.Command(testenv.GoTool(), "build", "-o", bin, "../../cmd/vgpu-host-libvirt").CombinedOutput()
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
	// Start returns before the helper has connected. A domain the schema refuses is refused
	// either way: by the schema the helper compiles for a long-lived connection, by libvirt's
	// validation for a short-lived one.
	bad := strings.Replace(domXML, "<memory unit='MiB'>64</memory>", "<memory unit='MiB'>64</memory><vgpuhost-bogus/>", 1)
	for _, long := range []bool{true, false} {
		sc, err := Start("test:///default", OpenOptions{LongLived: long})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sc.Define(ctx, bad); err == nil || !strings.Contains(err.Error(), "vgpuhost-bogus") && !strings.Contains(err.Error(), "schema") {
			t.Fatalf("long-lived %v: Define of a domain the schema refuses = %v", long, err)
		}
		if name, err := sc.Define(ctx, domXML); err != nil || name != "vgpuhost-test-remote" {
			t.Fatalf("long-lived %v: Define after Start = %q, %v", long, name, err)
		}
		if err := sc.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	// A libvirt that cannot be reached is the first call's error, and Close still ends the
	// helper.
	fc, err := Start("qemu+unix:///system?socket=/nonexistent/vgpuhost-test.sock", OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fc.State(ctx, "x"); err == nil || virt.IsNotFound(err) {
		t.Fatalf("State on an unreachable libvirt = %v", err)
	}
	if err := fc.Close(); err != nil {
		t.Fatalf("Close after a failed open: %v", err)
	}
	// The helper refuses to be run by hand.
	cmd := exec.Command(bin)
	cmd.Stdin = os.Stdin
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "vgpu-host runs it") {
		t.Fatalf("helper without --serve: %v %s", err, out)
	}
}
