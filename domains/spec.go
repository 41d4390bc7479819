// Package domains turns a declarative VM spec (YAML, apiVersion vgpu-host/v1) into a libvirt
// domain, in three separate steps that are plain function calls on plain values:
//
//	vm, err := domains.Load("examples/passthrough.yaml")   // parse strictly, then Validate
//	alloc, err := domains.Resolve(vm, inv, domains.ResolveOptions{})  // selectors -> devices
//	dom, err := domains.Build(vm, alloc, domains.BuildOptions{})      // typed libvirtxml.Domain
//	xml, err := dom.Marshal()
//
// Resolution (which PCI functions, mdev UUIDs or VFs each gpus[] entry gets, or that it fell
// back to virtio-gpu) is separate from building, so the builder is a pure function of the
// spec and the allocation: the same inputs always give the same XML. The builder assembles
// a libvirtxml.Domain from a base literal and small steps; each hostdev kind is a pure
// function returning a libvirtxml.DomainHostdev. There are no text templates.
//
// The spec reference is docs/spec.md.
package domains

import (
	"errors"
	"fmt"
	"github.com/vgpu-host/vgpu-host/internal/strictyaml"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/internal/lazy"
)

// APIVersion and Kind are the only values the spec header accepts.
const (
	APIVersion = "vgpu-host/v1"
	Kind       = "VirtualMachine"
)

// VM is a parsed VirtualMachine spec. Parse and Load fill it from YAML; code may also build
// one directly (call Validate before Resolve/Build).
type VM struct {
	APIVersion string   `yaml:"apiVersion" json:"apiVersion"`
	Kind       string   `yaml:"kind" json:"kind"`
	Metadata   Metadata `yaml:"metadata" json:"metadata"`
	Spec       Spec     `yaml:"spec" json:"spec"`

	// lines maps field paths ("spec.gpus[0].vgpu.profile") to their YAML line, for errors.
	lines map[string]int
}

// Metadata names the VM.
type Metadata struct {
	// Name is the libvirt domain name (and the stem of its disk, seed and NVRAM files).
	Name string `yaml:"name" json:"name"`
	// Description becomes the domain's <description>.
	Description string `yaml:"description,omitempty" json:"description,omitempty"`
}

// Spec is the body of a VirtualMachine.
type Spec struct {
	VCPUs      int        `yaml:"vcpus" json:"vcpus"`
	Memory     Size       `yaml:"memory" json:"memory"`
	Hugepages  Size       `yaml:"hugepages,omitempty" json:"hugepages,omitempty"` // page size; empty = none
	CPU        CPU        `yaml:"cpu,omitempty" json:"cpu,omitempty"`
	NUMA       string     `yaml:"numa,omitempty" json:"numa,omitempty"`         // "auto" or "none" (default)
	Firmware   string     `yaml:"firmware,omitempty" json:"firmware,omitempty"` // "uefi" (default) or "bios"
	SecureBoot bool       `yaml:"secureBoot,omitempty" json:"secureBoot,omitempty"`
	Machine    string     `yaml:"machine,omitempty" json:"machine,omitempty"`   // "q35" (default), "pc", or a versioned pc-q35-*/pc-i440fx-*
	VirtType   string     `yaml:"virtType,omitempty" json:"virtType,omitempty"` // "kvm", "qemu" or "auto" (default)
	Disks      []Disk     `yaml:"disks,omitempty" json:"disks,omitempty"`
	CloudInit  *CloudInit `yaml:"cloudInit,omitempty" json:"cloudInit,omitempty"`
	Network    Network    `yaml:"network,omitempty" json:"network,omitempty"`
	Graphics   Graphics   `yaml:"graphics,omitempty" json:"graphics,omitempty"`
	GPUs       []GPU      `yaml:"gpus,omitempty" json:"gpus,omitempty"`
	// HotplugSlots is how many empty PCIe root ports the domain keeps for `vgpu-host attach`
	// (q35 only; default 0: a running guest then takes no hotplugged hostdev).
	HotplugSlots int    `yaml:"hotplugSlots,omitempty" json:"hotplugSlots,omitempty"`
	Quirks       Quirks `yaml:"quirks,omitempty" json:"quirks,omitempty"`
	// MMIO64 sizes the guest's 64-bit PCI MMIO window: "auto" (default: from the assigned
	// devices' 64-bit BARs), "off", or a size such as 256GiB.
	MMIO64 string `yaml:"mmio64,omitempty" json:"mmio64,omitempty"`

	// OS is the guest operating system: "linux" (default) or "windows11" (TPM 2.0, UEFI
	// Secure Boot with enrolled keys, Hyper-V enlightenments, localtime clock).
	OS string `yaml:"os,omitempty" json:"os,omitempty"`
	// VirtioWin is the virtio-win driver ISO, attached as a further CD-ROM (Windows guests).
	VirtioWin string `yaml:"virtioWin,omitempty" json:"virtioWin,omitempty"`
	// TPM adds an emulated TPM 2.0 (swtpm); on by default for windows11.
	TPM *bool `yaml:"tpm,omitempty" json:"tpm,omitempty"`
	// Boot is the boot order by device kind: disk, cdrom, network (default [disk]).
	Boot []string `yaml:"boot,omitempty" json:"boot,omitempty"`
	// Devices are the VM's further devices: USB, evdev input, Looking Glass, NICs, sound.
	Devices Devices `yaml:"devices,omitempty" json:"devices,omitempty"`
	// XMLPatches change the rendered domain where the spec has no key: set or remove an
	// element or attribute, or add an XML fragment, by path (XMLPatch; docs/spec.md).
	XMLPatches []XMLPatch `yaml:"xmlPatches,omitempty" json:"xmlPatches,omitempty"`
}

// CPU selects the guest CPU model.
type CPU struct {
	// Model is host-passthrough (default with kvm), host-model, maximum (default with qemu/TCG),
	// or a named libvirt CPU model such as "Skylake-Server".
	Model string `yaml:"model,omitempty" json:"model,omitempty"`
	// Topology is the guest's sockets, cores and threads; their product must be vcpus.
	Topology *Topology `yaml:"topology,omitempty" json:"topology,omitempty"`
	// Pin pins vCPUs and the emulator to host CPUs: "auto" (on the GPU's NUMA node, sibling
	// threads together) or a list of host CPUs, one per vCPU.
	Pin *Pin `yaml:"pin,omitempty" json:"pin,omitempty"`
}

// Disk is a base cloud image with a copy-on-write overlay (Image + Size), or a plain path.
type Disk struct {
	Name    string `yaml:"name,omitempty" json:"name,omitempty"`
	Image   string `yaml:"image,omitempty" json:"image,omitempty"`     // base image (read-only backing file)
	Size    Size   `yaml:"size,omitempty" json:"size,omitempty"`       // overlay size
	Overlay string `yaml:"overlay,omitempty" json:"overlay,omitempty"` // overlay path; default IMAGES/NAME-DISK.qcow2
	Path    string `yaml:"path,omitempty" json:"path,omitempty"`       // a plain file or block device
	Format  string `yaml:"format,omitempty" json:"format,omitempty"`   // qcow2 or raw; default from the file name
	Bus     string `yaml:"bus,omitempty" json:"bus,omitempty"`         // virtio (default), scsi, sata
	Device  string `yaml:"device,omitempty" json:"device,omitempty"`   // disk (default) or cdrom
	// Blank creates an empty disk of Size in the pool (qcow2; path default IMAGES/NAME-DISK.qcow2).
	Blank bool `yaml:"blank,omitempty" json:"blank,omitempty"`
	// Volume is an existing volume of the pool, by name.
	Volume string `yaml:"volume,omitempty" json:"volume,omitempty"`
	// URL is an installer ISO (device: cdrom) that apply downloads into the pool, verifying
	// Checksum as it streams; kept there for the next VM (docs/spec.md, "disks").
	URL string `yaml:"url,omitempty" json:"url,omitempty"`
	// Checksum is the URL's "sha256:HEX" or "sha512:HEX" (required with url).
	Checksum string `yaml:"checksum,omitempty" json:"checksum,omitempty"`
	ReadOnly bool   `yaml:"readOnly,omitempty" json:"readOnly,omitempty"`
}

// CloudInit is the NoCloud seed (an ISO labelled "cidata" attached as a CD-ROM).
type CloudInit struct {
	UserData      string `yaml:"userData,omitempty" json:"userData,omitempty"`
	MetaData      string `yaml:"metaData,omitempty" json:"metaData,omitempty"`
	NetworkConfig string `yaml:"networkConfig,omitempty" json:"networkConfig,omitempty"`
	// SSHAuthorizedKeys are public keys for the guest's default user: each an OpenSSH public
	// key line, or the absolute path of a file of them (~/.ssh/id_ed25519.pub, an
	// authorized_keys file), read when the seed is made. They are added to userData's
	// ssh_authorized_keys, so userData must be #cloud-config or empty.
	SSHAuthorizedKeys []string `yaml:"sshAuthorizedKeys,omitempty" json:"sshAuthorizedKeys,omitempty"`
}

// Network is the VM's one NIC.
type Network struct {
	Type    string `yaml:"type,omitempty" json:"type,omitempty"`       // network (default), bridge, none
	Network string `yaml:"network,omitempty" json:"network,omitempty"` // libvirt network; default "default"
	Bridge  string `yaml:"bridge,omitempty" json:"bridge,omitempty"`
	Model   string `yaml:"model,omitempty" json:"model,omitempty"` // virtio (default), e1000e
	MAC     string `yaml:"mac,omitempty" json:"mac,omitempty"`
}

// Graphics is the VM's remote display.
type Graphics struct {
	Type   string `yaml:"type,omitempty" json:"type,omitempty"`     // vnc (default), spice, egl-headless, none
	Listen string `yaml:"listen,omitempty" json:"listen,omitempty"` // default 127.0.0.1
	// GL turns on OpenGL for spice (local clients only: listen is ignored).
	GL bool `yaml:"gl,omitempty" json:"gl,omitempty"`
	// RenderNode is the host DRM render node for GL (spice gl, egl-headless).
	RenderNode string `yaml:"renderNode,omitempty" json:"renderNode,omitempty"`
}

// GPU is one gpus[] entry: exactly one of Passthrough, VGPU, VirtioGPU, plus a fallback.
type GPU struct {
	Passthrough *Passthrough `yaml:"passthrough,omitempty" json:"passthrough,omitempty"`
	VGPU        *VGPU        `yaml:"vgpu,omitempty" json:"vgpu,omitempty"`
	VirtioGPU   *VirtioGPU   `yaml:"virtioGpu,omitempty" json:"virtioGpu,omitempty"`
	// Fallback is what to attach when no physical GPU or vGPU is free: "fail" (default) or
	// "virtio-gpu" (2D virtio-gpu, runs anywhere).
	Fallback string `yaml:"fallback,omitempty" json:"fallback,omitempty"`
}

// Passthrough gives whole PCI GPUs to the VM via VFIO.
type Passthrough struct {
	Address string `yaml:"address,omitempty" json:"address,omitempty"` // 0000:41:00.0
	Vendor  string `yaml:"vendor,omitempty" json:"vendor,omitempty"`   // PCI vendor id, "10de"
	Device  string `yaml:"device,omitempty" json:"device,omitempty"`   // PCI device id, "20b5"
	Model   string `yaml:"model,omitempty" json:"model,omitempty"`     // substring of the pci.ids device name
	Count   int    `yaml:"count,omitempty" json:"count,omitempty"`     // default 1
	// Companions brings the other functions of the GPU's slot (HDMI audio, USB-C) along on one
	// guest slot; default true.
	Companions *bool `yaml:"companions,omitempty" json:"companions,omitempty"`
	ROM        *ROM  `yaml:"rom,omitempty" json:"rom,omitempty"`
	// Primary makes the GPU the VM's only display (no emulated VGA).
	Primary bool `yaml:"primary,omitempty" json:"primary,omitempty"`
	// Managed hands the binding to libvirt (managed='yes': libvirt detaches the functions at
	// every start and reattaches them at every stop). By default vgpu-host owns it: apply binds
	// the whole IOMMU group with its own checks and exact restore, the domain gets
	// managed='no', and destroy restores every function's driver. apply runs every safety
	// check either way.
	Managed bool `yaml:"managed,omitempty" json:"managed,omitempty"`
}

// ROM controls the option ROM of a passed-through GPU.
type ROM struct {
	Bar  string `yaml:"bar,omitempty" json:"bar,omitempty"`   // on or off
	File string `yaml:"file,omitempty" json:"file,omitempty"` // a ROM image to expose instead
}

// VGPU attaches mediated (mdev) vGPUs or NVIDIA vendor-VFIO VFs.
type VGPU struct {
	// Profile is an mdev type id ("nvidia-558") or name ("GRID A100-4C"), or a vendor-VFIO
	// vGPU type id or name ("NVIDIA L40S-4Q").
	Profile string `yaml:"profile" json:"profile"`
	Count   int    `yaml:"count,omitempty" json:"count,omitempty"` // default 1
	// Mode is "mdev" (default) or "vendor-vfio" (NVIDIA vGPU 17+ on kernels >= 6.8: a VF with
	// nvidia/current_vgpu_type, attached as a PCI hostdev with managed='no').
	Mode string `yaml:"mode,omitempty" json:"mode,omitempty"`
	// UUIDs are existing mdev instances to use; default: a UUID derived from the VM name.
	UUIDs []string `yaml:"uuids,omitempty" json:"uuids,omitempty"`
	// VFs are vendor-VFIO VF addresses to use (offline render needs them).
	VFs []string `yaml:"vfs,omitempty" json:"vfs,omitempty"`
	// Display exposes the vGPU's display to the VM's graphics (mdev only), with ramfb for the
	// boot console.
	Display bool `yaml:"display,omitempty" json:"display,omitempty"`
	// RAMFB adds a boot framebuffer (firmware and early boot) to a vGPU display; default: on
	// when Display is. libvirt accepts it only with display on.
	RAMFB *bool `yaml:"ramfb,omitempty" json:"ramfb,omitempty"`
}

// VirtioGPU is a paravirtual GPU, optionally with virgl 3D.
type VirtioGPU struct {
	Virgl bool `yaml:"virgl,omitempty" json:"virgl,omitempty"`
	Heads int  `yaml:"heads,omitempty" json:"heads,omitempty"` // default 1
}

// Quirks are settings consumer NVIDIA cards needed with drivers older than 465.
type Quirks struct {
	KVMHidden      bool   `yaml:"kvmHidden,omitempty" json:"kvmHidden,omitempty"`
	HypervVendorID string `yaml:"hypervVendorId,omitempty" json:"hypervVendorId,omitempty"`
}

// Size is a byte count written with a unit: "32GiB", "512MiB", "1G" (binary, like libvirt),
// "500MB" (decimal). It keeps what was written so Validate can name a bad value.
type Size struct {
	Raw   string
	Bytes uint64
	err   error
	line  int
}

// ParseSize parses a size with a unit.
func ParseSize(s string) (Size, error) {
	sz := Size{Raw: s}
	sz.Bytes, sz.err = parseBytes(s)
	return sz, sz.err
}

// MustSize is ParseSize for constants; it panics on a bad size (tests and tables only).
func MustSize(s string) Size {
	sz, err := ParseSize(s)
	if err != nil {
		panic(err)
	}
	return sz
}

// IsZero reports whether the size was not given.
func (s Size) IsZero() bool { return s.Raw == "" }

// String returns the size as written.
func (s Size) String() string { return s.Raw }

// KiB returns the size in KiB, rounded up.
func (s Size) KiB() uint64 { return (s.Bytes + 1023) / 1024 }

// MarshalText implements encoding.TextMarshaler (JSON prints the size as written).
func (s Size) MarshalText() ([]byte, error) { return []byte(s.Raw), nil }

// MarshalYAML writes the size as written.
func (s Size) MarshalYAML() (any, error) { return s.Raw, nil }

// UnmarshalYAML keeps the raw scalar; a bad value is reported by Validate with its path.
func (s *Size) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want a size such as 32GiB, got a %s", n.Line, strictyaml.KindName(n.Kind))
	}
	*s = Size{Raw: n.Value, line: n.Line}
	s.Bytes, s.err = parseBytes(n.Value)
	return nil
}

var sizeRE = lazyRE(`^([0-9]+)\s*([A-Za-z]*)$`)

var sizeUnits = lazy.Value[map[string]uint64]{New: func() map[string]uint64 {
	return map[string]uint64{
		"b": 1,
		"k": 1 << 10, "kib": 1 << 10, "kb": 1000,
		"m": 1 << 20, "mib": 1 << 20, "mb": 1000 * 1000,
		"g": 1 << 30, "gib": 1 << 30, "gb": 1000 * 1000 * 1000,
		"t": 1 << 40, "tib": 1 << 40, "tb": 1000 * 1000 * 1000 * 1000,
	}
}}

func parseBytes(s string) (uint64, error) {
	m := sizeRE.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return 0, fmt.Errorf("size %q: want a non-negative number with a unit, e.g. 32GiB or 512MiB", s)
	}
	if m[2] == "" {
		return 0, fmt.Errorf("size %q: missing unit (B, KiB, MiB, GiB, TiB; K/M/G/T are binary, KB/MB/GB/TB decimal)", s)
	}
	unit, ok := sizeUnits.Get()[strings.ToLower(m[2])]
	if !ok {
		return 0, fmt.Errorf("size %q: unknown unit %q (use B, KiB, MiB, GiB or TiB)", s, m[2])
	}
	n, err := strconv.ParseUint(m[1], 10, 64)
	if err != nil || n > (1<<62)/unit {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	return n * unit, nil
}

// Load reads, parses and validates the spec file at path.
func Load(path string) (*VM, error) {
	b, err := host.ReadFileLimit(path, host.MaxSpecSize)
	if errors.Is(err, host.ErrInvalid) {
		return nil, fmt.Errorf("read spec: %w", err)
	}
	if err != nil {
		// The file named on the command line cannot be read (missing, too large, not
		// readable): a bad command line, exit 2, as for a layout file.
		return nil, fmt.Errorf("read spec: %w: %w", err, host.ErrInvalid)
	}
	return LoadData(path, b)
}

// LoadData is Load of spec content read from path, or sent under that name (the agent's):
// at most host.MaxSpecSize bytes, parsed strictly and validated, errors naming path.
func LoadData(path string, b []byte) (*VM, error) {
	if len(b) > host.MaxSpecSize {
		return nil, fmt.Errorf("read spec: %w: %w", host.TooLarge(path, host.MaxSpecSize), host.ErrInvalid)
	}
	vm, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := vm.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return vm, nil
}

// Parse decodes one YAML document strictly: unknown keys and wrong types are errors naming
// the line and the field. It does not validate values; call Validate (Load does both).
// Errors wrap host.ErrInvalid.
func Parse(data []byte) (*VM, error) {
	vm := &VM{}
	lines, err := strictyaml.Decode(data, "spec", Kind, vm)
	if err != nil {
		return nil, err
	}
	vm.lines = lines
	return vm, nil
}

// Line returns the YAML line of a field path ("spec.gpus[0].passthrough"), or 0.
func (vm *VM) Line(path string) int { return vm.lines[path] }
