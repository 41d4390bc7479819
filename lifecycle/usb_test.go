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

// TestUSBDevicePlan: a USB device that is not plugged in fails plan, naming it; once the host
// has it (by ids, and by bus/device number), the domain gets its hostdev, vendor before
// product as libvirt's schema wants.
func TestUSBDevicePlan(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	vm := spec(t, "vgpuhost-test-usb", "")
	vm.Spec.Devices.USB = []domains.USBDevice{{Vendor: "046d", Product: "c52b"}, {Bus: 1, Device: 4}}
	if err := vm.Validate(); err != nil {
		t.Fatal(err)
	}
	_, err := e.lc().Plan(ctx, []*domains.VM{vm})
	if !errors.Is(err, host.ErrNotFound) || !strings.Contains(err.Error(), "spec.devices.usb[0]: no USB device 046d:c52b on this host (0 USB devices") {
		t.Fatalf("plan without the device: %v", err)
	}
	d := e.root.Sys("bus", "usb", "devices", "1-2")
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"busnum": "1", "devnum": "4", "idVendor": "046d", "idProduct": "c52b"} {
		if err := os.WriteFile(filepath.Join(d, k), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	plans, err := e.lc().Plan(ctx, []*domains.VM{vm})
	if err != nil {
		t.Fatal(err)
	}
	x := plans[0].XML
	v, p := strings.Index(x, `<vendor id="0x046d">`), strings.Index(x, `<product id="0xc52b">`)
	if v < 0 || p < v || !strings.Contains(x, `<address bus="1" device="4">`) {
		t.Fatalf("domain XML lacks the USB hostdevs (vendor first):\n%s", x)
	}
}
