package virt

import (
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
)

// TestDomainHostdevs reads a live domain's hostdevs one by one: aliases, the type, a PCI
// source with and without its full address, an mdev UUID in lower case; other hostdevs (USB)
// are not GPU holders and are left out.
func TestDomainHostdevs(t *testing.T) {
	t.Parallel()
	const x = `<domain type='qemu'><name>v</name><devices>
  <hostdev mode='subsystem' type='pci' managed='no'><source><address domain='0x0000' bus='0x41' slot='0x00' function='0x4'/></source><alias name='hostdev0'/></hostdev>
  <hostdev mode='subsystem' type='usb'><source><vendor id='0x046d'/><product id='0xc52b'/></source><alias name='hostdev1'/></hostdev>
  <hostdev mode='subsystem' type='mdev' model='vfio-pci'><source><address uuid='83C32DF7-D52E-4EC1-9668-1F3C7E4DF107'/></source><alias name='hostdev2'/></hostdev>
  <hostdev mode='subsystem' type='pci'><source><address bus='0x3b'/></source></hostdev>
</devices></domain>`
	hd, ok := DomainHostdevs(x)
	if !ok {
		t.Fatal("the XML did not parse")
	}
	vf := host.MustParseAddress("0000:41:00.4")
	partial := host.MustParseAddress("0000:3b:00.0")
	if len(hd.PCI) != 2 || hd.PCI[0] != vf || hd.PCI[1] != partial || len(hd.Mdevs) != 1 || hd.Mdevs[0] != "83c32df7-d52e-4ec1-9668-1f3c7e4df107" {
		t.Fatalf("PCI %v, mdevs %v", hd.PCI, hd.Mdevs)
	}
	if len(hd.Devices) != 3 {
		t.Fatalf("devices %+v: want the two PCI and the mdev hostdev", hd.Devices)
	}
	d0, d1, d2 := hd.Devices[0], hd.Devices[1], hd.Devices[2]
	if d0.Type != "pci" || d0.Alias != "hostdev0" || d0.PCI == nil || *d0.PCI != vf || !d0.PCIComplete {
		t.Errorf("first: %+v", d0)
	}
	if d1.Type != "mdev" || d1.Alias != "hostdev2" || d1.PCI != nil || d1.Mdev != hd.Mdevs[0] {
		t.Errorf("second: %+v", d1)
	}
	if d2.Type != "pci" || d2.Alias != "" || d2.PCIComplete {
		t.Errorf("third: %+v, want a PCI hostdev whose address is partial", d2)
	}
	if _, ok := DomainHostdevs("<domain"); ok {
		t.Error("a broken XML read as a domain")
	}
}
