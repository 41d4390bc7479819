package hosttest

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/vgpu-host/vgpu-host/host"
)

// PCIeSwitch adds a PCIe switch behind a new root port at portAddr: an upstream port at
// upAddr (bus behind the root port) and one downstream port per address in downAddrs, each a
// PCI bridge on pcieport in its own group, as on GPU servers where 2-4 GPUs share a switch
// (the switch has ACS, so each GPU still gets its own group).
func (t *Tree) PCIeSwitch(portAddr, upAddr string, downAddrs ...string) []host.Address {
	t.RootPort(portAddr)
	t.AddPCI(PCI{Addr: upAddr, Parent: portAddr, Vendor: 0x1000, Device: 0xc030, Class: 0x060400, Driver: "pcieport"})
	var out []host.Address
	for _, d := range downAddrs {
		out = append(out, t.AddPCI(PCI{Addr: d, Parent: upAddr, Vendor: 0x1000, Device: 0xc030, Class: 0x060400, Driver: "pcieport"}))
	}
	return out
}

// HostSpec sizes a generated host (GenerateHost).
type HostSpec struct {
	Switches     int // PCIe switches, two GPUs behind each
	NICs         int // SR-IOV NIC PFs
	VFsPerNIC    int // VFs enabled on each NIC (<= 248)
	VFsPerGPU    int // VFs on each NVIDIA SR-IOV GPU (half of the GPUs)
	MiscDevices  int // host functions on the root complex (storage, USB, SMBus...)
	WithMdevGPUs bool
	// GPUsPerSwitch is the number of GPUs behind each switch (default 2, at most 8).
	GPUsPerSwitch int
	// NUMANodes spreads the GPUs evenly over this many nodes (default: four GPUs per node).
	NUMANodes int
	// MixedGPUs cycles the GPU kinds by index instead (0: A100 mdev parent, 1: consumer GPU
	// with HDMI audio, 2: L40S and 3: A40 with VFsPerGPU vendor-vGPU VFs each), so every
	// kind is on every NUMA node.
	MixedGPUs bool
}

// GPUHost64 is the scale benchmark's host (issue 19): 64 GPUs behind 16 PCIe switches on 8
// NUMA nodes, mixed as in MixedGPUs (16 A100 mdev parents, 16 consumer GPUs with audio, 16
// L40S and 16 A40 with 16 vendor-vGPU VFs each), 2 SR-IOV NICs with 16 VFs, 32 other
// functions.
var GPUHost64 = HostSpec{Switches: 16, GPUsPerSwitch: 4, NUMANodes: 8, MixedGPUs: true, NICs: 2, VFsPerNIC: 16, VFsPerGPU: 16, MiscDevices: 32}

// BenchHost is the benchmark's large host: 8 GPUs behind 4 PCIe switches (2 A100 mdev
// parents, 2 consumer GPUs with HDMI audio, 4 L40S with 16 vendor-vGPU VFs each), 14 SR-IOV
// NICs with 128 VFs each and ~100 other functions: about 2,000 PCI functions.
var BenchHost = HostSpec{Switches: 4, NICs: 14, VFsPerNIC: 128, VFsPerGPU: 16, MiscDevices: 104, WithMdevGPUs: true}

// SmallHost is a workstation: one switch with two GPUs, one NIC with 4 VFs, a few devices.
var SmallHost = HostSpec{Switches: 1, NICs: 1, VFsPerNIC: 4, VFsPerGPU: 4, MiscDevices: 12}

// GenerateHost fills t with a host shaped by spec and writes config space for every
// function (WriteConfigSpace) so that lspci can read the same tree.
func (t *Tree) GenerateHost(spec HostSpec) {
	gpu := 0
	perSwitch := spec.GPUsPerSwitch
	if perSwitch == 0 {
		perSwitch = 2
	}
	// Buses: 0x20 + 0x10 per switch as before for up to 4 switches; larger hosts pack them
	// (upstream, downstream and one bus per GPU), below the NICs' 0x80.
	stride := 0x10
	if spec.Switches > 4 {
		stride = 2 + perSwitch
	}
	if perSwitch > 8 || spec.Switches > 16 || 0x20+spec.Switches*stride > 0x80 {
		t.tb.Fatalf("hosttest: %d switches of %d GPUs do not fit the generated layout", spec.Switches, perSwitch)
	}
	total := spec.Switches * perSwitch
	for s := 0; s < spec.Switches; s++ {
		port := fmt.Sprintf("0000:00:%02x.0", 1+s)
		if s >= 4 {
			port = fmt.Sprintf("0000:00:%02x.0", 0x10+s) // 00:14-1f: 00:08-0f are the NICs'
		}
		bus := 0x20 + s*stride
		up := fmt.Sprintf("0000:%02x:00.0", bus)
		var downAddrs []string
		for i := 0; i < perSwitch; i++ {
			downAddrs = append(downAddrs, fmt.Sprintf("0000:%02x:%02x.0", bus+1, i))
		}
		downs := t.PCIeSwitch(port, up, downAddrs...)
		for i, d := range downs {
			gpuAddr := fmt.Sprintf("0000:%02x:00.0", bus+2+i)
			numa := gpu / 4
			if spec.NUMANodes > 0 {
				numa = gpu * spec.NUMANodes / total
			}
			if spec.MixedGPUs {
				t.mixedGPU(gpu%4, gpuAddr, d.String(), numa, spec.VFsPerGPU)
				gpu++
				continue
			}
			switch {
			case gpu < 2 && spec.WithMdevGPUs:
				a := t.AddPCI(PCI{Addr: gpuAddr, Parent: d.String(), Vendor: VendorNVIDIA, Device: 0x20b0, SubVendor: VendorNVIDIA, SubDevice: 0x134f,
					Class: 0x030200, Driver: "nvidia", NUMA: numa, NUMASet: true, ResetMethods: "flr bus",
					BARs: []BARSpec{{Index: 0, Size: 16 << 20}, {Index: 1, Size: 64 << 30, Is64: true, Prefetch: true}, {Index: 3, Size: 32 << 20, Is64: true, Prefetch: true}}})
				t.A100Mdev(a)
			case gpu < 4 || spec.VFsPerGPU == 0:
				g := t.NewGroup()
				t.AddPCI(PCI{Addr: gpuAddr, Parent: d.String(), Vendor: VendorNVIDIA, Device: 0x2206, SubVendor: 0x1462, SubDevice: 0x3892,
					Class: 0x030000, Driver: "nouveau", Group: g, NUMA: numa, NUMASet: true, ResetMethods: "bus",
					BARs: []BARSpec{{Index: 0, Size: 16 << 20}, {Index: 1, Size: 256 << 20, Is64: true, Prefetch: true}}})
				audio := host.MustParseAddress(gpuAddr)
				audio.Function = 1
				t.AddPCI(PCI{Addr: audio.String(), Parent: d.String(), Vendor: VendorNVIDIA, Device: 0x1aef, Class: 0x040300, Driver: "snd_hda_intel", Group: g,
					BARs: []BARSpec{{Index: 0, Size: 16 << 10}}})
			default:
				t.SRIOVPF(PCI{Addr: gpuAddr, Parent: d.String(), Vendor: VendorNVIDIA, Device: 0x26b9, Class: 0x030200, Driver: "nvidia",
					NUMA: numa, NUMASet: true, ResetMethods: "flr bus", BARs: []BARSpec{{Index: 0, Size: 16 << 20}, {Index: 1, Size: 64 << 30, Is64: true, Prefetch: true}}},
					VFSpec{Total: 32, Offset: 4, Stride: 1, VFDevice: 0x26b9, VFDriver: "nvidia", Nvidia: []NvidiaVGPUType{
						{ID: 1155, Name: "NVIDIA L40S-1Q", MaxPerGPU: 32}, {ID: 1160, Name: "NVIDIA L40S-8Q", MaxPerGPU: 4}}}, spec.VFsPerGPU)
			}
			gpu++
		}
	}
	for n := 0; n < spec.NICs; n++ {
		port := fmt.Sprintf("0000:00:%02x.0", 0x08+n%8) // root ports 00:08-0f, 2 functions each
		if n >= 8 {
			port = fmt.Sprintf("0000:00:%02x.1", 0x08+n%8)
		}
		t.RootPort(port)
		bus := 0x80 + n
		t.SRIOVPF(PCI{Addr: fmt.Sprintf("0000:%02x:00.0", bus), Parent: port, Vendor: VendorIntel, Device: 0x1593, Class: 0x020000, Driver: "ice",
			NUMA: n % 2, NUMASet: true, ResetMethods: "flr", BARs: []BARSpec{{Index: 0, Size: 32 << 20, Is64: true, Prefetch: true}, {Index: 3, Size: 64 << 10, Is64: true, Prefetch: true}}},
			VFSpec{Total: 248, Offset: 8, Stride: 1, VFDevice: 0x1889, VFDriver: "iavf"}, spec.VFsPerNIC)
	}
	for m := 0; m < spec.MiscDevices; m++ {
		// Host functions on buses 0xe0+: storage, USB, SMBus, serial, in groups of 8 functions.
		classes := []uint32{0x010802, 0x0c0330, 0x0c0500, 0x078000, 0x010601, 0x088000, 0x0c8000, 0x130000}
		drivers := []string{"nvme", "xhci_hcd", "i801_smbus", "", "ahci", "", "", ""}
		a := fmt.Sprintf("0000:%02x:%02x.%d", 0xe0+m/256, (m/8)%32, m%8)
		t.AddPCI(PCI{Addr: a, Vendor: VendorIntel, Device: uint16(0x7a00 + m%8), Class: classes[m%8], Driver: drivers[m%8],
			BARs: []BARSpec{{Index: 0, Size: 64 << 10}}})
	}
	t.WriteConfigSpace()
}

// mixedGPU adds GPU kind k (see HostSpec.MixedGPUs) at gpuAddr behind the switch port parent.
func (t *Tree) mixedGPU(k int, gpuAddr, parent string, numa, vfs int) {
	switch k {
	case 0:
		a := t.AddPCI(PCI{Addr: gpuAddr, Parent: parent, Vendor: VendorNVIDIA, Device: 0x20b0, SubVendor: VendorNVIDIA, SubDevice: 0x134f,
			Class: 0x030200, Driver: "nvidia", NUMA: numa, NUMASet: true, ResetMethods: "flr bus",
			BARs: []BARSpec{{Index: 0, Size: 16 << 20}, {Index: 1, Size: 64 << 30, Is64: true, Prefetch: true}, {Index: 3, Size: 32 << 20, Is64: true, Prefetch: true}}})
		t.A100Mdev(a)
	case 1:
		g := t.NewGroup()
		t.AddPCI(PCI{Addr: gpuAddr, Parent: parent, Vendor: VendorNVIDIA, Device: 0x2206, SubVendor: 0x1462, SubDevice: 0x3892,
			Class: 0x030000, Driver: "nouveau", Group: g, NUMA: numa, NUMASet: true, ResetMethods: "bus",
			BARs: []BARSpec{{Index: 0, Size: 16 << 20}, {Index: 1, Size: 256 << 20, Is64: true, Prefetch: true}}})
		audio := host.MustParseAddress(gpuAddr)
		audio.Function = 1
		t.AddPCI(PCI{Addr: audio.String(), Parent: parent, Vendor: VendorNVIDIA, Device: 0x1aef, Class: 0x040300, Driver: "snd_hda_intel", Group: g,
			NUMA: numa, NUMASet: true, BARs: []BARSpec{{Index: 0, Size: 16 << 10}}})
	default:
		dev, types := uint16(0x26b9), []NvidiaVGPUType{{ID: 1155, Name: "NVIDIA L40S-1Q", MaxPerGPU: 32}, {ID: 1160, Name: "NVIDIA L40S-8Q", MaxPerGPU: 4}}
		if k == 3 {
			dev, types = 0x2235, []NvidiaVGPUType{{ID: 557, Name: "NVIDIA A40-1Q", MaxPerGPU: 32}, {ID: 560, Name: "NVIDIA A40-4Q", MaxPerGPU: 12}, {ID: 563, Name: "NVIDIA A40-12Q", MaxPerGPU: 4}}
		}
		t.SRIOVPF(PCI{Addr: gpuAddr, Parent: parent, Vendor: VendorNVIDIA, Device: dev, Class: 0x030200, Driver: "nvidia",
			NUMA: numa, NUMASet: true, ResetMethods: "flr bus", BARs: []BARSpec{{Index: 0, Size: 16 << 20}, {Index: 1, Size: 64 << 30, Is64: true, Prefetch: true}}},
			VFSpec{Total: 32, Offset: 4, Stride: 1, VFDevice: dev, VFDriver: "nvidia", Nvidia: types}, vfs)
	}
}

// WriteConfigSpace writes a 64-byte `config` file for every function from its vendor, device,
// class and subsystem attributes (type 1 header for bridges), so that lspci -A linux-sysfs can
// read a fake tree as it reads a real one.
func (t *Tree) WriteConfigSpace() {
	for a, dir := range t.devPath {
		full := filepath.Join(t.dir, dir)
		hex := func(name string) uint64 {
			v, _ := strconv.ParseUint(strings.TrimPrefix(strings.TrimSpace(t.ReadFile(filepath.Join(dir, name))), "0x"), 16, 32)
			return v
		}
		cfg := make([]byte, 64)
		binary.LittleEndian.PutUint16(cfg[0:], uint16(hex("vendor")))
		binary.LittleEndian.PutUint16(cfg[2:], uint16(hex("device")))
		binary.LittleEndian.PutUint16(cfg[4:], 0x0406) // memory space, bus master
		class := uint32(hex("class"))
		cfg[9], cfg[10], cfg[11] = byte(class), byte(class>>8), byte(class>>16)
		if class>>8 == 0x0604 {
			cfg[14] = 1
			cfg[24] = a.Bus // primary bus; secondary/subordinate are left 0
		} else {
			binary.LittleEndian.PutUint16(cfg[0x2c:], uint16(hex("subsystem_vendor")))
			binary.LittleEndian.PutUint16(cfg[0x2e:], uint16(hex("subsystem_device")))
		}
		if err := os.WriteFile(filepath.Join(full, "config"), cfg, 0o644); err != nil {
			t.tb.Fatal(err)
		}
	}
}
