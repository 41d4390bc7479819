package direct

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/vgpu-host/vgpu-host/internal/testenv"
	"github.com/vgpu-host/vgpu-host/virt"
	"github.com/vgpu-host/vgpu-host/virt/virttest"
)

// TestConformance runs the conformance test (every virt.Conn method, the same as the cgo
// adapter's) on this pure-Go client against the real libvirtd.
func TestConformance(t *testing.T) {
	uri := testenv.Libvirtd(t)
	if _, ok := Socket(uri); !ok {
		t.Fatalf("testenv's libvirtd URI %s is not one this package serves", uri)
	}
	c, err := Open(uri)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	virttest.Conformance(t, c, uri)
}

func TestSocket(t *testing.T) {
	for uri, want := range map[string]string{
		"qemu:///system":                            "system",
		"qemu+unix:///system":                       "system",
		"qemu:///system?socket=/run/x.sock":         "/run/x.sock",
		"qemu+unix:///system?socket=/tmp/a%20b":     "/tmp/a b",
		"qemu:///session":                           "",
		"qemu+ssh://root@h/system":                  "",
		"qemu://h/system":                           "",
		"qemu+tls://h/system":                       "",
		"test:///default":                           "",
		"vgpu-fake:///tmp/l.json":                   "",
		"qemu:///system?mode=direct":                "",
		"qemu:///system?socket=":                    "",
		"qemu:///system?socket=/a&socket=/b":        "",
		"qemu:///system?socket=/a&no_verify=1":      "",
		"":                                          "",
		"::":                                        "",
		"lxc:///system":                             "",
		"qemu:///embed?root=/tmp/x":                 "",
		"qemu:///system#frag":                       "",
		"qemu+unix://user@/system?socket=/run/x.sk": "",
	} {
		got, ok := Socket(uri)
		switch {
		case want == "" && ok:
			t.Errorf("Socket(%q) = %q, want libvirt's own client to serve it", uri, got)
		case want == "system" && (!ok || (got != modularSocket && got != legacySocket)):
			t.Errorf("Socket(%q) = %q, %v; want the system daemon's socket", uri, got, ok)
		case want != "" && want != "system" && (!ok || got != want):
			t.Errorf("Socket(%q) = %q, %v; want %q", uri, got, ok, want)
		}
	}
}

// TestOpenNoDaemon: a socket nobody listens on is a plain error naming the URI and the socket
// (the caller then asks libvirt's own client, whose message says why).
func TestOpenNoDaemon(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "none.sock")
	uri := "qemu+unix:///system?socket=" + sock
	_, err := Open(uri)
	if err == nil || !strings.Contains(err.Error(), uri) || !strings.Contains(err.Error(), sock) {
		t.Fatalf("Open with no daemon: %v", err)
	}
	if _, err := Open("test:///default"); err == nil {
		t.Fatal("Open(test:///default) succeeded: that URI is libvirt's client's")
	}
}

// TestLostConnection: when libvirtd goes away mid-call (here a proxy in front of the real
// socket is cut after the connection opened), the calls fail with virt.ErrConnection; none
// reads as success (go-libvirt answers waiting calls with an empty reply then).
func TestLostConnection(t *testing.T) {
	uri := testenv.Libvirtd(t)
	real, _ := Socket(uri)
	sock := filepath.Join(t.TempDir(), "proxy.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cut := make(chan struct{})
	go func() {
		a, err := ln.Accept()
		if err != nil {
			return
		}
		b, err := net.Dial("unix", real)
		if err != nil {
			a.Close()
			return
		}
		go func() { <-cut; a.Close(); b.Close() }()
		go pipe(a, b)
		pipe(b, a)
	}()
	c, err := Open("qemu:///system?socket=" + sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if _, err := c.State(ctx, "vgpuhost-test-no-such-domain"); !errors.Is(err, virt.ErrNoDomain) {
		t.Fatalf("State through the proxy: %v, want virt.ErrNoDomain", err)
	}
	close(cut)
	deadline := time.Now().Add(5 * time.Second)
	for !c.lost.Load() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	for call, f := range map[string]func() error{
		"Define":    func() error { _, err := c.Define(ctx, virttest.DomainXML); return err },
		"Destroy":   func() error { return c.Destroy(ctx, "vgpuhost-test-virt") },
		"VirtTypes": func() error { _, err := c.VirtTypes(ctx); return err },
		"List":      func() error { _, err := c.ListDomainXMLs(ctx); return err },
	} {
		if err := f(); !errors.Is(err, virt.ErrConnection) {
			t.Errorf("%s after libvirtd went away: %v, want virt.ErrConnection", call, err)
		}
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close of a lost connection: %v", err)
	}
}

func pipe(dst, src net.Conn) {
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			dst.Close()
			return
		}
	}
}

// TestCodesAreLibvirts: go-libvirt's error numbers reach the same sentinels as the cgo
// binding's (virt/native's test checks those against libvirt.org/go/libvirt).
func TestCodesAreLibvirts(t *testing.T) {
	c := &Conn{lost: new(atomic.Bool)}
	for code, want := range map[libvirt.ErrorNumber]error{
		libvirt.ErrNoDomain:        virt.ErrNoDomain,
		libvirt.ErrNoStoragePool:   virt.ErrNoPool,
		libvirt.ErrNoStorageVol:    virt.ErrNoVolume,
		libvirt.ErrStorageVolExist: virt.ErrVolumeExists,
		libvirt.ErrNoConnect:       virt.ErrConnection,
		libvirt.ErrInvalidConn:     virt.ErrConnection,
	} {
		if err := c.err(libvirt.Error{Code: uint32(code), Message: "m"}, "call"); !errors.Is(err, want) {
			t.Errorf("libvirt error %d: %v, want %v", code, err, want)
		}
	}
	if err := c.err(nil, "call"); err != nil {
		t.Errorf("no error: %v", err)
	}
	c.lost.Store(true)
	if err := c.err(nil, "call"); !errors.Is(err, virt.ErrConnection) {
		t.Errorf("an empty reply after the connection broke: %v, want virt.ErrConnection", err)
	}
	if err := c.err(libvirt.Error{Code: uint32(libvirt.ErrNoDomain), Message: "m"}, "call"); !errors.Is(err, virt.ErrNoDomain) {
		t.Errorf("libvirtd's own answer before the break: %v, want virt.ErrNoDomain", err)
	}
	for s, want := range map[libvirt.DomainState]virt.State{
		libvirt.DomainNostate: virt.StateOther, libvirt.DomainRunning: virt.StateRunning,
		libvirt.DomainBlocked: virt.StateRunning, libvirt.DomainPaused: virt.StatePaused,
		libvirt.DomainShutdown: virt.StateShutdown, libvirt.DomainShutoff: virt.StateShutoff,
		libvirt.DomainCrashed: virt.StateCrashed, libvirt.DomainPmsuspended: virt.StatePaused,
	} {
		if got := virt.StateOf(int(s)); got != want {
			t.Errorf("StateOf(%d) = %s, want %s", s, got, want)
		}
	}
}
