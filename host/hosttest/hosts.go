package hosttest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/vgpu-host/vgpu-host/host"
)

// Well-known IDs used by the domain helpers.
const (
	VendorNVIDIA = 0x10de
	VendorAMD    = 0x1002
	VendorIntel  = 0x8086
)

// RootPort adds a PCIe root port (class 0604, pcieport) on the root complex in its own group.
func (t *Tree) RootPort(addr string) host.Address {
	return t.AddPCI(PCI{Addr: addr, Vendor: VendorIntel, Device: 0x7c10, Class: 0x060400, Driver: "pcieport"})
}

// ConsumerGPU adds a consumer GPU with its HDMI audio function in one group behind a new root
// port at portAddr: slot.0 VGA on gpuDriver ("nvidia", "amdgpu", "" ...) and slot.1 audio on
// snd_hda_intel. It returns the GPU and audio addresses. A GeForce RTX 3080 by default.
func (t *Tree) ConsumerGPU(portAddr, gpuAddr, gpuDriver string) (gpu, audio host.Address) {
	t.RootPort(portAddr)
	g := t.NewGroup()
	gpu = t.AddPCI(PCI{Addr: gpuAddr, Parent: portAddr, Vendor: VendorNVIDIA, Device: 0x2206, SubVendor: 0x1462, SubDevice: 0x3892,
		Class: 0x030000, Driver: gpuDriver, NativeDriver: nonEmpty(gpuDriver, "nouveau"), Group: g, ResetMethods: "bus",
		BARs: []BARSpec{{Index: 0, Size: 16 << 20}, {Index: 1, Size: 256 << 20, Is64: true, Prefetch: true}, {Index: 3, Size: 32 << 20, Is64: true, Prefetch: true}, {Index: 5, Size: 128, IO: true}}})
	a := host.MustParseAddress(gpuAddr)
	a.Function = 1
	audio = t.AddPCI(PCI{Addr: a.String(), Parent: portAddr, Vendor: VendorNVIDIA, Device: 0x1aef, Class: 0x040300, Driver: "snd_hda_intel", Group: g,
		BARs: []BARSpec{{Index: 0, Size: 16 << 10}}})
	// snd_hda_intel registers an ALSA card for the function: .../sound/cardN.
	t.mkdir(filepath.Join(t.devPath[audio], "sound", fmt.Sprintf("card%d", t.nextSoundCard)))
	t.nextSoundCard++
	return gpu, audio
}

// HoldOpen makes a fake process pid (command comm) hold the device node path (a host path such
// as /dev/snd/controlC0) open, as /proc/PID/fd shows it.
func (t *Tree) HoldOpen(pid int, comm, path string) {
	t.WriteFile(fmt.Sprintf("proc/%d/comm", pid), comm+"\n")
	fd := filepath.Join(t.Dir(), fmt.Sprintf("proc/%d/fd", pid))
	if err := os.MkdirAll(fd, 0o755); err != nil {
		t.tb.Fatal(err)
	}
	n, _ := os.ReadDir(fd)
	if err := os.Symlink(path, filepath.Join(fd, fmt.Sprint(3+len(n)))); err != nil {
		t.tb.Fatal(err)
	}
}

// DatacenterGPU adds an NVIDIA A100 (3D controller, class 0302, no audio function) behind a new
// root port, alone in its group, on NUMA node numa with a 64 GiB BAR1.
func (t *Tree) DatacenterGPU(portAddr, gpuAddr, driver string, numa int) host.Address {
	t.RootPort(portAddr)
	return t.AddPCI(PCI{Addr: gpuAddr, Parent: portAddr, Vendor: VendorNVIDIA, Device: 0x20b0, SubVendor: VendorNVIDIA, SubDevice: 0x134f,
		Class: 0x030200, Driver: driver, NativeDriver: nonEmpty(driver, "nvidia"), NUMA: numa, NUMASet: true, LocalCPUs: fmt.Sprintf("%d-%d", numa*8, numa*8+7),
		ResetMethods: "flr bus", BARs: []BARSpec{{Index: 0, Size: 16 << 20}, {Index: 1, Size: 64 << 30, Is64: true, Prefetch: true}, {Index: 3, Size: 32 << 20, Is64: true, Prefetch: true}}})
}

// GPUWithNIC adds a conventional PCIe-to-PCI bridge at bridgeAddr with a GPU and a NIC behind
// it: all three share one group, as a conventional bus cannot isolate its devices. The NIC is
// on e1000 (a host device), so the group is not viable until it moves too.
func (t *Tree) GPUWithNIC(bridgeAddr, gpuAddr, nicAddr string) (gpu, nic host.Address) {
	g := t.NewGroup()
	t.AddPCI(PCI{Addr: bridgeAddr, Vendor: 0x1b36, Device: 0x000e, Class: 0x060400, Group: g})
	gpu = t.AddPCI(PCI{Addr: gpuAddr, Parent: bridgeAddr, Vendor: 0x1234, Device: 0x1111, Class: 0x038000, Driver: "bochs-drm", Group: g,
		BARs: []BARSpec{{Index: 0, Size: 16 << 20, Prefetch: true}, {Index: 2, Size: 4 << 10}}})
	nic = t.AddPCI(PCI{Addr: nicAddr, Parent: bridgeAddr, Vendor: VendorIntel, Device: 0x100e, Class: 0x020000, Driver: "e1000", Group: g,
		BARs: []BARSpec{{Index: 0, Size: 128 << 10}}})
	return gpu, nic
}

// VFSpec says how a PF's virtual functions look when the fake kernel creates them.
type VFSpec struct {
	Total    int
	Offset   int // first_vf_offset (routing-ID offset of VF0 from the PF)
	Stride   int
	VFDevice uint16
	// VFDriver is what the host binds to new VFs when sriov_drivers_autoprobe is 1.
	VFDriver string
	// NoSRIOVDriver emulates a PF driver without sriov_configure: writes to sriov_numvfs fail with ENOENT.
	NoSRIOVDriver bool
	// Nvidia makes each VF carry NVIDIA's vendor-specific vGPU files (nvidia/creatable_vgpu_types,
	// nvidia/current_vgpu_type) and bind to "nvidia", as vGPU 17+ on Ada/Hopper/Blackwell does.
	Nvidia []NvidiaVGPUType
}

// NvidiaVGPUType is a type the fake NVIDIA driver offers on VFs: at most MaxPerGPU VFs of one
// physical GPU can use it, and a GPU runs one type at a time (time-sliced vGPU). A type with a
// MIGProfile is MIG-backed instead (see Tree.SetMIGInstances).
type NvidiaVGPUType struct {
	ID        int
	Name      string
	MaxPerGPU int
	// MIGProfile is the GPU-instance profile a MIG-backed type runs on ("3g.40gb" for
	// "NVIDIA H100-3-40C"); empty for a time-sliced type.
	MIGProfile string
}

// SRIOVPF adds a physical function with SR-IOV capability and numVFs VFs already enabled.
func (t *Tree) SRIOVPF(p PCI, spec VFSpec, numVFs int) host.Address {
	pf := t.AddPCI(p)
	if spec.Offset == 0 {
		spec.Offset = 1
	}
	if spec.Stride == 0 {
		spec.Stride = 1
	}
	t.vfSpec[pf] = spec
	dir := t.devPath[pf]
	t.WriteFile(filepath.Join(dir, "sriov_totalvfs"), fmt.Sprintf("%d\n", spec.Total))
	t.WriteFile(filepath.Join(dir, "sriov_numvfs"), "0\n")
	t.WriteFile(filepath.Join(dir, "sriov_offset"), fmt.Sprintf("%d\n", spec.Offset))
	t.WriteFile(filepath.Join(dir, "sriov_stride"), fmt.Sprintf("%d\n", spec.Stride))
	t.WriteFile(filepath.Join(dir, "sriov_vf_device"), fmt.Sprintf("%04x\n", spec.VFDevice))
	t.WriteFile(filepath.Join(dir, "sriov_drivers_autoprobe"), "1\n")
	if numVFs > 0 {
		if err := t.setNumVFs(pf, numVFs); err != nil {
			t.tb.Fatal(err)
		}
	}
	return pf
}

// VFAddress returns the address of VF i (0-based) of pf, from its offset and stride.
func (t *Tree) VFAddress(pf host.Address, i int) host.Address {
	s := t.vfSpec[pf]
	rid := int(pf.Bus)<<8 | int(pf.Device)<<3 | int(pf.Function)
	rid += s.Offset + i*s.Stride
	return host.Address{Domain: pf.Domain, Bus: uint8(rid >> 8), Device: uint8(rid>>3) & 0x1f, Function: uint8(rid & 7)}
}

// NvidiaSRIOVGPU adds an NVIDIA Ada/Hopper-style GPU (an L40S by default) on the nvidia driver
// with numVFs VFs that use the vendor-specific VFIO interface (no mdev bus).
func (t *Tree) NvidiaSRIOVGPU(portAddr, gpuAddr string, numa, numVFs int, types []NvidiaVGPUType) host.Address {
	t.RootPort(portAddr)
	if types == nil {
		types = []NvidiaVGPUType{{ID: 1155, Name: "NVIDIA L40S-1Q", MaxPerGPU: 32}, {ID: 1156, Name: "NVIDIA L40S-2Q", MaxPerGPU: 16},
			{ID: 1160, Name: "NVIDIA L40S-8Q", MaxPerGPU: 4}, {ID: 1163, Name: "NVIDIA L40S-48Q", MaxPerGPU: 1}}
	}
	return t.SRIOVPF(PCI{Addr: gpuAddr, Parent: portAddr, Vendor: VendorNVIDIA, Device: 0x26b9, Class: 0x030200, Driver: "nvidia",
		NUMA: numa, NUMASet: true, ResetMethods: "flr bus",
		BARs: []BARSpec{{Index: 0, Size: 16 << 20}, {Index: 1, Size: 64 << 30, Is64: true, Prefetch: true}}},
		VFSpec{Total: 32, Offset: 4, Stride: 1, VFDevice: 0x26b9, VFDriver: "nvidia", Nvidia: types}, numVFs)
}

// MdevType describes a type a fake mdev parent offers.
type MdevType struct {
	ID          string // directory name, e.g. "nvidia-558"
	Name        string // e.g. "GRID A100-4C"
	Description string
	DeviceAPI   string // "vfio-pci" by default
	Available   int
}

// MdevParentPCI turns an existing PCI function into an mdev parent with the given types
// (NVIDIA vGPU up to Ampere, Intel GVT-g).
func (t *Tree) MdevParentPCI(a host.Address, types []MdevType) {
	dir := t.devPath[a]
	t.addMdevTypes(dir, types)
	t.symlink(filepath.Join("sys/class/mdev_bus", a.String()), dir)
}

// MdevParentVirtual adds a virtual mdev parent such as the kernel's sample mbochs driver,
// at /sys/devices/virtual/NAME/NAME.
func (t *Tree) MdevParentVirtual(name string, types []MdevType) string {
	dir := filepath.Join("sys/devices/virtual", name, name)
	t.mkdir(dir)
	t.addMdevTypes(dir, types)
	t.symlink(filepath.Join("sys/class/mdev_bus", name), dir)
	return dir
}

func (t *Tree) addMdevTypes(dir string, types []MdevType) {
	for _, ty := range types {
		td := filepath.Join(dir, "mdev_supported_types", ty.ID)
		t.mkdir(filepath.Join(td, "devices"))
		t.WriteFile(filepath.Join(td, "name"), ty.Name+"\n")
		if ty.Description != "" {
			t.WriteFile(filepath.Join(td, "description"), ty.Description+"\n")
		}
		t.WriteFile(filepath.Join(td, "device_api"), nonEmpty(ty.DeviceAPI, "vfio-pci")+"\n")
		t.WriteFile(filepath.Join(td, "available_instances"), fmt.Sprintf("%d\n", ty.Available))
		t.WriteFile(filepath.Join(td, "create"), "")
	}
}

// Mbochs adds the kernel's mbochs sample parent with the types a 6.1 kernel shows
// (mbochs-small/medium/large; 512 MB of video memory in all by default).
func (t *Tree) Mbochs() string {
	return t.MdevParentVirtual("mbochs", []MdevType{
		{ID: "mbochs-small", Name: "small", Description: "64 MB video memory", Available: 8},
		{ID: "mbochs-medium", Name: "medium", Description: "128 MB video memory", Available: 4},
		{ID: "mbochs-large", Name: "large", Description: "256 MB video memory", Available: 2},
	})
}

// A100Mdev makes a an NVIDIA A100 mdev parent with a few GRID types (vGPU up to 16.x).
func (t *Tree) A100Mdev(a host.Address) {
	t.MdevParentPCI(a, []MdevType{
		{ID: "nvidia-471", Name: "GRID A100-4C", Description: "num_heads=1, frl_config=60, framebuffer=4096M, max_resolution=4096x2160, max_instance=10", Available: 10},
		{ID: "nvidia-474", Name: "GRID A100-10C", Description: "num_heads=1, frl_config=60, framebuffer=10240M, max_resolution=4096x2160, max_instance=4", Available: 4},
		{ID: "nvidia-475", Name: "GRID A100-20C", Description: "num_heads=1, frl_config=60, framebuffer=20480M, max_resolution=4096x2160, max_instance=2", Available: 2},
	})
}

// IntelGVTg adds an Intel iGPU at 0000:00:02.0 (i915, boot VGA) that is a GVT-g mdev parent.
func (t *Tree) IntelGVTg() host.Address {
	a := t.AddPCI(PCI{Addr: "0000:00:02.0", Vendor: VendorIntel, Device: 0x3e92, Class: 0x030000, Driver: "i915", BootVGA: true,
		BARs: []BARSpec{{Index: 0, Size: 16 << 20, Is64: true}, {Index: 2, Size: 256 << 20, Is64: true, Prefetch: true}}})
	t.MdevParentPCI(a, []MdevType{
		{ID: "i915-GVTg_V5_4", Name: "GVTg_V5_4", Description: "low_gm_size: 128MB\nhigh_gm_size: 512MB\nfence: 4\nresolution: 1920x1200\nweight: 4", Available: 3},
		{ID: "i915-GVTg_V5_8", Name: "GVTg_V5_8", Description: "low_gm_size: 64MB\nhigh_gm_size: 384MB\nfence: 4\nresolution: 1024x768\nweight: 2", Available: 7},
	})
	return a
}

func nonEmpty(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// nvidiaCreatable renders nvidia/creatable_vgpu_types: a header line and "ID : NAME" lines,
// as the NVIDIA 17.x host driver prints them.
func nvidiaCreatable(types []NvidiaVGPUType) string {
	var b strings.Builder
	b.WriteString("ID    : vGPU Name\n")
	for _, ty := range types {
		fmt.Fprintf(&b, "%-5d : %s\n", ty.ID, ty.Name)
	}
	return b.String()
}
