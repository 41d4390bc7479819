package domains

import (
	"encoding/xml"
	"fmt"
	"math/bits"
	"path/filepath"
	"strconv"
	"strings"

	"libvirt.org/go/libvirtxml"

	"github.com/vgpu-host/vgpu-host/host"
)

// DefaultImagesDir is where overlays and cloud-init seeds go unless BuildOptions says otherwise
// (libvirt's default storage pool).
const DefaultImagesDir = "/var/lib/libvirt/images"

// MetadataNamespace is the XML namespace of the <metadata> element vgpu-host writes.
const MetadataNamespace = "https://github.com/vgpu-host/vgpu-host/xmlns/domain/v1"

// BuildOptions tune Build.
type BuildOptions struct {
	// ImagesDir holds overlays and seed ISOs; default DefaultImagesDir.
	ImagesDir string
}

func (o BuildOptions) imagesDir() string {
	if o.ImagesDir == "" {
		return DefaultImagesDir
	}
	return o.ImagesDir
}

// Plan is what each build step sees: the spec, its allocation and the options, plus the
// builder's running state (guest PCI slots handed out so far).
type Plan struct {
	VM    *VM
	Alloc *Allocation
	Opts  BuildOptions

	nextRootPort uint // q35: next pcie-root-port index for a GPU slot
	nextSlot     uint // i440fx: next bus-0 slot for a GPU
	targets      targets
}

// Step is one small part of the build: it reads the plan and fills part of the domain.
type Step func(*Plan, *libvirtxml.Domain) error

// Steps are the build steps in order. Build runs them over the base domain.
var Steps = []Step{
	stepMemory,
	stepCPU,
	stepNUMA,
	stepFirmware,
	stepFeatures,
	stepDisks,
	stepCloudInit,
	stepNetwork,
	stepGPUs,
	stepGraphics,
	stepMMIO64,
	stepMetadata,
}

// Build turns a valid spec and its allocation into a libvirt domain. It reads nothing from the
// host: the same inputs give the same domain. Errors wrap host.ErrInvalid.
func Build(vm *VM, alloc *Allocation, opts BuildOptions) (*libvirtxml.Domain, error) {
	if vm == nil || alloc == nil {
		return nil, fmt.Errorf("build: need a spec and an allocation: %w", host.ErrInvalid)
	}
	if len(alloc.GPUs) != len(vm.Spec.GPUs) {
		return nil, fmt.Errorf("build %s: allocation has %d gpus for %d in the spec: %w", vm.Metadata.Name, len(alloc.GPUs), len(vm.Spec.GPUs), host.ErrInvalid)
	}
	p := &Plan{VM: vm, Alloc: alloc, Opts: opts, nextRootPort: 1, nextSlot: 0x10}
	d := base(p)
	for _, step := range Steps {
		if err := step(p, d); err != nil {
			return nil, fmt.Errorf("build %s: %w", vm.Metadata.Name, err)
		}
	}
	return d, nil
}

// Render is Build followed by Marshal.
func Render(vm *VM, alloc *Allocation, opts BuildOptions) (string, error) {
	d, err := Build(vm, alloc, opts)
	if err != nil {
		return "", err
	}
	s, err := d.Marshal()
	if err != nil {
		return "", fmt.Errorf("marshal domain %s: %w", vm.Metadata.Name, err)
	}
	return s, nil
}

func uintp(v uint) *uint { return &v }

func machine(vm *VM) string {
	if vm.Spec.Machine == "" {
		return "q35"
	}
	return vm.Spec.Machine
}

// base is the domain every VM starts from: identity, lifecycle, clock, a serial console,
// a virtio RNG.
func base(p *Plan) *libvirtxml.Domain {
	vm := p.VM
	return &libvirtxml.Domain{
		Type:        p.Alloc.VirtType,
		Name:        vm.Metadata.Name,
		UUID:        DomainUUID(vm.Metadata.Name),
		Description: vm.Metadata.Description,
		OS: &libvirtxml.DomainOS{
			Type:        &libvirtxml.DomainOSType{Arch: "x86_64", Machine: machine(vm), Type: "hvm"},
			BootDevices: []libvirtxml.DomainBootDevice{{Dev: "hd"}},
		},
		Features: &libvirtxml.DomainFeatureList{
			ACPI: &libvirtxml.DomainFeature{},
			APIC: &libvirtxml.DomainFeatureAPIC{},
		},
		Clock: &libvirtxml.DomainClock{
			Offset: "utc",
			Timer: []libvirtxml.DomainTimer{
				{Name: "rtc", TickPolicy: "catchup"},
				{Name: "pit", TickPolicy: "delay"},
				{Name: "hpet", Present: "no"},
			},
		},
		OnPoweroff: "destroy",
		OnReboot:   "restart",
		OnCrash:    "destroy",
		Devices: &libvirtxml.DomainDeviceList{
			Serials: []libvirtxml.DomainSerial{{
				Source: &libvirtxml.DomainChardevSource{Pty: &libvirtxml.DomainChardevSourcePty{}},
				Target: &libvirtxml.DomainSerialTarget{Port: uintp(0)},
			}},
			Consoles: []libvirtxml.DomainConsole{{
				Source: &libvirtxml.DomainChardevSource{Pty: &libvirtxml.DomainChardevSourcePty{}},
				Target: &libvirtxml.DomainConsoleTarget{Type: "serial", Port: uintp(0)},
			}},
			Channels: []libvirtxml.DomainChannel{{
				Source: &libvirtxml.DomainChardevSource{UNIX: &libvirtxml.DomainChardevSourceUNIX{Mode: "bind"}},
				Target: &libvirtxml.DomainChannelTarget{VirtIO: &libvirtxml.DomainChannelTargetVirtIO{Name: "org.qemu.guest_agent.0"}},
			}},
			RNGs: []libvirtxml.DomainRNG{{
				Model:   "virtio",
				Backend: &libvirtxml.DomainRNGBackend{Random: &libvirtxml.DomainRNGBackendRandom{Device: "/dev/urandom"}},
			}},
		},
	}
}

func stepMemory(p *Plan, d *libvirtxml.Domain) error {
	s := &p.VM.Spec
	if s.Memory.err != nil || s.Memory.Bytes == 0 {
		return fmt.Errorf("spec.memory %q: %w", s.Memory.Raw, host.ErrInvalid)
	}
	kib := uint(s.Memory.KiB())
	d.Memory = &libvirtxml.DomainMemory{Value: kib, Unit: "KiB"}
	d.CurrentMemory = &libvirtxml.DomainCurrentMemory{Value: kib, Unit: "KiB"}
	if !s.Hugepages.IsZero() {
		d.MemoryBacking = &libvirtxml.DomainMemoryBacking{
			MemoryHugePages: &libvirtxml.DomainMemoryHugepages{
				Hugepages: []libvirtxml.DomainMemoryHugepage{{Size: uint(s.Hugepages.KiB()), Unit: "KiB"}},
			},
		}
	}
	// VFIO pins all guest memory, so a balloon cannot return any: leave it out when devices are
	// assigned.
	model := "virtio"
	for _, g := range p.Alloc.GPUs {
		if g.Kind != KindVirtioGPU {
			model = "none"
		}
	}
	d.Devices.MemBalloon = &libvirtxml.DomainMemBalloon{Model: model}
	return nil
}

// cpuMode is the effective spec.cpu.model for the allocation's virt type.
func cpuMode(p *Plan) string {
	if m := p.VM.Spec.CPU.Model; m != "" {
		return m
	}
	if p.Alloc.VirtType == "qemu" {
		return "maximum" // TCG cannot pass the host CPU through; -cpu max is its best
	}
	return "host-passthrough"
}

func stepCPU(p *Plan, d *libvirtxml.Domain) error {
	n := uint(p.VM.Spec.VCPUs)
	d.VCPU = &libvirtxml.DomainVCPU{Placement: "static", Value: n}
	cpu := &libvirtxml.DomainCPU{
		Topology: &libvirtxml.DomainCPUTopology{Sockets: 1, Dies: 1, Cores: int(n), Threads: 1},
	}
	switch m := cpuMode(p); m {
	case "host-passthrough", "host-model":
		if p.Alloc.VirtType == "qemu" {
			return fmt.Errorf("spec.cpu.model %s needs virtType kvm (this render uses qemu/TCG): %w", m, host.ErrInvalid)
		}
		cpu.Mode = m
		if m == "host-passthrough" {
			cpu.Check = "none"
			cpu.Migratable = "on"
		}
	case "maximum":
		cpu.Mode = m
	default:
		cpu.Mode, cpu.Match = "custom", "exact"
		cpu.Model = &libvirtxml.DomainCPUModel{Value: m, Fallback: "forbid"}
	}
	d.CPU = cpu
	return nil
}

// stepNUMA binds vCPUs to the assigned GPU's local CPUs and memory to its node (numa: auto).
func stepNUMA(p *Plan, d *libvirtxml.Domain) error {
	if p.Alloc.NUMANode < 0 || p.Alloc.CPUSet == "" {
		return nil
	}
	d.VCPU.CPUSet = p.Alloc.CPUSet
	d.NUMATune = &libvirtxml.DomainNUMATune{
		Memory: &libvirtxml.DomainNUMATuneMemory{Mode: "strict", Nodeset: strconv.Itoa(p.Alloc.NUMANode)},
	}
	return nil
}

// stepFirmware picks UEFI (libvirt's firmware auto-selection, secure boot off unless asked)
// or BIOS.
func stepFirmware(p *Plan, d *libvirtxml.Domain) error {
	s := &p.VM.Spec
	if s.Firmware == "bios" {
		return nil
	}
	sb := "no"
	if s.SecureBoot {
		sb = "yes"
		d.Features.SMM = &libvirtxml.DomainFeatureSMM{State: "on"}
	}
	d.OS.Firmware = "efi"
	d.OS.FirmwareInfo = &libvirtxml.DomainOSFirmwareInfo{Features: []libvirtxml.DomainOSFirmwareFeature{
		{Enabled: sb, Name: "enrolled-keys"},
		{Enabled: sb, Name: "secure-boot"},
	}}
	return nil
}

// stepFeatures applies quirks for consumer NVIDIA cards on drivers older than 465, which
// refuse to start (code 43) when they see a hypervisor.
func stepFeatures(p *Plan, d *libvirtxml.Domain) error {
	q := p.VM.Spec.Quirks
	if q.HypervVendorID != "" {
		d.Features.HyperV = &libvirtxml.DomainFeatureHyperV{
			Mode: "custom",
			VendorId: &libvirtxml.DomainFeatureHyperVVendorId{
				DomainFeatureState: libvirtxml.DomainFeatureState{State: "on"},
				Value:              q.HypervVendorID,
			},
		}
	}
	if q.KVMHidden {
		d.Features.KVM = &libvirtxml.DomainFeatureKVM{Hidden: &libvirtxml.DomainFeatureState{State: "on"}}
	}
	return nil
}

// DiskFile is a file a VM's disk needs: an overlay to create over a base image, or a path that
// must already exist. The lifecycle (apply) creates overlays before defining the domain.
type DiskFile struct {
	Path          string `json:"path"`
	Format        string `json:"format"`
	Backing       string `json:"backing,omitempty"`
	BackingFormat string `json:"backing_format,omitempty"`
	// Size is the overlay's virtual size in bytes (0 for plain paths).
	Size uint64 `json:"size,omitempty"`
	// Create is true for overlays (qemu-img create -f qcow2 -F BACKINGFMT -b BACKING PATH SIZE).
	Create bool `json:"create"`
}

// DiskFiles lists the files of spec.disks, in order.
func (vm *VM) DiskFiles(opts BuildOptions) []DiskFile {
	out := make([]DiskFile, 0, len(vm.Spec.Disks))
	for i, dk := range vm.Spec.Disks {
		if dk.Image != "" {
			path := dk.Overlay
			if path == "" {
				path = filepath.Join(opts.imagesDir(), vm.Metadata.Name+"-"+diskName(dk, i)+".qcow2")
			}
			bf := dk.Format
			if bf == "" {
				bf = "qcow2" // cloud images (.img, .qcow2) are qcow2
				if strings.HasSuffix(dk.Image, ".raw") {
					bf = "raw"
				}
			}
			out = append(out, DiskFile{Path: path, Format: "qcow2", Backing: dk.Image, BackingFormat: bf, Size: dk.Size.Bytes, Create: true})
			continue
		}
		f := dk.Format
		if f == "" {
			f = "raw"
			if strings.HasSuffix(dk.Path, ".qcow2") {
				f = "qcow2"
			}
		}
		out = append(out, DiskFile{Path: dk.Path, Format: f})
	}
	return out
}

func diskName(dk Disk, i int) string {
	if dk.Name != "" {
		return dk.Name
	}
	return "disk" + strconv.Itoa(i)
}

// SeedISOPath is where the cloud-init NoCloud seed ISO (volume label "cidata") of the VM
// goes; empty when the spec has no cloudInit.
func (vm *VM) SeedISOPath(opts BuildOptions) string {
	if vm.Spec.CloudInit == nil {
		return ""
	}
	return filepath.Join(opts.imagesDir(), vm.Metadata.Name+"-cidata.iso")
}

// targets hands out target device names per bus prefix (vda, vdb; sda, sdb).
type targets map[string]int

func (t targets) next(bus string) string {
	prefix := "sd"
	if bus == "virtio" {
		prefix = "vd"
	}
	n := t[prefix]
	t[prefix] = n + 1
	return prefix + driveLetters(n)
}

func driveLetters(n int) string {
	s := ""
	for {
		s = string(rune('a'+n%26)) + s
		n = n/26 - 1
		if n < 0 {
			return s
		}
	}
}

func fileDisk(device, path, format, bus, dev string, ro bool) libvirtxml.DomainDisk {
	dk := libvirtxml.DomainDisk{
		Device: device,
		Driver: &libvirtxml.DomainDiskDriver{Name: "qemu", Type: format},
		Source: &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: path}},
		Target: &libvirtxml.DomainDiskTarget{Dev: dev, Bus: bus},
	}
	if device == "disk" && bus == "virtio" {
		dk.Driver.Discard = "unmap"
	}
	if ro {
		dk.ReadOnly = &libvirtxml.DomainDiskReadOnly{}
	}
	return dk
}

func stepDisks(p *Plan, d *libvirtxml.Domain) error {
	t := targets{}
	p.targets = t
	files := p.VM.DiskFiles(p.Opts)
	scsi := false
	for i, dk := range p.VM.Spec.Disks {
		f := files[i]
		device := dk.Device
		if device == "" {
			device = "disk"
		}
		bus := dk.Bus
		if bus == "" {
			bus = "virtio"
			if device == "cdrom" {
				bus = "sata"
			}
		}
		if bus == "sata" && !isQ35(p.VM.Spec.Machine) {
			bus = "ide" // i440fx has no AHCI controller by default
		}
		scsi = scsi || bus == "scsi"
		disk := fileDisk(device, f.Path, f.Format, bus, t.next(bus), dk.ReadOnly || device == "cdrom")
		if strings.HasPrefix(dk.Path, "/dev/") {
			disk.Source = &libvirtxml.DomainDiskSource{Block: &libvirtxml.DomainDiskSourceBlock{Dev: dk.Path}}
		}
		if f.Create {
			disk.BackingStore = &libvirtxml.DomainDiskBackingStore{
				Format: &libvirtxml.DomainDiskFormat{Type: f.BackingFormat},
				Source: &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: f.Backing}},
			}
		}
		d.Devices.Disks = append(d.Devices.Disks, disk)
	}
	if scsi {
		d.Devices.Controllers = append(d.Devices.Controllers, libvirtxml.DomainController{Type: "scsi", Index: uintp(0), Model: "virtio-scsi"})
	}
	return nil
}

// stepCloudInit attaches the NoCloud seed ISO read-only as a CD-ROM. The apply command writes
// the ISO (user-data, meta-data, network-config) at SeedISOPath before starting the VM.
func stepCloudInit(p *Plan, d *libvirtxml.Domain) error {
	path := p.VM.SeedISOPath(p.Opts)
	if path == "" {
		return nil
	}
	bus := "sata"
	if !isQ35(p.VM.Spec.Machine) {
		bus = "ide"
	}
	if p.targets == nil {
		p.targets = targets{}
	}
	d.Devices.Disks = append(d.Devices.Disks, fileDisk("cdrom", path, "raw", bus, p.targets.next(bus), true))
	return nil
}

func stepNetwork(p *Plan, d *libvirtxml.Domain) error {
	n := p.VM.Spec.Network
	iface := libvirtxml.DomainInterface{Model: &libvirtxml.DomainInterfaceModel{Type: "virtio"}}
	if n.Model != "" {
		iface.Model.Type = n.Model
	}
	if n.MAC != "" {
		iface.MAC = &libvirtxml.DomainInterfaceMAC{Address: strings.ToLower(n.MAC)}
	}
	switch n.Type {
	case "none":
		return nil
	case "bridge":
		iface.Source = &libvirtxml.DomainInterfaceSource{Bridge: &libvirtxml.DomainInterfaceSourceBridge{Bridge: n.Bridge}}
	default:
		net := n.Network
		if net == "" {
			net = "default"
		}
		iface.Source = &libvirtxml.DomainInterfaceSource{Network: &libvirtxml.DomainInterfaceSourceNetwork{Network: net}}
	}
	d.Devices.Interfaces = append(d.Devices.Interfaces, iface)
	return nil
}

// guestSlot hands out a guest slot for one host slot: on q35 a pcie-root-port of its own (a
// GPU wants a PCIe link, and its functions must share one slot); on i440fx a bus-0 slot.
func (p *Plan) guestSlot(d *libvirtxml.Domain) (GuestSlot, error) {
	if isQ35(p.VM.Spec.Machine) {
		idx := p.nextRootPort
		if idx > 200 {
			return GuestSlot{}, fmt.Errorf("too many GPU slots: %w", host.ErrInvalid)
		}
		p.nextRootPort++
		d.Devices.Controllers = append(d.Devices.Controllers, libvirtxml.DomainController{
			Type: "pci", Index: uintp(idx), Model: "pcie-root-port",
		})
		return GuestSlot{Bus: idx, Slot: 0}, nil
	}
	s := p.nextSlot
	if s > 0x1f {
		return GuestSlot{}, fmt.Errorf("too many GPU slots for machine pc: %w", host.ErrInvalid)
	}
	p.nextSlot++
	return GuestSlot{Bus: 0, Slot: s}, nil
}

// stepGPUs attaches what Resolve allocated for each gpus[] entry, and picks the video device:
// virtio-gpu when one was asked for or fallen back to; none when a passed-through GPU is the
// primary display or a vGPU exports its display; otherwise a plain virtio-gpu console when the
// VM has graphics.
func stepGPUs(p *Plan, d *libvirtxml.Domain) error {
	var virtio *VirtioGPU
	gpuDisplay := false
	for i, ga := range p.Alloc.GPUs {
		g := p.VM.Spec.GPUs[i]
		switch ga.Kind {
		case KindPassthrough:
			if g.Passthrough == nil {
				return fmt.Errorf("spec.gpus[%d]: allocation is passthrough, spec is not: %w", i, host.ErrInvalid)
			}
			for _, s := range ga.Slots {
				if len(s.Functions) == 0 {
					return fmt.Errorf("spec.gpus[%d]: allocated slot has no functions: %w", i, host.ErrInvalid)
				}
				at, err := p.guestSlot(d)
				if err != nil {
					return err
				}
				d.Devices.Hostdevs = append(d.Devices.Hostdevs, SlotHostdevs(s.Functions, at, true, g.Passthrough.ROM)...)
			}
			gpuDisplay = gpuDisplay || g.Passthrough.Primary
		case KindVendorVFIO:
			for _, s := range ga.Slots {
				if len(s.Functions) == 0 {
					return fmt.Errorf("spec.gpus[%d]: allocated VF slot is empty: %w", i, host.ErrInvalid)
				}
				at, err := p.guestSlot(d)
				if err != nil {
					return err
				}
				hd := VendorVFIOHostdev(s.Functions[0])
				dom, fn := uint(0), uint(0)
				hd.Address = &libvirtxml.DomainAddress{PCI: &libvirtxml.DomainAddressPCI{Domain: &dom, Bus: &at.Bus, Slot: &at.Slot, Function: &fn}}
				d.Devices.Hostdevs = append(d.Devices.Hostdevs, hd)
			}
		case KindMdev:
			display := g.VGPU != nil && g.VGPU.Display
			for _, m := range ga.Mdevs {
				d.Devices.Hostdevs = append(d.Devices.Hostdevs, MdevHostdev(m.UUID, display))
			}
			gpuDisplay = gpuDisplay || display
		case KindVirtioGPU:
			if g.VirtioGPU != nil {
				virtio = g.VirtioGPU
			} else if virtio == nil {
				virtio = &VirtioGPU{} // fallback: 2D, runs on any host
			}
		default:
			return fmt.Errorf("spec.gpus[%d]: unknown allocation kind %q: %w", i, ga.Kind, host.ErrInvalid)
		}
	}
	switch {
	case virtio != nil:
		d.Devices.Videos = append(d.Devices.Videos, VirtioVideo(*virtio))
	case gpuDisplay:
		d.Devices.Videos = append(d.Devices.Videos, libvirtxml.DomainVideo{Model: libvirtxml.DomainVideoModel{Type: "none"}})
	case graphicsType(p.VM) != "none":
		d.Devices.Videos = append(d.Devices.Videos, VirtioVideo(VirtioGPU{}))
	}
	return nil
}

// VirtioVideo is a virtio-gpu video device; with virgl it is virtio-vga-gl (3D through the
// host's render node, which the graphics' <gl> element names).
func VirtioVideo(v VirtioGPU) libvirtxml.DomainVideo {
	heads := uint(v.Heads)
	if heads == 0 {
		heads = 1
	}
	m := libvirtxml.DomainVideoModel{Type: "virtio", Heads: heads, Primary: "yes"}
	if v.Virgl {
		m.Accel = &libvirtxml.DomainVideoAccel{Accel3D: "yes"}
	}
	return libvirtxml.DomainVideo{Model: m}
}

func graphicsType(vm *VM) string {
	if vm.Spec.Graphics.Type == "" {
		return "vnc"
	}
	return vm.Spec.Graphics.Type
}

func stepGraphics(p *Plan, d *libvirtxml.Domain) error {
	g := p.VM.Spec.Graphics
	listen := g.Listen
	if listen == "" {
		listen = "127.0.0.1"
	}
	addr := []libvirtxml.DomainGraphicListener{{Address: &libvirtxml.DomainGraphicListenerAddress{Address: listen}}}
	vnc := libvirtxml.DomainGraphic{VNC: &libvirtxml.DomainGraphicVNC{Port: -1, AutoPort: "yes", Listen: listen, Listeners: addr}}
	switch graphicsType(p.VM) {
	case "none":
		return nil
	case "vnc":
		d.Devices.Graphics = append(d.Devices.Graphics, vnc)
	case "spice":
		sp := &libvirtxml.DomainGraphicSpice{Port: -1, AutoPort: "yes", Listen: listen, Listeners: addr}
		if g.GL {
			// SPICE GL shares dma-bufs with a local client only: listen type none.
			sp = &libvirtxml.DomainGraphicSpice{
				Listeners: []libvirtxml.DomainGraphicListener{{}},
				GL:        &libvirtxml.DomainGraphicSpiceGL{Enable: "yes", RenderNode: g.RenderNode},
			}
		}
		d.Devices.Graphics = append(d.Devices.Graphics, libvirtxml.DomainGraphic{Spice: sp})
		d.Devices.Channels = append(d.Devices.Channels, libvirtxml.DomainChannel{
			Source: &libvirtxml.DomainChardevSource{SpiceVMC: &libvirtxml.DomainChardevSourceSpiceVMC{}},
			Target: &libvirtxml.DomainChannelTarget{VirtIO: &libvirtxml.DomainChannelTargetVirtIO{Name: "com.redhat.spice.0"}},
		})
	case "egl-headless":
		// GL rendering on the host's render node; the picture is exported over VNC.
		d.Devices.Graphics = append(d.Devices.Graphics,
			libvirtxml.DomainGraphic{EGLHeadless: &libvirtxml.DomainGraphicEGLHeadless{GL: &libvirtxml.DomainGraphicEGLHeadlessGL{RenderNode: g.RenderNode}}},
			vnc)
	default:
		return fmt.Errorf("spec.graphics.type %q: %w", g.Type, host.ErrInvalid)
	}
	d.Devices.Inputs = append(d.Devices.Inputs, libvirtxml.DomainInput{Type: "tablet", Bus: "usb"})
	return nil
}

// stepMMIO64 sizes the guest's 64-bit PCI MMIO window for large-BAR GPUs without
// <qemu:commandline> (which taints the domain), in the two ways libvirt 9.0 accepts:
//
//   - <pcihole64> on the root controller: QEMU's pci-hole64-size, the window its ACPI tables
//     describe to the guest OS;
//   - <maxphysaddr>: OVMF (PlatformDynamicMmioWindow) makes its 64-bit aperture the top eighth
//     of the guest physical address space, so the window needs phys-bits >= log2(window) + 3.
//     host-passthrough CPUs get mode='passthrough' (the host's bits); others mode='emulate'
//     with the bits computed here.
//
// OVMF's own knob, fw_cfg opt/ovmf/X-PciMmio64Mb, cannot be set through <sysinfo type='fwcfg'>:
// libvirt's qemu driver rejects every opt/ovmf/ name ("That firmware name is reserved").
func stepMMIO64(p *Plan, d *libvirtxml.Domain) error {
	mib := p.Alloc.MMIO64MiB
	if mib == 0 {
		return nil
	}
	root := "pcie-root"
	if !isQ35(p.VM.Spec.Machine) {
		root = "pci-root"
	}
	d.Devices.Controllers = append([]libvirtxml.DomainController{{
		Type: "pci", Index: uintp(0), Model: root,
		PCI: &libvirtxml.DomainControllerPCI{Hole64: &libvirtxml.DomainControllerPCIHole64{Size: mib << 10, Unit: "KiB"}},
	}}, d.Devices.Controllers...)
	if d.CPU == nil {
		return nil
	}
	if d.CPU.Mode == "host-passthrough" {
		d.CPU.MaxPhysAddr = &libvirtxml.DomainCPUMaxPhysAddr{Mode: "passthrough"}
		return nil
	}
	b, err := PhysBits(p.VM.Spec.Memory.Bytes, mib<<20)
	if err != nil {
		return err
	}
	d.CPU.MaxPhysAddr = &libvirtxml.DomainCPUMaxPhysAddr{Mode: "emulate", Bits: b}
	return nil
}

// OVMFMaxPhysBits is the widest guest physical address OVMF uses (it avoids 5-level paging).
const OVMFMaxPhysBits = 46

// PhysBits is the guest physical address width that gives a 64-bit MMIO window of win bytes:
// OVMF's dynamic window is 2^(bits-3), placed size-aligned above RAM. At least 40 (QEMU's
// default), at most OVMFMaxPhysBits.
func PhysBits(ram, win uint64) (uint, error) {
	top := max(ram+(2<<30), 4<<30) // RAM above 4 GiB plus the 32-bit PCI hole, roughly
	start := (top + win - 1) / win * win
	need := max(uint(bits.Len64(start+win-1)), uint(bits.Len64(win-1))+3, 40)
	if need > OVMFMaxPhysBits {
		return 0, fmt.Errorf("a %d GiB 64-bit MMIO window over %d GiB of RAM needs %d physical address bits; OVMF uses at most %d: %w",
			win>>30, ram>>30, need, OVMFMaxPhysBits, host.ErrInvalid)
	}
	return need, nil
}

// metadata is what vgpu-host records in the domain's <metadata>: where it came from and what
// each gpus[] entry got, for status and destroy.
type metadata struct {
	XMLName    xml.Name   `xml:"instance"`
	NS         string     `xml:"xmlns,attr"`
	APIVersion string     `xml:"apiVersion,attr"`
	GPUs       []metaGPU  `xml:"gpu"`
	Disks      []metaDisk `xml:"disk"`
	Seed       string     `xml:"seed,omitempty"`
}

type metaGPU struct {
	Index    int      `xml:"index,attr"`
	Kind     GPUKind  `xml:"kind,attr"`
	FellBack bool     `xml:"fellBack,attr,omitempty"`
	Devices  []string `xml:"device"`
	Mdevs    []string `xml:"mdev"`
}

type metaDisk struct {
	Path    string `xml:"path,attr"`
	Backing string `xml:"backing,attr,omitempty"`
}

func stepMetadata(p *Plan, d *libvirtxml.Domain) error {
	m := metadata{NS: MetadataNamespace, APIVersion: APIVersion, Seed: p.VM.SeedISOPath(p.Opts)}
	for _, ga := range p.Alloc.GPUs {
		mg := metaGPU{Index: ga.Index, Kind: ga.Kind, FellBack: ga.FellBack}
		for _, s := range ga.Slots {
			for _, f := range s.Functions {
				mg.Devices = append(mg.Devices, f.String())
			}
		}
		for _, md := range ga.Mdevs {
			mg.Mdevs = append(mg.Mdevs, md.UUID)
		}
		m.GPUs = append(m.GPUs, mg)
	}
	for _, f := range p.VM.DiskFiles(p.Opts) {
		if f.Create {
			m.Disks = append(m.Disks, metaDisk{Path: f.Path, Backing: f.Backing})
		}
	}
	b, err := xml.Marshal(m)
	if err != nil {
		return fmt.Errorf("metadata: %w", err)
	}
	d.Metadata = &libvirtxml.DomainMetadata{XML: string(b)}
	return nil
}
