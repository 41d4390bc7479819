package domains_test

import (
	"errors"
	"strings"
	"testing"

	"libvirt.org/go/libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/vgpu-host/vgpu-host/domains"
	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/internal/testenv"
	"github.com/vgpu-host/vgpu-host/vgpu"
)

// twoCardInventory is testInventory plus a Turing card whose slot has four functions (GPU,
// HDMI audio, USB-C xHCI, UCSI), so two consumer GPUs with companions and the A100 exist.
func twoCardInventory() *host.Inventory {
	inv := testInventory()
	a := host.MustParseAddress
	inv.Devices = append(inv.Devices,
		host.Device{Address: a("0000:0b:00.0"), VendorID: "10de", DeviceID: "1e87", DeviceName: "TU104 [GeForce RTX 2080 Rev. A]", Class: "030000", IsGPU: true,
			Driver: "vfio-pci", IOMMUGroup: 13, NUMANode: 0, LocalCPUs: "0-15", Companions: []host.Address{a("0000:0b:00.1"), a("0000:0b:00.2"), a("0000:0b:00.3")}},
		host.Device{Address: a("0000:0b:00.1"), VendorID: "10de", DeviceID: "10f8", Class: "040300", Driver: "vfio-pci", IOMMUGroup: 13, NUMANode: 0},
		host.Device{Address: a("0000:0b:00.2"), VendorID: "10de", DeviceID: "1ad8", Class: "0c0330", Driver: "vfio-pci", IOMMUGroup: 13, NUMANode: 0},
		host.Device{Address: a("0000:0b:00.3"), VendorID: "10de", DeviceID: "1ad9", Class: "0c8000", Driver: "vfio-pci", IOMMUGroup: 13, NUMANode: 0},
	)
	return inv
}

func mustSpec(t testing.TB, body string) *domains.VM {
	t.Helper()
	vm, err := domains.Parse([]byte(minimal + body))
	if err != nil {
		t.Fatal(err)
	}
	if err := vm.Validate(); err != nil {
		t.Fatal(err)
	}
	return vm
}

const multiGPU = "  gpus:\n    - passthrough: {model: RTX, count: 2}\n    - passthrough: {address: \"17:00.0\"}\n"

type guestFn struct {
	host          string
	bus, slot, fn uint
	multifunction string
}

// TestMultiGPUTopology: on q35 every passed-through GPU gets a pcie-root-port of its own and
// its companions are functions of the same guest slot, GPU at function 0 with
// multifunction='on' (and only there); on pc each GPU gets a bus-0 slot the same way.
func TestMultiGPUTopology(t *testing.T) {
	for _, machine := range []string{"q35", "pc"} {
		body := multiGPU
		if machine == "pc" {
			body = "  machine: pc\n  firmware: bios\n" + body
		}
		vm := mustSpec(t, body)
		alloc, err := domains.Resolve(vm, twoCardInventory(), domains.ResolveOptions{VirtType: "kvm"})
		if err != nil {
			t.Fatal(err)
		}
		dom, err := domains.Build(vm, alloc, domains.BuildOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var got []guestFn
		for _, hd := range dom.Devices.Hostdevs {
			src, at := hd.SubsysPCI.Source.Address, hd.Address.PCI
			got = append(got, guestFn{
				host: host.Address{Domain: uint32(*src.Domain), Bus: uint8(*src.Bus), Device: uint8(*src.Slot), Function: uint8(*src.Function)}.String(),
				bus:  *at.Bus, slot: *at.Slot, fn: *at.Function, multifunction: at.MultiFunction,
			})
		}
		b1, b2, b3, s1, s2, s3 := uint(1), uint(2), uint(3), uint(0), uint(0), uint(0)
		if machine == "pc" {
			b1, b2, b3, s1, s2, s3 = 0, 0, 0, 0x10, 0x11, 0x12
		}
		want := []guestFn{
			{"0000:0a:00.0", b1, s1, 0, "on"}, {"0000:0a:00.1", b1, s1, 1, ""},
			{"0000:0b:00.0", b2, s2, 0, "on"}, {"0000:0b:00.1", b2, s2, 1, ""}, {"0000:0b:00.2", b2, s2, 2, ""}, {"0000:0b:00.3", b2, s2, 3, ""},
			{"0000:17:00.0", b3, s3, 0, ""},
		}
		if len(got) != len(want) {
			t.Fatalf("%s: %d hostdevs, want %d: %+v", machine, len(got), len(want), got)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("%s: hostdev %d = %+v, want %+v", machine, i, got[i], want[i])
			}
		}
		ports := 0
		for _, c := range dom.Devices.Controllers {
			if c.Model == "pcie-root-port" {
				ports++
				if *c.Index < 1 || *c.Index > 3 {
					t.Errorf("%s: root port index %d", machine, *c.Index)
				}
			}
		}
		if wantPorts := map[string]int{"q35": 3, "pc": 0}[machine]; ports != wantPorts {
			t.Errorf("%s: %d pcie-root-ports, want %d", machine, ports, wantPorts)
		}
		x, err := dom.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		defineValidate(t, machine, x)
	}
}

// defineValidate defines x on test:///default with DOMAIN_DEFINE_VALIDATE and undefines it.
func defineValidate(t *testing.T, name, x string) {
	t.Helper()
	conn, err := libvirt.NewConnect("test:///default")
	if err != nil {
		t.Fatalf("connect test:///default: %v", err)
	}
	defer conn.Close()
	dom, err := conn.DomainDefineXMLFlags(x, libvirt.DOMAIN_DEFINE_VALIDATE)
	if err != nil {
		t.Fatalf("%s: libvirt refused the domain: %v\n%s", name, err, x)
	}
	defer dom.Free()
	if err := dom.Undefine(); err != nil {
		t.Errorf("%s: undefine: %v", name, err)
	}
}

// TestMultiGPUTopologyNative: what QEMU gets for two consumer cards with companions and an
// A100 on q35, from a real libvirtd: each card on its own root port (pci.1, pci.2, pci.3),
// companions as functions of the card's slot.
func TestMultiGPUTopologyNative(t *testing.T) {
	uri := testenv.Libvirtd(t)
	conn, err := libvirt.NewConnect(uri)
	if err != nil {
		t.Fatalf("connect %s: %v", uri, err)
	}
	defer conn.Close()
	vm := mustSpec(t, multiGPU)
	alloc, err := domains.Resolve(vm, twoCardInventory(), domains.ResolveOptions{VirtType: "qemu"})
	if err != nil {
		t.Fatal(err)
	}
	x, err := domains.Render(vm, alloc, domains.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	argv, err := conn.DomainXMLToNative("qemu-argv", x, 0)
	if err != nil {
		t.Fatalf("domxml-to-native: %v", err)
	}
	for _, w := range []string{
		`"host":"0000:0a:00.0","id":"hostdev0","bus":"pci.1","multifunction":true,"addr":"0x0"`,
		`"host":"0000:0a:00.1","id":"hostdev1","bus":"pci.1","addr":"0x0.0x1"`,
		`"host":"0000:0b:00.0","id":"hostdev2","bus":"pci.2","multifunction":true,"addr":"0x0"`,
		`"host":"0000:0b:00.3","id":"hostdev5","bus":"pci.2","addr":"0x0.0x3"`,
		`"host":"0000:17:00.0","id":"hostdev6","bus":"pci.3","addr":"0x0"`,
		`"driver":"pcie-root-port","port":16,"chassis":1,"id":"pci.1"`,
	} {
		if !strings.Contains(argv, w) {
			t.Errorf("QEMU command line lacks %s:\n%s", w, argv)
		}
	}
}

// TestPassthroughAddressChecks: an address naming a VF brings no companions (the other
// functions of its slot are its PF and siblings), and an address naming a GPU's companion is
// refused with the GPU to name instead.
func TestPassthroughAddressChecks(t *testing.T) {
	t.Parallel()
	inv := testInventory()
	alloc, err := domains.Resolve(mustSpec(t, "  gpus:\n    - passthrough: {address: \"41:00.4\"}\n"), inv, domains.ResolveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if f := alloc.GPUs[0].Slots[0].Functions; len(f) != 1 || f[0] != host.MustParseAddress("0000:41:00.4") {
		t.Errorf("VF passthrough took %v, want only 0000:41:00.4 (never its PF)", f)
	}
	if k := alloc.GPUs[0].Kind; k != vgpu.SRIOVVF {
		t.Errorf("VF passthrough is kind %s, want %s", k, vgpu.SRIOVVF)
	}
	if c := alloc.Claims(); len(c) != 1 || c[0].ID != "0000:41:00.4" || c[0].Detail != "sriov-vf" {
		t.Errorf("VF claims %+v", c)
	}
	_, err = domains.Resolve(mustSpec(t, "  gpus:\n    - passthrough: {address: \"0a:00.1\"}\n"), inv, domains.ResolveOptions{})
	if !errors.Is(err, host.ErrInvalid) || !strings.Contains(err.Error(), "0000:0a:00.1 is not a GPU") || !strings.Contains(err.Error(), "GPU 0000:0a:00.0") {
		t.Errorf("companion by address: %v", err)
	}
	// An address another entry's companions already took is busy, in either order.
	_, err = domains.Resolve(mustSpec(t, "  gpus:\n    - passthrough: {model: \"RTX 3090\"}\n    - passthrough: {address: \"0a:00.1\"}\n"), inv, domains.ResolveOptions{})
	if !errors.Is(err, host.ErrBusy) || !strings.Contains(err.Error(), "spec.gpus[1]") {
		t.Errorf("companion taken twice: %v", err)
	}
}

// TestMdevUUIDOfAnotherType: a UUID that exists on the host as another type is busy, not
// something to create again.
func TestMdevUUIDOfAnotherType(t *testing.T) {
	t.Parallel()
	inv := testInventory()
	u := "6f0b6b0e-0a4e-4b8e-9d1a-1f2e3d4c5b6a"
	inv.MdevParents[0].Types[1].Instances = []string{u}
	_, err := domains.Resolve(mustSpec(t, "  gpus:\n    - vgpu: {profile: nvidia-222, uuids: [\""+u+"\"]}\n"), inv, domains.ResolveOptions{})
	if !errors.Is(err, host.ErrBusy) || !strings.Contains(err.Error(), "as type nvidia-223") {
		t.Errorf("uuid of another type: %v", err)
	}
}

// TestVGPUDisplayOptions: display alone gets ramfb too; ramfb: false keeps display only; the
// result is accepted by libvirt's schema.
func TestVGPUDisplayOptions(t *testing.T) {
	for _, c := range []struct {
		body           string
		display, ramfb string
	}{
		{"{profile: nvidia-222, display: true}", "on", "on"},
		{"{profile: nvidia-222, display: true, ramfb: false}", "on", ""},
		{"{profile: nvidia-222}", "", ""},
	} {
		vm := mustSpec(t, "  gpus:\n    - vgpu: "+c.body+"\n")
		alloc, err := domains.Resolve(vm, nil, domains.ResolveOptions{Offline: true})
		if err != nil {
			t.Fatal(err)
		}
		dom, err := domains.Build(vm, alloc, domains.BuildOptions{})
		if err != nil {
			t.Fatal(err)
		}
		md := dom.Devices.Hostdevs[0].SubsysMDev
		if md.Display != c.display || md.RamFB != c.ramfb {
			t.Errorf("%s: display=%q ramfb=%q, want %q %q", c.body, md.Display, md.RamFB, c.display, c.ramfb)
		}
		x, _ := dom.Marshal()
		defineValidate(t, c.body, x)
	}
}

// TestMACCanonical: MAC spellings net.ParseMAC accepts become the colon form libvirt parses.
func TestMACCanonical(t *testing.T) {
	for _, mac := range []string{"52-54-00-AA-BB-CC", "5254.00aa.bbcc", "52:54:00:AA:bb:cc"} {
		vm := mustSpec(t, "  network: {mac: \""+mac+"\"}\n")
		alloc, err := domains.Resolve(vm, nil, domains.ResolveOptions{Offline: true})
		if err != nil {
			t.Fatal(err)
		}
		dom, err := domains.Build(vm, alloc, domains.BuildOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := dom.Devices.Interfaces[0].MAC.Address; got != "52:54:00:aa:bb:cc" {
			t.Errorf("mac %s rendered as %s", mac, got)
		}
		x, _ := dom.Marshal()
		defineValidate(t, mac, x)
	}
}

// TestIDEDiskNames: on machine pc, SATA disks become IDE (hda, hdb), and libvirt takes them.
func TestIDEDiskNames(t *testing.T) {
	vm := mustSpec(t, "  machine: pc\n  firmware: bios\n  disks:\n    - {path: /var/lib/a.raw, bus: sata}\n  cloudInit: {metaData: \"instance-id: x\"}\n")
	alloc, err := domains.Resolve(vm, nil, domains.ResolveOptions{Offline: true})
	if err != nil {
		t.Fatal(err)
	}
	dom, err := domains.Build(vm, alloc, domains.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got []libvirtxml.DomainDiskTarget
	for _, d := range dom.Devices.Disks {
		got = append(got, *d.Target)
	}
	if len(got) != 2 || got[0] != (libvirtxml.DomainDiskTarget{Dev: "hda", Bus: "ide"}) || got[1] != (libvirtxml.DomainDiskTarget{Dev: "hdb", Bus: "ide"}) {
		t.Errorf("targets %+v, want hda and hdb on ide", got)
	}
	x, _ := dom.Marshal()
	defineValidate(t, "ide", x)
}
