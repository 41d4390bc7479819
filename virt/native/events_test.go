package native

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/internal/testenv"
	"github.com/vgpu-host/vgpu-host/virt"
	"github.com/vgpu-host/vgpu-host/virt/remote"
)

// TestDomainEvents: against the real libvirtd, `virsh define` and `virsh undefine` of a domain
// by another client arrive as "defined" and "undefined" lifecycle events, both on the adapter
// itself and through the helper's pipe protocol (remote.Client's long poll of the same adapter
// served in-process, as vgpu-host-libvirt serves it); ending the context closes the stream.
func TestDomainEvents(t *testing.T) {
	uri := testenv.Libvirtd(t)
	for _, via := range []string{"native", "helper-protocol"} {
		t.Run(via, func(t *testing.T) {
			var src virt.EventSource
			c, err := Open(uri)
			if err != nil {
				t.Fatal(err)
			}
			src = c
			if via == "helper-protocol" {
				a, b := net.Pipe()
				done := make(chan error, 1)
				go func() { done <- remote.Serve(func(string) (virt.Conn, error) { return c, nil }, b) }()
				rc, err := remote.Dial(uri, a)
				if err != nil {
					t.Fatal(err)
				}
				defer func() { rc.Close(); <-done }()
				src = rc
			} else {
				defer c.Close()
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ch, err := src.DomainEvents(ctx)
			if err != nil {
				t.Fatal(err)
			}
			name := "vgpuhost-test-events"
			x := filepath.Join(t.TempDir(), "d.xml")
			os.WriteFile(x, []byte(`<domain type='qemu'><name>`+name+`</name><memory unit='MiB'>64</memory><vcpu>1</vcpu><os><type arch='x86_64'>hvm</type></os></domain>`), 0o644)
			t.Cleanup(func() { _ = exec.Command("virsh", "-c", uri, "undefine", name).Run() })
			for _, cmd := range [][]string{{"define", x}, {"undefine", name}} {
				if out, err := exec.Command("virsh", append([]string{"-c", uri}, cmd...)...).CombinedOutput(); err != nil {
					t.Fatalf("virsh %v: %v\n%s", cmd, err, out)
				}
			}
			var got []string
			timeout := time.After(5 * time.Second)
			for len(got) < 2 {
				select {
				case e := <-ch:
					if e.Domain == name {
						got = append(got, e.Event)
					}
				case <-timeout:
					t.Fatalf("events for %s after 5 s: %v, want defined and undefined", name, got)
				}
			}
			if got[0] != "defined" || got[1] != "undefined" {
				t.Fatalf("events %v, want [defined undefined]", got)
			}
			cancel()
			for range ch { // closes once the subscription ends
			}
		})
	}
}
