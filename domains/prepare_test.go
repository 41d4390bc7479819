package domains_test

import (
	"errors"
	"strings"
	"testing"

	"libvirt.org/go/libvirtxml"

	"github.com/vgpu-host/vgpu-host/domains"
	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/vgpu"
)

// TestPrepare checks that Prepare gives what plan and apply took from five calls before:
// the allocation with its claims and host steps, the customized domain and its XML (that of
// Build then Marshal), the disk files listed once, and the MMIO prediction.
func TestPrepare(t *testing.T) {
	t.Parallel()
	vm, err := domains.Parse([]byte(minimal + "  disks:\n    - {image: /srv/base.qcow2, size: 10GiB}\n" +
		"  cloudInit: {userData: \"#cloud-config\\n\"}\n  gpus:\n    - passthrough: {address: \"0000:17:00.0\"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	customized := false
	p, err := domains.Prepare(vm, testInventory(), domains.PrepareOptions{
		Resolve:   domains.ResolveOptions{VirtType: "kvm", ImagesDir: "/pool"},
		Build:     domains.BuildOptions{ImagesDir: "/pool"},
		Customize: func(d *libvirtxml.Domain) error { customized = true; d.Description = "customized"; return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	if !customized || !strings.Contains(p.XML, "<description>customized</description>") {
		t.Errorf("the XML is not of the customized domain:\n%s", p.XML)
	}
	if len(p.Claims) != 1 || p.Claims[0] != (vgpu.Claim{Kind: vgpu.ClaimPCI, ID: "0000:17:00.0", Detail: "passthrough"}) {
		t.Errorf("claims = %+v", p.Claims)
	}
	if len(p.HostSteps) == 0 {
		t.Errorf("no host steps for a passthrough GPU on vfio-pci")
	}
	if p.MMIO == nil || p.MMIO.NeedBytes < 128<<30 {
		t.Errorf("MMIO prediction = %+v, want the A100's 128 GiB BAR", p.MMIO)
	}
	disks, seed := p.Alloc.Storage(vm, domains.BuildOptions{ImagesDir: "/pool"})
	if len(disks) != 1 || disks[0].Path != "/pool/vm1-disk0.qcow2" || seed != "/pool/vm1-cidata.iso" {
		t.Errorf("storage = %+v, %q", disks, seed)
	}
	if len(p.Alloc.Disks) != 1 || p.Alloc.SeedISO != seed {
		t.Errorf("the allocation does not carry the files: %+v %q", p.Alloc.Disks, p.Alloc.SeedISO)
	}
	if d, s := p.Alloc.Storage(vm, domains.BuildOptions{ImagesDir: "/other"}); d[0].Path != "/other/vm1-disk0.qcow2" || s != "/other/vm1-cidata.iso" {
		t.Errorf("storage for another directory = %+v, %q: want it computed for that directory", d, s)
	}
}

// TestResolveHeld checks that a selector failing only because of devices in use is a
// *HeldError (the spec resolves when nothing is in use), and one failing anyway is not.
func TestResolveHeld(t *testing.T) {
	t.Parallel()
	vm, err := domains.Parse([]byte(minimal + "  gpus:\n    - passthrough: {model: A100}\n"))
	if err != nil {
		t.Fatal(err)
	}
	inv := testInventory()
	_, err = domains.Resolve(vm, inv, domains.ResolveOptions{InUse: []host.Address{host.MustParseAddress("0000:17:00.0")}})
	var held *domains.HeldError
	if !errors.As(err, &held) || !errors.Is(err, host.ErrNotFound) {
		t.Fatalf("resolve with the only A100 in use: %v, want a HeldError wrapping host.ErrNotFound", err)
	}
	vm, err = domains.Parse([]byte(minimal + "  gpus:\n    - passthrough: {model: H100}\n"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = domains.Resolve(vm, inv, domains.ResolveOptions{InUse: []host.Address{host.MustParseAddress("0000:17:00.0")}})
	if errors.As(err, &held) || !errors.Is(err, host.ErrNotFound) {
		t.Fatalf("resolve of a model the host lacks: %v, want host.ErrNotFound and no HeldError", err)
	}
	// An address the host lacks: not found, with how to find the right one.
	vm, err = domains.Parse([]byte(minimal + "  gpus:\n    - passthrough: {address: \"0000:99:00.0\"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = domains.Resolve(vm, inv, domains.ResolveOptions{})
	if !errors.Is(err, host.ErrNotFound) || !strings.Contains(err.Error(), "no PCI device 0000:99:00.0 on the host (check the address with lspci -D; vgpu-host inspect lists its GPUs)") {
		t.Fatalf("resolve of an address the host lacks: %v", err)
	}
}

// TestTakesDevices checks which specs may claim devices: GPUs but virtio-gpu, and NIC VFs.
func TestTakesDevices(t *testing.T) {
	t.Parallel()
	for yaml, want := range map[string]bool{
		"": false,
		"  gpus:\n    - virtioGpu: {virgl: true}\n":                              false,
		"  gpus:\n    - passthrough: {model: A100}\n":                            true,
		"  devices:\n    nics:\n      - {type: hostdev, vf: \"0000:3b:02.1\"}\n": true,
		"  devices:\n    nics:\n      - {type: network, network: default}\n":     false,
	} {
		vm, err := domains.Parse([]byte(minimal + yaml))
		if err != nil {
			t.Fatalf("%q: %v", yaml, err)
		}
		if got := vm.TakesDevices(nil); got != want {
			t.Errorf("%q: TakesDevices = %v, want %v", yaml, got, want)
		}
		// A host without GPUs or mdev parents has nothing for a gpus[] entry to take: only a
		// NIC VF still takes a device there.
		wantBare := strings.Contains(yaml, "hostdev")
		if got := vm.TakesDevices(&host.Inventory{}); got != wantBare {
			t.Errorf("%q on a host without GPUs: TakesDevices = %v, want %v", yaml, got, wantBare)
		}
	}
}
