package native

import (
	"testing"

	"github.com/vgpu-host/vgpu-host/internal/testenv"
	"github.com/vgpu-host/vgpu-host/virt/virttest"
)

// TestLibvirtAdapter runs the conformance test (every virt.Conn method) on the cgo adapter
// against a real libvirtd.
func TestLibvirtAdapter(t *testing.T) {
	uri := testenv.Libvirtd(t)
	c, err := Open(uri)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	virttest.Conformance(t, c, uri)
}
