package domains

import (
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
)

func TestPCIHostdevSourceAddress(t *testing.T) {
	t.Parallel()
	h := PCIHostdev(host.MustParseAddress("0000:41:00.1"), false)
	l := h.SubsysPCI.Source.Address
	if *l.Bus != 0x41 || *l.Function != 1 || *l.Slot != 0 || *l.Domain != 0 || h.Managed != "no" {
		t.Fatalf("libvirt address = %+v, managed %q", l, h.Managed)
	}
}
