package domains_test

import (
	"os"
	"strings"
	"testing"

	"libvirt.org/go/libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/vgpu-host/vgpu-host/domains"
	"github.com/vgpu-host/vgpu-host/internal/testenv"
	"github.com/vgpu-host/vgpu-host/vgpu"
)

// TestDomXMLToNative asks a real libvirtd (qemu driver) for the QEMU command line of the
// passthrough, mdev and virgl examples and checks the devices QEMU would get. No GPU, VFIO or
// DRM render node exists on the test machine; this works because:
//   - PCI hostdevs name their backend (<driver name='vfio'/>), so libvirt does not probe /dev/vfio;
//   - the virgl example names its render node (egl-headless rendernode=...), so libvirt does not
//     look for /dev/dri/renderD*;
//   - the domains use type qemu (TCG) so the test does not depend on /dev/kvm.
//
// Hugepages need a mounted hugetlbfs, which libvirt detects when it starts; where there is none
// the test drops <memoryBacking> and says so.
func TestDomXMLToNative(t *testing.T) {
	uri := testenv.Libvirtd(t)
	conn, err := libvirt.NewConnect(uri)
	if err != nil {
		t.Fatalf("connect %s: %v", uri, err)
	}
	defer conn.Close()
	hugetlbfs := false
	if b, err := os.ReadFile("/proc/mounts"); err == nil {
		hugetlbfs = strings.Contains(string(b), " hugetlbfs ")
	}

	cases := []struct {
		file string
		inv  bool // resolve against testInventory instead of offline
		want []string
	}{
		{"passthrough.yaml", true, []string{`"host":"0000:17:00.0"`, "q35-pcihost.pci-hole64-size=268435456K", "phys-bits=41"}},
		{"virtio-gpu-fallback.yaml", true, []string{`"host":"0000:0a:00.0"`, `"host":"0000:0a:00.1"`, `"multifunction":true`}},
		{"passthrough.yaml", false, []string{`"driver":"vfio-pci","host":"0000:17:00.0"`, `"rombar":0`, "-machine pc-q35"}},
		{"vgpu-desktop.yaml", false, []string{`"sysfsdev":"/sys/bus/mdev/devices/` + vgpu.InstanceUUID("desk-01", 0) + `"`, `"display":"on"`, `"ramfb":true`}},
		{"vendor-vfio.yaml", false, []string{`"driver":"vfio-pci","host":"0000:41:00.4"`}},
		{"virgl-workstation.yaml", false, []string{`"driver":"virtio-vga-gl"`, "egl-headless,rendernode=/dev/dri/renderD128"}},
		{"virtio-gpu-fallback.yaml", false, []string{`"driver":"virtio-vga"`}},
		{"windows11-gaming.yaml", false, []string{`"driver":"tpm-crb"`, `"driver":"ivshmem-plain"`, `"mem-path":"/dev/shm/looking-glass","size":33554432`, `"grab_all":true,"grab-toggle":"ctrl-ctrl"`, `"driver":"ich9-intel-hda"`, "-rtc base=localtime", "OVMF_CODE_4M.ms.fd", "smm=on"}},
		{"workstation-installer.yaml", false, []string{`"bootindex":1`, `"driver":"ide-cd"`, "netinst.iso"}},
	}
	for _, c := range cases {
		vm, err := domains.Load("../examples/" + c.file)
		if err != nil {
			t.Fatal(err)
		}
		inv := testInventory()
		alloc, err := domains.Resolve(vm, inv, domains.ResolveOptions{Offline: !c.inv, VirtType: "qemu"})
		if err != nil {
			t.Fatal(err)
		}
		dom, err := domains.Build(vm, alloc, domains.BuildOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if dom.MemoryBacking != nil && !hugetlbfs {
			t.Logf("%s: no hugetlbfs mounted on this machine, dropping <memoryBacking> (libvirt: hugetlbfs filesystem is not mounted)", c.file)
			dom.MemoryBacking = nil
		}
		if c.inv && dom.NUMATune != nil {
			t.Logf("%s: testInventory's NUMA node %s is not on this machine, dropping the placement", c.file, dom.NUMATune.Memory.Nodeset)
			dom.NUMATune, dom.VCPU.CPUSet = nil, ""
		}
		xml, err := dom.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		argv, err := conn.DomainXMLToNative("qemu-argv", xml, 0)
		if err != nil {
			t.Errorf("%s: domxml-to-native: %v", c.file, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(argv, w) {
				t.Errorf("%s: QEMU command line lacks %s:\n%s", c.file, w, argv)
			}
		}
	}
}

// TestLibvirtRefusesOVMFFWCfg records why the builder sizes the MMIO window with pcihole64 and
// maxphysaddr instead of <sysinfo type='fwcfg'> opt/ovmf/X-PciMmio64Mb: libvirt's qemu driver
// reserves every opt/ovmf/ name. If a libvirt upgrade lifts that, this test says so.
func TestLibvirtRefusesOVMFFWCfg(t *testing.T) {
	uri := testenv.Libvirtd(t)
	conn, err := libvirt.NewConnect(uri)
	if err != nil {
		t.Fatalf("connect %s: %v", uri, err)
	}
	defer conn.Close()
	vm, err := domains.Load("../examples/virtio-gpu-fallback.yaml")
	if err != nil {
		t.Fatal(err)
	}
	alloc, err := domains.Resolve(vm, nil, domains.ResolveOptions{Offline: true, VirtType: "qemu"})
	if err != nil {
		t.Fatal(err)
	}
	dom, err := domains.Build(vm, alloc, domains.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dom.SysInfo = append(dom.SysInfo, libvirtxml.DomainSysInfo{FWCfg: &libvirtxml.DomainSysInfoFWCfg{
		Entry: []libvirtxml.DomainSysInfoEntry{{Name: "opt/ovmf/X-PciMmio64Mb", Value: "262144"}},
	}})
	xml, err := dom.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	_, err = conn.DomainXMLToNative("qemu-argv", xml, 0)
	if err == nil || !strings.Contains(err.Error(), "reserved") {
		t.Fatalf("libvirt accepted fw_cfg opt/ovmf/X-PciMmio64Mb (err=%v): the builder could use it now", err)
	}
}

// TestUSBHostdevDefines: the real libvirtd defines (with schema validation) a domain with host
// USB devices by ids and by bus/device, and an SR-IOV NIC VF as an interface, as the builder
// renders them. Starting it needs the
// devices: this machine has no USB bus at all (no /sys/bus/usb), which libvirt reports at start.
func TestUSBHostdevDefines(t *testing.T) {
	uri := testenv.Libvirtd(t)
	conn, err := libvirt.NewConnect(uri)
	if err != nil {
		t.Fatalf("connect %s: %v", uri, err)
	}
	defer conn.Close()
	vm, err := domains.Parse([]byte(strings.Replace(minimal, "name: vm1", "name: vgpuhost-test-usb", 1) +
		"  devices:\n    usbController: qemu-xhci\n    usb:\n      - {vendor: \"046d\", product: c52b}\n      - {bus: 1, device: 4}\n" +
		"    nics:\n      - {type: hostdev, vf: \"0000:3b:02.1\", mac: \"52:54:00:aa:bb:03\"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := vm.Validate(); err != nil {
		t.Fatal(err)
	}
	alloc, err := domains.Resolve(vm, nil, domains.ResolveOptions{Offline: true, VirtType: "qemu"})
	if err != nil {
		t.Fatal(err)
	}
	x, err := domains.Render(vm, alloc, domains.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dom, err := conn.DomainDefineXMLFlags(x, libvirt.DOMAIN_DEFINE_VALIDATE)
	if err != nil {
		t.Fatalf("libvirtd refuses the domain: %v\n%s", err, x)
	}
	defer func() { _ = dom.Undefine(); dom.Free() }()
	back, err := dom.GetXMLDesc(0)
	if err != nil {
		t.Fatal(err)
	}
	var d libvirtxml.Domain
	if err := d.Unmarshal(back); err != nil {
		t.Fatal(err)
	}
	var ids, addrs int
	for _, h := range d.Devices.Hostdevs {
		if u := h.SubsysUSB; u != nil && u.Source != nil {
			if u.Source.Vendor != nil && u.Source.Vendor.ID == "0x046d" && u.Source.Product != nil && u.Source.Product.ID == "0xc52b" {
				ids++
			}
			if a := u.Source.Address; a != nil && a.Bus != nil && *a.Bus == 1 && a.Device != nil && *a.Device == 4 {
				addrs++
			}
		}
	}
	if ids != 1 || addrs != 1 {
		t.Fatalf("libvirt kept %d id and %d address USB hostdevs, want 1 and 1:\n%s", ids, addrs, back)
	}
	vfs := 0
	for _, i := range d.Devices.Interfaces {
		if src := i.Source; src != nil && src.Hostdev != nil && src.Hostdev.PCI != nil && src.Hostdev.PCI.Address != nil &&
			*src.Hostdev.PCI.Address.Bus == 0x3b && i.Managed != "yes" && i.MAC != nil && i.MAC.Address == "52:54:00:aa:bb:03" {
			vfs++
		}
	}
	if vfs != 1 {
		t.Fatalf("libvirt did not keep the SR-IOV NIC VF interface (unmanaged, its MAC; libvirt writes managed only when yes):\n%s", back)
	}
}
