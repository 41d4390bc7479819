package host

import (
	"os"
	"path/filepath"
	"testing"
)

// TestUSBDevices reads a tree laid out as the kernel's USB sysfs ABI documents it: a root hub
// (usb1), a device behind a hub port (1-2.3) and its interface (1-2.3:1.0), which is skipped.
func TestUSBDevices(t *testing.T) {
	t.Parallel()
	root, err := NewRoot(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if got, err := USBDevices(root); err != nil || got != nil {
		t.Fatalf("no USB: %v %v", got, err)
	}
	write := func(dev string, attrs map[string]string) {
		d := root.Sys("bus", "usb", "devices", dev)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for k, v := range attrs {
			if err := os.WriteFile(filepath.Join(d, k), []byte(v+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	write("usb1", map[string]string{"busnum": "1", "devnum": "1", "idVendor": "1d6b", "idProduct": "0002", "product": "xHCI Host Controller"})
	write("1-2.3", map[string]string{"busnum": "1", "devnum": "4", "idVendor": "046d", "idProduct": "c52b", "product": "USB Receiver"})
	write("1-2.3:1.0", map[string]string{"bInterfaceClass": "03"})
	got, err := USBDevices(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[1] != (USBDevice{Bus: 1, Device: 4, Vendor: "046d", Product: "c52b", Name: "USB Receiver", Port: "1-2.3"}) || got[0].Device != 1 {
		t.Fatalf("got %+v", got)
	}
}
