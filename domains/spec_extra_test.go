package domains_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/domains"
)

// TestNewKeysInvalid: every new key's bad value is an error naming its path (and line).
func TestNewKeysInvalid(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, yaml, want string }{
		{"os", "  os: windows10\n", "line 8: spec.os"},
		{"windows bios", "  os: windows11\n  firmware: bios\n", "spec.firmware: windows11 needs firmware uefi"},
		{"windows pc", "  os: windows11\n  machine: pc\n", "spec.machine: windows11 needs machine q35"},
		{"windows no tpm", "  os: windows11\n  tpm: false\n", "spec.tpm: windows11 needs a TPM 2.0"},
		{"virtioWin relative", "  virtioWin: virtio-win.iso\n", "spec.virtioWin"},
		{"boot unknown", "  boot: [floppy]\n", "line 8: spec.boot[0]"},
		{"boot twice", "  disks: [{path: /a.raw}]\n  boot: [disk, disk]\n", "spec.boot[1]: \"disk\" is listed twice"},
		{"boot cdrom without one", "  disks: [{path: /a.raw}]\n  boot: [cdrom, disk]\n", "spec.boot[0]: the VM has no cdrom"},
		{"blank without size", "  disks: [{blank: true}]\n", "spec.disks[0].size: required"},
		{"blank and path", "  disks: [{blank: true, size: 1GiB, path: /a.raw}]\n", "spec.disks[0]: give only one of"},
		{"blank cdrom", "  disks: [{blank: true, size: 1GiB, device: cdrom}]\n", "spec.disks[0].blank: a cdrom cannot be blank"},
		{"volume name", "  disks: [{volume: ../x}]\n", "spec.disks[0].volume"},
		{"volume size", "  disks: [{volume: win.qcow2, size: 1GiB}]\n", "spec.disks[0].size"},
		{"nvme", "  disks: [{path: /a.raw, bus: nvme}]\n", "spec.disks[0].bus: nvme: libvirt 9.0"},
		{"topology product", "  cpu:\n    topology: {cores: 3, threads: 2}\n", "spec.cpu.topology: sockets 1 x cores 3 x threads 2 = 6, but vcpus is 2"},
		{"topology float", "  cpu:\n    topology: {cores: 1.5}\n", "spec.cpu.topology.cores: 1.5 is not a whole number"},
		{"pin word", "  cpu:\n    pin: all\n", "spec.cpu.pin: \"all\""},
		{"pin count", "  cpu:\n    pin: [1]\n", "spec.cpu.pin: 1 host CPUs for 2 vcpus"},
		{"pin negative", "  cpu:\n    pin: [1, -2]\n", "spec.cpu.pin"},
		{"pin numa none", "  numa: none\n  cpu:\n    pin: auto\n", "spec.cpu.pin: auto pins to the GPU's NUMA node"},
		{"usb controller", "  devices:\n    usbController: uhci\n", "line 9: spec.devices.usbController"},
		{"usb none with graphics", "  devices:\n    usbController: none\n", "spec.devices.usbController: none leaves"},
		{"evdev path", "  devices:\n    evdev: [{path: kbd}]\n", "spec.devices.evdev[0].path"},
		{"evdev toggle", "  devices:\n    evdev: [{path: /dev/input/event0, grabToggle: ctrl-alt}]\n", "spec.devices.evdev[0].grabToggle"},
		{"looking glass", "  devices:\n    lookingGlass: {resolution: 1920*1080}\n", "spec.devices.lookingGlass.resolution"},
		{"nic type", "  devices:\n    nics: [{type: vde}]\n", "spec.devices.nics[0].type"},
		{"nic macvtap dev", "  devices:\n    nics: [{type: macvtap}]\n", "spec.devices.nics[0].dev"},
		{"nic bridge on network", "  devices:\n    nics: [{type: network, network: default, bridge: br0}]\n", "spec.devices.nics[0].bridge: only for type bridge"},
		{"nic mac", "  devices:\n    nics: [{type: network, network: default, mac: \"01:00:00:00:00:01\"}]\n", "spec.devices.nics[0].mac"},
		{"sound", "  devices:\n    sound: sb16\n", "spec.devices.sound"},
		{"userData ignored by cloud-init", "  cloudInit:\n    userData: \"packages: [jq]\\n\"\n", "line 9: spec.cloudInit.userData: starts with \"packages: [jq]\""},
		{"userData not YAML", "  cloudInit:\n    userData: \"#cloud-config\\n- jq\\n\"\n", "spec.cloudInit.userData: line 2: want a #cloud-config document, not a list"},
		{"networkConfig version", "  cloudInit:\n    networkConfig: \"ethernets: {}\\n\"\n", "spec.cloudInit.networkConfig: no version"},
		{"ssh key relative", "  cloudInit:\n    sshAuthorizedKeys: [id.pub]\n", "spec.cloudInit.sshAuthorizedKeys[0]: \"id.pub\": give an OpenSSH public key line"},
		{"ssh keys into a script", "  cloudInit:\n    userData: \"#!/bin/sh\\n\"\n    sshAuthorizedKeys: [\"ssh-ed25519 AAAAC3 me@x\"]\n", "spec.cloudInit.sshAuthorizedKeys: needs userData to be #cloud-config"},
		{"url not cdrom", "  disks: [{url: \"https://x/d.iso\", checksum: \"sha256:" + strings.Repeat("a", 64) + "\"}]\n", "spec.disks[0].device: url is for an installer ISO"},
		{"url no checksum", "  disks: [{device: cdrom, url: \"https://x/d.iso\"}]\n", "spec.disks[0].checksum: required with url"},
		{"url bad checksum", "  disks: [{device: cdrom, url: \"https://x/d.iso\", checksum: \"md5:00\"}]\n", "spec.disks[0].checksum: checksum \"md5:00\": want sha256:HEX"},
		{"url scheme", "  disks: [{device: cdrom, url: \"file:///d.iso\", checksum: \"sha256:" + strings.Repeat("a", 64) + "\"}]\n", "spec.disks[0].url"},
		{"url and path", "  disks: [{device: cdrom, path: /d.iso, url: \"https://x/d.iso\"}]\n", "give only one of"},
		{"nic vf address", "  devices:\n    nics: [{type: hostdev, vf: eth0}]\n", "spec.devices.nics[0].vf: \"eth0\": want the SR-IOV NIC VF's PCI address"},
		{"nic vf on network", "  devices:\n    nics: [{type: network, network: default, vf: \"0000:3b:02.1\"}]\n", "spec.devices.nics[0].vf: only for type hostdev"},
		{"unknown device key", "  devices:\n    usbs: [\"046d:c52b\"]\n", `unknown field "usbs"`},
		{"usb id", "  devices:\n    usb: [{vendor: 46d, product: c52b}]\n", "spec.devices.usb[0]: vendor \"46d\" product \"c52b\": want two 4-digit hex ids"},
		{"usb both", "  devices:\n    usb: [{vendor: \"046d\", product: c52b, bus: 1, device: 2}]\n", "give vendor and product, or bus and device, not both"},
		{"usb none", "  devices:\n    usb: [{}]\n", "spec.devices.usb[0]: give vendor and product"},
		{"usb bus range", "  devices:\n    usb: [{bus: 1, device: 300}]\n", "want lsusb's numbers"},
		{"usb twice", "  devices:\n    usb: [{vendor: \"046d\", product: c52b}, {vendor: \"046d\", product: c52b}]\n", "046d:c52b is listed twice"},
		{"usb without controller", "  graphics: {type: none}\n  devices:\n    usbController: none\n    usb: [{bus: 1, device: 2}]\n", "host USB devices need a USB controller"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			vm, err := domains.Parse([]byte(minimal + c.yaml))
			if err == nil {
				err = vm.Validate()
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v lacks %q", err, c.want)
			}
		})
	}
}

// render loads spec text, resolves it offline (qemu or kvm) and marshals the domain; when
// virt-xml-validate is installed, libvirt's schema must accept it.
func render(t *testing.T, text, virtType string) string {
	t.Helper()
	vm, err := domains.Parse([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if err := vm.Validate(); err != nil {
		t.Fatal(err)
	}
	alloc, err := domains.Resolve(vm, nil, domains.ResolveOptions{Offline: true, VirtType: virtType})
	if err != nil {
		t.Fatal(err)
	}
	d, err := domains.Build(vm, alloc, domains.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	x, err := domains.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("virt-xml-validate"); err == nil {
		p := filepath.Join(t.TempDir(), "d.xml")
		if err := os.WriteFile(p, []byte(x), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("virt-xml-validate", p, "domain").CombinedOutput(); err != nil {
			t.Errorf("libvirt's schema refuses the domain: %v\n%s\n%s", err, out, x)
		}
	}
	return x
}

func TestNewKeysRender(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, yaml, virtType string
		want, not            []string
	}{
		{"windows11 kvm", "  os: windows11\n", "kvm", []string{
			`<tpm model="tpm-crb">`, `<backend type="emulator" version="2.0">`, `<os firmware="efi">`,
			`<feature enabled="yes" name="secure-boot">`, `<feature enabled="yes" name="enrolled-keys">`, `<smm state="on">`,
			`<hyperv mode="custom">`, `<spinlocks state="on" retries="8191">`, `<stimer state="on">`, `<tlbflush state="on">`, `<ipi state="on">`,
			`<clock offset="localtime">`, `<timer name="hypervclock" present="yes">`}, nil},
		{"windows11 tcg", "  os: windows11\n", "qemu", []string{`<tpm model="tpm-crb">`, `<clock offset="localtime">`}, []string{"<hyperv"}},
		{"linux default", "", "kvm", []string{`<clock offset="utc">`, `<feature enabled="no" name="secure-boot">`}, []string{"<tpm", "<hyperv", "<smm"}},
		{"tpm for linux", "  tpm: true\n", "kvm", []string{`<tpm model="tpm-crb">`}, []string{"<hyperv"}},
		{"virtio-win", "  os: windows11\n  virtioWin: /isos/virtio-win.iso\n", "kvm", []string{`device="cdrom"`, `<source file="/isos/virtio-win.iso">`}, nil},
		{"boot order", "  disks:\n    - {blank: true, size: 8GiB, bus: sata}\n    - {device: cdrom, path: /isos/debian.iso}\n  boot: [cdrom, disk]\n", "kvm",
			[]string{`<source file="/var/lib/libvirt/images/vm1-disk0.qcow2">`, `<boot order="1">`, `<boot order="2">`}, []string{`<boot dev=`, "<backingStore"}},
		{"boot virtio-win past the seed", "  os: windows11\n  virtioWin: /isos/virtio-win.iso\n  cloudInit: {userData: \"#cloud-config\\n\"}\n  boot: [cdrom]\n", "kvm",
			[]string{"<source file=\"/isos/virtio-win.iso\"></source>\n      <target dev=\"sdb\" bus=\"sata\"></target>\n      <readonly></readonly>\n      <boot order=\"1\">"}, nil},
		{"cdrom from a url", "  disks:\n    - {blank: true, size: 8GiB, bus: sata}\n    - {device: cdrom, url: \"https://cdimage.example/debian-12.8.0-amd64-netinst.iso\", checksum: \"sha256:" + strings.Repeat("ab", 32) + "\"}\n  boot: [cdrom, disk]\n", "kvm",
			[]string{`<source file="/var/lib/libvirt/images/debian-12.8.0-amd64-netinst.iso">`, `device="cdrom"`}, nil},
		{"usb host devices", "  devices:\n    usb:\n      - {vendor: \"046d\", product: c52b}\n      - {bus: 1, device: 4}\n", "kvm",
			[]string{"<hostdev mode=\"subsystem\" type=\"usb\" managed=\"yes\">", "<vendor id=\"0x046d\"></vendor>\n        <product id=\"0xc52b\"></product>", `<address bus="1" device="4">`}, nil},
		{"nic vf", "  devices:\n    nics:\n      - {type: hostdev, vf: \"0000:3b:02.1\", mac: \"52:54:00:aa:bb:02\"}\n", "kvm",
			[]string{`<interface type="hostdev" managed="no">`, `<address type="pci" domain="0x0000" bus="0x3b" slot="0x02" function="0x1">`, `<mac address="52:54:00:aa:bb:02">`}, []string{`<model type="virtio">` + "\n      <source>\n        <address domain"}},
		{"boot network", "  boot: [network]\n", "kvm", []string{`<boot order="1">`}, []string{`<boot dev=`}},
		{"volume and scsi discard", "  disks:\n    - {volume: data.qcow2, bus: scsi}\n", "kvm",
			[]string{`<source file="/var/lib/libvirt/images/data.qcow2">`, `type="qcow2" discard="unmap"`, `bus="scsi"`, `model="virtio-scsi"`}, nil},
		{"topology", "  cpu:\n    topology: {sockets: 1, cores: 1, threads: 2}\n", "kvm", []string{`<topology sockets="1" dies="1" cores="1" threads="2">`}, nil},
		{"pin list", "  cpu:\n    pin: [4, 5]\n", "kvm", []string{`<vcpupin vcpu="0" cpuset="4">`, `<vcpupin vcpu="1" cpuset="5">`}, []string{"emulatorpin"}},
		{"devices", "  devices:\n    usbController: qemu-xhci\n    evdev:\n      - {path: /dev/input/by-id/kbd-event-kbd, grab: true, grabToggle: scrolllock}\n      - {path: /dev/input/by-id/mouse-event-mouse}\n" +
			"    lookingGlass: {resolution: 2560x1440}\n    nics:\n      - {type: bridge, bridge: br0}\n      - {type: macvtap, dev: eno1, model: e1000e, mac: \"52:54:00:aa:bb:cc\"}\n      - {type: network, network: isolated}\n    sound: ich9\n", "kvm",
			[]string{`<controller ports="15" type="usb" index="0" model="qemu-xhci">`, `<source dev="/dev/input/by-id/kbd-event-kbd" grab="all" grabToggle="scrolllock" repeat="on">`,
				`<source dev="/dev/input/by-id/mouse-event-mouse" grabToggle="ctrl-ctrl">`, `<shmem name="looking-glass">`, `<size unit="M">64</size>`, `<model type="ivshmem-plain">`,
				`<source bridge="br0">`, `<source dev="eno1" mode="bridge">`, `<mac address="52:54:00:aa:bb:cc">`, `<source network="isolated">`, `<sound model="ich9">`}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			x := render(t, minimal+c.yaml, c.virtType)
			for _, w := range c.want {
				if !strings.Contains(x, w) {
					t.Errorf("lacks %s\n%s", w, x)
				}
			}
			for _, n := range c.not {
				if strings.Contains(x, n) {
					t.Errorf("has %s", n)
				}
			}
		})
	}
}

// TestLookingGlassMiB pins the documented formula: width*height*4*2 + 10 MiB, rounded up to a
// power of two MiB.
func TestLookingGlassMiB(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ w, h, mib uint64 }{{1920, 1080, 32}, {2560, 1440, 64}, {3840, 2160, 128}, {1280, 720, 32}, {800, 600, 16}} {
		if got := domains.LookingGlassMiB(c.w, c.h); got != c.mib {
			t.Errorf("%dx%d: %d MiB, want %d", c.w, c.h, got, c.mib)
		}
	}
}

// TestPinAuto: cpu.pin auto on the GPU's node (testInventory: 0000:17:00.0 on node 1, CPUs
// 16-31) keeps a guest core's threads on one host core's siblings, gives the emulator the
// node's first core, and says what it chose.
func TestPinAuto(t *testing.T) {
	t.Parallel()
	vm, err := domains.Parse([]byte(minimal + "  cpu:\n    topology: {cores: 1, threads: 2}\n    pin: auto\n  gpus:\n    - passthrough: {address: \"0000:17:00.0\"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := vm.Validate(); err != nil {
		t.Fatal(err)
	}
	// SMT siblings n and n+8 (16/24, 17/25, ...), as on a two-socket host with HT.
	sib := map[int][]int{}
	for c := 16; c < 24; c++ {
		sib[c], sib[c+8] = []int{c, c + 8}, []int{c, c + 8}
	}
	alloc, err := domains.Resolve(vm, testInventory(), domains.ResolveOptions{VirtType: "kvm", ThreadSiblings: sib})
	if err != nil {
		t.Fatal(err)
	}
	if alloc.EmulatorPin != "16,24" || strings.Join(alloc.VCPUPins, " ") != "17 25" {
		t.Fatalf("emulator %q vcpus %v; want 16,24 and [17 25]", alloc.EmulatorPin, alloc.VCPUPins)
	}
	if !strings.Contains(strings.Join(alloc.Notes, "\n"), "cpu.pin auto: NUMA node 1") {
		t.Errorf("no resolution note: %v", alloc.Notes)
	}
	// Offline: nothing to pin to, and a note says so.
	alloc, err = domains.Resolve(vm, nil, domains.ResolveOptions{Offline: true, VirtType: "kvm"})
	if err != nil {
		t.Fatal(err)
	}
	if len(alloc.VCPUPins) != 0 || !strings.Contains(strings.Join(alloc.Notes, "\n"), "vCPUs not pinned") {
		t.Errorf("offline pin: %v %v", alloc.VCPUPins, alloc.Notes)
	}
}
