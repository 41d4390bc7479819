package domains

import (
	"bufio"
	"bytes"
	"encoding/xml"
	"fmt"
	"math/bits"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"libvirt.org/go/libvirtxml"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/internal/fetch"
	"github.com/vgpu-host/vgpu-host/vgpu"
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

	// wholeReadBack makes xmlPatches decode the whole patched document (tests compare it
	// with decoding only what the patches changed).
	wholeReadBack bool
}

func (o BuildOptions) imagesDir() string {
	if o.ImagesDir == "" {
		return DefaultImagesDir
	}
	return o.ImagesDir
}

// Builder is what each build step sees: the spec, its allocation and the options, plus the
// builder's running state (guest PCI slots handed out so far).
type Builder struct {
	VM    *VM
	Alloc *Allocation
	Opts  BuildOptions

	nextRootPort uint // q35: next pcie-root-port index for a GPU slot
	nextSlot     uint // i440fx: next bus-0 slot for a GPU
	targets      targets
	block        *baseBlock // backing store of the base domain and the steps' fixed parts
	files        []DiskFile // Alloc.Storage(VM, Opts): the disk files
	seed         string     // and the seed ISO path
}

// BuildStep is one small part of the build: it reads the builder and fills part of the domain.
type BuildStep func(*Builder, *libvirtxml.Domain) error

// BuildSteps are the build steps in order. Build runs them over the base domain.
var BuildSteps = []BuildStep{
	stepMemory,
	stepCPU,
	stepNUMA,
	stepFirmware,
	stepFeatures,
	stepGuestOS,
	stepCPUPlacement,
	stepDisks,
	stepCloudInit,
	stepVirtioWin,
	stepNetwork,
	stepDevices,
	stepBoot,
	stepGPUs,
	stepHotplugSlots,
	stepGraphics,
	stepMMIO64,
	stepMetadata,
	stepXMLPatches, // last: patches see the whole domain
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
	p := &Builder{VM: vm, Alloc: alloc, Opts: opts, nextRootPort: 1, nextSlot: 0x10}
	p.files, p.seed = alloc.Storage(vm, opts)
	d := base(p)
	for _, step := range BuildSteps {
		if err := step(p, d); err != nil {
			return nil, fmt.Errorf("build %s: %w", vm.Metadata.Name, err)
		}
	}
	return d, nil
}

// Render is Build followed by Marshal: byte for byte what (*libvirtxml.Domain).Marshal gives
// (xml.MarshalIndent with two spaces) but for Marshal's USB fix, written by the planned writer
// (xmlenc.go) into a pooled buffer.
func Render(vm *VM, alloc *Allocation, opts BuildOptions) (string, error) {
	d, err := Build(vm, alloc, opts)
	if err != nil {
		return "", err
	}
	s, err := Marshal(d)
	if err != nil {
		return "", fmt.Errorf("marshal domain %s: %w", vm.Metadata.Name, err)
	}
	return s, nil
}

// Marshal writes d as (*libvirtxml.Domain).Marshal does (xml.MarshalIndent, two spaces), with
// one fix: libvirtxml writes a USB hostdev's <product> before its <vendor>, an order libvirt's
// schema refuses (libvirt itself writes vendor first), so the two are swapped back.
func Marshal(d *libvirtxml.Domain) (string, error) {
	s, err := marshalIndented(d)
	if err != nil || !strings.Contains(s, "<product id=") {
		return s, err
	}
	return usbOrderRE.get().ReplaceAllString(s, "${1}${4}${3}${2}"), nil
}

// usbOrderRE matches a USB source's product element followed by its vendor element.
var usbOrderRE = lazyRE(`(\s*)(<product id="[^"]*"></product>)(\s*)(<vendor id="[^"]*"></vendor>)`)

// xmlWriter is a reusable bytes.Buffer with a bufio.Writer over it and two encoders sharing
// that writer: one indented like xml.MarshalIndent(v, "", "  "), one compact like
// xml.Marshal. xml.NewEncoder reuses a *bufio.Writer of at least 4096 bytes instead of
// allocating its own.
type xmlWriter struct {
	buf      bytes.Buffer
	bw       *bufio.Writer
	indented *xml.Encoder
	compact  *xml.Encoder
}

var xmlWriters = sync.Pool{New: func() any {
	w := &xmlWriter{}
	w.buf.Grow(8 << 10)
	w.bw = bufio.NewWriterSize(&w.buf, 4096)
	w.indented = xml.NewEncoder(w.bw)
	w.indented.Indent("", "  ")
	w.compact = xml.NewEncoder(w.bw)
	return w
}}

// encode writes v with enc and returns the text. A reused indented encoder starts every
// document after the first with the newline that separates top-level values; it is dropped.
// After an error the writer is not returned to the pool (the encoder may hold a half-open
// element).
func (w *xmlWriter) encode(enc *xml.Encoder, v any) (string, error) {
	w.buf.Reset()
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	if err := enc.Flush(); err != nil {
		return "", err
	}
	b := bytes.TrimPrefix(w.buf.Bytes(), []byte("\n"))
	s := string(b)
	xmlWriters.Put(w)
	return s, nil
}

// marshalIndented is xml.MarshalIndent(v, "", "  "): a domain through the planned writer
// (xmlenc.go), anything else through a pooled encoding/xml writer.
func marshalIndented(v any) (string, error) {
	if d, ok := v.(*libvirtxml.Domain); ok {
		return encodeXML(d, true)
	}
	w := xmlWriters.Get().(*xmlWriter)
	return w.encode(w.indented, v)
}

// marshalCompact is xml.Marshal(v), as marshalIndented.
func marshalCompact(v any) (string, error) {
	if d, ok := v.(*libvirtxml.Domain); ok {
		return encodeXML(d, false)
	}
	w := xmlWriters.Get().(*xmlWriter)
	return w.encode(w.compact, v)
}

func uintp(v uint) *uint { return &v }

func machine(vm *VM) string {
	if vm.Spec.Machine == "" {
		return "q35"
	}
	return vm.Spec.Machine
}

// baseBlock holds everything base points to, so that the base domain is a handful of
// allocations instead of thirty: the fields are only ever reached through the domain's
// pointers, and each Build gets its own block.
type baseBlock struct {
	dom       libvirtxml.Domain
	os        libvirtxml.DomainOS
	osType    libvirtxml.DomainOSType
	boot      [1]libvirtxml.DomainBootDevice
	features  libvirtxml.DomainFeatureList
	acpi      libvirtxml.DomainFeature
	apic      libvirtxml.DomainFeatureAPIC
	clock     libvirtxml.DomainClock
	timers    [3]libvirtxml.DomainTimer
	devices   libvirtxml.DomainDeviceList
	serial    [1]libvirtxml.DomainSerial
	console   [1]libvirtxml.DomainConsole
	channels  [2]libvirtxml.DomainChannel // guest agent, and room for spice's vdagent
	rng       [1]libvirtxml.DomainRNG
	pty       [2]libvirtxml.DomainChardevSourcePty
	src       [3]libvirtxml.DomainChardevSource
	agent     libvirtxml.DomainChardevSourceUNIX
	serialT   libvirtxml.DomainSerialTarget
	consoleT  libvirtxml.DomainConsoleTarget
	channelT  libvirtxml.DomainChannelTarget
	channelV  libvirtxml.DomainChannelTargetVirtIO
	rngB      libvirtxml.DomainRNGBackend
	rngR      libvirtxml.DomainRNGBackendRandom
	port0     [2]uint
	memory    libvirtxml.DomainMemory
	curMemory libvirtxml.DomainCurrentMemory
	vcpu      libvirtxml.DomainVCPU
	cpu       libvirtxml.DomainCPU
	topology  libvirtxml.DomainCPUTopology
	balloon   libvirtxml.DomainMemBalloon
}

// base is the domain every VM starts from: identity, lifecycle, clock, a serial console,
// a virtio RNG.
func base(p *Builder) *libvirtxml.Domain {
	vm := p.VM
	b := &baseBlock{}
	p.block = b
	b.osType = libvirtxml.DomainOSType{Arch: "x86_64", Machine: machine(vm), Type: "hvm"}
	b.boot[0] = libvirtxml.DomainBootDevice{Dev: "hd"}
	b.os = libvirtxml.DomainOS{Type: &b.osType, BootDevices: b.boot[:]}
	b.features = libvirtxml.DomainFeatureList{ACPI: &b.acpi, APIC: &b.apic}
	b.timers = [3]libvirtxml.DomainTimer{
		{Name: "rtc", TickPolicy: "catchup"},
		{Name: "pit", TickPolicy: "delay"},
		{Name: "hpet", Present: "no"},
	}
	b.clock = libvirtxml.DomainClock{Offset: "utc", Timer: b.timers[:]}
	b.src[0].Pty, b.src[1].Pty = &b.pty[0], &b.pty[1]
	b.serialT.Port = &b.port0[0]
	b.serial[0] = libvirtxml.DomainSerial{Source: &b.src[0], Target: &b.serialT}
	b.consoleT = libvirtxml.DomainConsoleTarget{Type: "serial", Port: &b.port0[1]}
	b.console[0] = libvirtxml.DomainConsole{Source: &b.src[1], Target: &b.consoleT}
	b.agent.Mode = "bind"
	b.src[2].UNIX = &b.agent
	b.channelV.Name = "org.qemu.guest_agent.0"
	b.channelT.VirtIO = &b.channelV
	b.channels[0] = libvirtxml.DomainChannel{Source: &b.src[2], Target: &b.channelT}
	b.rngR.Device = "/dev/urandom"
	b.rngB.Random = &b.rngR
	b.rng[0] = libvirtxml.DomainRNG{Model: "virtio", Backend: &b.rngB}
	b.devices = libvirtxml.DomainDeviceList{
		Serials:  b.serial[:],
		Consoles: b.console[:],
		Channels: b.channels[:1],
		RNGs:     b.rng[:],
	}
	b.dom = libvirtxml.Domain{
		Type:        p.Alloc.VirtType,
		Name:        vm.Metadata.Name,
		UUID:        DomainUUID(vm.Metadata.Name),
		Description: vm.Metadata.Description,
		OS:          &b.os,
		Features:    &b.features,
		Clock:       &b.clock,
		OnPoweroff:  "destroy",
		OnReboot:    "restart",
		OnCrash:     "destroy",
		Devices:     &b.devices,
	}
	return &b.dom
}

func stepMemory(p *Builder, d *libvirtxml.Domain) error {
	s := &p.VM.Spec
	if s.Memory.err != nil || s.Memory.Bytes == 0 {
		return fmt.Errorf("spec.memory %q: %w", s.Memory.Raw, host.ErrInvalid)
	}
	kib := uint(s.Memory.KiB())
	b := p.block
	b.memory, b.curMemory = libvirtxml.DomainMemory{Value: kib, Unit: "KiB"}, libvirtxml.DomainCurrentMemory{Value: kib, Unit: "KiB"}
	d.Memory, d.CurrentMemory = &b.memory, &b.curMemory
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
		if g.Kind != vgpu.VirtioGPU {
			model = "none"
		}
	}
	b.balloon.Model = model
	d.Devices.MemBalloon = &b.balloon
	return nil
}

// cpuMode is the effective spec.cpu.model for the allocation's virt type.
func cpuMode(p *Builder) string {
	if m := p.VM.Spec.CPU.Model; m != "" {
		return m
	}
	if p.Alloc.VirtType == "qemu" {
		return "maximum" // TCG cannot pass the host CPU through; -cpu max is its best
	}
	return "host-passthrough"
}

func stepCPU(p *Builder, d *libvirtxml.Domain) error {
	n := uint(p.VM.Spec.VCPUs)
	b := p.block
	b.vcpu = libvirtxml.DomainVCPU{Placement: "static", Value: n}
	d.VCPU = &b.vcpu
	t, err := topology(p.VM.Spec.VCPUs, p.VM.Spec.CPU.Topology)
	if err != nil {
		return fmt.Errorf("spec.cpu.topology: %w: %w", err, host.ErrInvalid)
	}
	b.topology = libvirtxml.DomainCPUTopology{Sockets: t.Sockets, Dies: 1, Cores: t.Cores, Threads: t.Threads}
	cpu := &b.cpu
	cpu.Topology = &b.topology
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
func stepNUMA(p *Builder, d *libvirtxml.Domain) error {
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
func stepFirmware(p *Builder, d *libvirtxml.Domain) error {
	s := &p.VM.Spec
	if s.Firmware == "bios" {
		return nil
	}
	sb := "no"
	if s.SecureBoot || s.OS == "windows11" {
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
func stepFeatures(p *Builder, d *libvirtxml.Domain) error {
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
	// Create is true for overlays (qemu-img create -f qcow2 -F BACKINGFMT -b BACKING PATH SIZE)
	// and for blank disks (no Backing).
	Create bool `json:"create"`
	// URL and Checksum: apply downloads the file (an installer ISO) to Path first.
	URL      string `json:"url,omitempty"`
	Checksum string `json:"checksum,omitempty"`
}

// DiskFiles lists the files of spec.disks, in order.
func (vm *VM) DiskFiles(opts BuildOptions) []DiskFile {
	out := make([]DiskFile, 0, len(vm.Spec.Disks))
	for i, dk := range vm.Spec.Disks {
		if dk.Blank {
			path := dk.Overlay
			if path == "" {
				path = filepath.Join(opts.imagesDir(), vm.Metadata.Name+"-"+diskName(dk, i)+".qcow2")
			}
			f := dk.Format
			if f == "" {
				f = "qcow2"
			}
			out = append(out, DiskFile{Path: path, Format: f, Size: dk.Size.Bytes, Create: true})
			continue
		}
		if dk.Volume != "" {
			out = append(out, DiskFile{Path: filepath.Join(opts.imagesDir(), dk.Volume), Format: fileFormat(dk.Format, dk.Volume)})
			continue
		}
		if dk.URL != "" {
			name, _ := fetch.CheckURL(dk.URL)
			out = append(out, DiskFile{Path: filepath.Join(opts.imagesDir(), name), Format: "raw", URL: dk.URL, Checksum: dk.Checksum})
			continue
		}
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
		out = append(out, DiskFile{Path: dk.Path, Format: fileFormat(dk.Format, dk.Path)})
	}
	return out
}

// fileFormat is format, or else the format the file name says (.qcow2), or raw.
func fileFormat(format, path string) string {
	switch {
	case format != "":
		return format
	case strings.HasSuffix(path, ".qcow2"):
		return "qcow2"
	}
	return "raw"
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

// targets hands out target device names per bus prefix (vda, vdb; sda, sdb; hda for ide).
type targets struct{ vd, sd, hd int }

func (t *targets) next(bus string) string {
	var n *int
	prefix := "sd"
	switch bus {
	case "virtio":
		prefix, n = "vd", &t.vd
	case "ide":
		prefix, n = "hd", &t.hd
	default:
		n = &t.sd
	}
	i := *n
	*n = i + 1
	return prefix + driveLetters(i)
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
	if device == "disk" && (bus == "virtio" || bus == "scsi") {
		dk.Driver.Discard = "unmap"
	}
	if ro {
		dk.ReadOnly = &libvirtxml.DomainDiskReadOnly{}
	}
	return dk
}

func stepDisks(p *Builder, d *libvirtxml.Domain) error {
	t := &p.targets
	files := p.files
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
		if f.Create && f.Backing != "" {
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
func stepCloudInit(p *Builder, d *libvirtxml.Domain) error {
	p.addCDROM(d, p.seed)
	return nil
}

// addCDROM attaches the ISO at path read-only as a SATA CD-ROM (IDE on pc); nothing for "".
func (p *Builder) addCDROM(d *libvirtxml.Domain, path string) {
	if path == "" {
		return
	}
	bus := "sata"
	if !isQ35(p.VM.Spec.Machine) {
		bus = "ide"
	}
	d.Devices.Disks = append(d.Devices.Disks, fileDisk("cdrom", path, "raw", bus, p.targets.next(bus), true))
}

func stepNetwork(p *Builder, d *libvirtxml.Domain) error {
	n := p.VM.Spec.Network
	nic := NIC{Type: n.Type, Network: n.Network, Bridge: n.Bridge, Model: n.Model, MAC: n.MAC}
	switch n.Type {
	case "none":
		return nil
	case "", "network":
		nic.Type = "network"
		if nic.Network == "" {
			nic.Network = "default"
		}
	}
	d.Devices.Interfaces = append(d.Devices.Interfaces, nicInterface(nic))
	return nil
}

// guestSlot hands out a guest slot for one host slot: on q35 a pcie-root-port of its own (a
// GPU wants a PCIe link, and its functions must share one slot); on i440fx a bus-0 slot.
func (p *Builder) guestSlot(d *libvirtxml.Domain) (GuestSlot, error) {
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

// stepGPUs attaches what Resolve allocated for each gpus[] entry through its kind, and picks
// the video device: virtio-gpu when one was asked for or fallen back to; none when a
// passed-through GPU is the primary display or a vGPU exports its display; otherwise a plain
// virtio-gpu console when the VM has graphics.
func stepGPUs(p *Builder, d *libvirtxml.Domain) error {
	var v video
	for i, ga := range p.Alloc.GPUs {
		k, ok := kinds.Get()[ga.Kind]
		if !ok {
			return fmt.Errorf("spec.gpus[%d]: unknown allocation kind %q: %w", i, ga.Kind, host.ErrInvalid)
		}
		if err := k.render(p, p.VM.Spec.GPUs[i], ga, d, &v); err != nil {
			return fmt.Errorf("spec.gpus[%d]: %w", i, err)
		}
	}
	switch {
	case v.virtio != nil:
		d.Devices.Videos = append(d.Devices.Videos, VirtioVideo(*v.virtio))
	case v.gpuDisplay:
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

func stepGraphics(p *Builder, d *libvirtxml.Domain) error {
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
func stepMMIO64(p *Builder, d *libvirtxml.Domain) error {
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
	Index    int       `xml:"index,attr"`
	Kind     vgpu.Kind `xml:"kind,attr"`
	FellBack bool      `xml:"fellBack,attr,omitempty"`
	Devices  []string  `xml:"device"`
	Mdevs    []string  `xml:"mdev"`
}

type metaDisk struct {
	Path    string `xml:"path,attr"`
	Backing string `xml:"backing,attr,omitempty"`
}

func stepMetadata(p *Builder, d *libvirtxml.Domain) error {
	m := metadata{NS: MetadataNamespace, APIVersion: APIVersion, Seed: p.seed}
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
	for _, f := range p.files {
		if f.Create {
			m.Disks = append(m.Disks, metaDisk{Path: f.Path, Backing: f.Backing})
		}
	}
	x, err := encodeXML(&m, false)
	if err != nil {
		return fmt.Errorf("metadata: %w", err)
	}
	d.Metadata = &libvirtxml.DomainMetadata{XML: x}
	return nil
}
