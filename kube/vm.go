package kube

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/vgpu-host/vgpu-host/domains"
	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/mdev"
	"github.com/vgpu-host/vgpu-host/vgpu"
)

// The KubeVirt VirtualMachine `vgpu-host kubevirt vm` prints: only the fields it sets, with
// KubeVirt's JSON names (kubevirt.io/api core/v1). Tests decode it strictly into
// v1.VirtualMachine and compare every leaf after a round trip.

// VirtualMachine is a kubevirt.io/v1 VirtualMachine.
type VirtualMachine struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   ObjectMeta `json:"metadata"`
	Spec       VMSpec     `json:"spec"`
}

// ObjectMeta is the part of metav1.ObjectMeta used here.
type ObjectMeta struct {
	Name        string            `json:"name,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// VMSpec is v1.VirtualMachineSpec.
type VMSpec struct {
	RunStrategy         string               `json:"runStrategy"`
	DataVolumeTemplates []DataVolumeTemplate `json:"dataVolumeTemplates,omitempty"`
	Template            VMITemplate          `json:"template"`
}

// DataVolumeTemplate is v1.DataVolumeTemplateSpec: a CDI DataVolume the VM owns.
type DataVolumeTemplate struct {
	Metadata ObjectMeta     `json:"metadata"`
	Spec     DataVolumeSpec `json:"spec"`
}

// DataVolumeSpec is the part of cdi v1beta1.DataVolumeSpec used here.
type DataVolumeSpec struct {
	Source  *DataVolumeSource `json:"source,omitempty"`
	Storage *StorageSpec      `json:"storage,omitempty"`
}

// DataVolumeSource is an upload source: `virtctl image-upload` fills the volume.
type DataVolumeSource struct {
	Upload *struct{} `json:"upload,omitempty"`
}

// StorageSpec is cdi's StorageSpec.
type StorageSpec struct {
	Resources *ResourceRequirements `json:"resources,omitempty"`
}

// ResourceRequirements holds requests.
type ResourceRequirements struct {
	Requests map[string]string `json:"requests,omitempty"`
}

// VMITemplate is v1.VirtualMachineInstanceTemplateSpec.
type VMITemplate struct {
	Metadata ObjectMeta `json:"metadata"`
	Spec     VMISpec    `json:"spec"`
}

// VMISpec is v1.VirtualMachineInstanceSpec.
type VMISpec struct {
	Domain   DomainSpec `json:"domain"`
	Networks []Network  `json:"networks,omitempty"`
	Volumes  []Volume   `json:"volumes,omitempty"`
}

// DomainSpec is v1.DomainSpec.
type DomainSpec struct {
	CPU      *CPU      `json:"cpu,omitempty"`
	Memory   *Memory   `json:"memory,omitempty"`
	Machine  *Machine  `json:"machine,omitempty"`
	Firmware *Firmware `json:"firmware,omitempty"`
	Features *Features `json:"features,omitempty"`
	Devices  Devices   `json:"devices"`
}

// CPU is v1.CPU.
type CPU struct {
	Cores                 uint32 `json:"cores,omitempty"`
	Model                 string `json:"model,omitempty"`
	DedicatedCPUPlacement bool   `json:"dedicatedCpuPlacement,omitempty"`
	NUMA                  *NUMA  `json:"numa,omitempty"`
}

// NUMA is v1.NUMA.
type NUMA struct {
	GuestMappingPassthrough *struct{} `json:"guestMappingPassthrough,omitempty"`
}

// Memory is v1.Memory.
type Memory struct {
	Guest     string     `json:"guest,omitempty"`
	Hugepages *Hugepages `json:"hugepages,omitempty"`
}

// Hugepages is v1.Hugepages.
type Hugepages struct {
	PageSize string `json:"pageSize,omitempty"`
}

// Machine is v1.Machine.
type Machine struct {
	Type string `json:"type"`
}

// Firmware is v1.Firmware.
type Firmware struct {
	Bootloader *Bootloader `json:"bootloader,omitempty"`
}

// Bootloader is v1.Bootloader.
type Bootloader struct {
	BIOS *struct{} `json:"bios,omitempty"`
	EFI  *EFI      `json:"efi,omitempty"`
}

// EFI is v1.EFI.
type EFI struct {
	SecureBoot *bool `json:"secureBoot,omitempty"`
}

// Features is v1.Features.
type Features struct {
	SMM    *FeatureState `json:"smm,omitempty"`
	KVM    *FeatureKVM   `json:"kvm,omitempty"`
	Hyperv *Hyperv       `json:"hyperv,omitempty"`
}

// FeatureState is v1.FeatureState.
type FeatureState struct {
	Enabled *bool `json:"enabled,omitempty"`
}

// FeatureKVM is v1.FeatureKVM.
type FeatureKVM struct {
	Hidden bool `json:"hidden,omitempty"`
}

// Hyperv is v1.FeatureHyperv.
type Hyperv struct {
	VendorID *VendorID `json:"vendorid,omitempty"`
}

// VendorID is v1.FeatureVendorID.
type VendorID struct {
	Enabled  *bool  `json:"enabled,omitempty"`
	VendorID string `json:"vendorid,omitempty"`
}

// Devices is v1.Devices.
type Devices struct {
	AutoattachPodInterface   *bool        `json:"autoattachPodInterface,omitempty"`
	AutoattachGraphicsDevice *bool        `json:"autoattachGraphicsDevice,omitempty"`
	Disks                    []Disk       `json:"disks,omitempty"`
	Interfaces               []Interface  `json:"interfaces,omitempty"`
	GPUs                     []GPU        `json:"gpus,omitempty"`
	HostDevices              []HostDevice `json:"hostDevices,omitempty"`
	Video                    *Video       `json:"video,omitempty"`
}

// Disk is v1.Disk.
type Disk struct {
	Name  string      `json:"name"`
	Disk  *DiskTarget `json:"disk,omitempty"`
	CDRom *CDRom      `json:"cdrom,omitempty"`
}

// DiskTarget is v1.DiskTarget.
type DiskTarget struct {
	Bus      string `json:"bus,omitempty"`
	ReadOnly bool   `json:"readonly,omitempty"`
}

// CDRom is v1.CDRomTarget.
type CDRom struct {
	Bus      string `json:"bus,omitempty"`
	ReadOnly *bool  `json:"readonly,omitempty"`
}

// Interface is v1.Interface with the masquerade binding.
type Interface struct {
	Name       string    `json:"name"`
	Model      string    `json:"model,omitempty"`
	Masquerade *struct{} `json:"masquerade,omitempty"`
	MacAddress string    `json:"macAddress,omitempty"`
}

// GPU is v1.GPU.
type GPU struct {
	Name              string       `json:"name"`
	DeviceName        string       `json:"deviceName"`
	VirtualGPUOptions *VGPUOptions `json:"virtualGPUOptions,omitempty"`
}

// VGPUOptions is v1.VGPUOptions.
type VGPUOptions struct {
	Display *VGPUDisplay `json:"display,omitempty"`
}

// VGPUDisplay is v1.VGPUDisplayOptions.
type VGPUDisplay struct {
	Enabled *bool         `json:"enabled,omitempty"`
	RamFB   *FeatureState `json:"ramFB,omitempty"`
}

// HostDevice is v1.HostDevice.
type HostDevice struct {
	Name       string `json:"name"`
	DeviceName string `json:"deviceName"`
}

// Video is v1.VideoDevice.
type Video struct {
	Type string `json:"type,omitempty"`
}

// Network is v1.Network (the pod network).
type Network struct {
	Name string    `json:"name"`
	Pod  *struct{} `json:"pod,omitempty"`
}

// Volume is v1.Volume.
type Volume struct {
	Name             string            `json:"name"`
	ContainerDisk    *ContainerDisk    `json:"containerDisk,omitempty"`
	DataVolume       *DataVolumeRef    `json:"dataVolume,omitempty"`
	HostDisk         *HostDisk         `json:"hostDisk,omitempty"`
	EmptyDisk        *EmptyDisk        `json:"emptyDisk,omitempty"`
	PVC              *PVCSource        `json:"persistentVolumeClaim,omitempty"`
	CloudInitNoCloud *CloudInitNoCloud `json:"cloudInitNoCloud,omitempty"`
}

// EmptyDisk is v1.EmptyDiskSource: a blank disk of Capacity.
type EmptyDisk struct {
	Capacity string `json:"capacity"`
}

// PVCSource is v1.PersistentVolumeClaimVolumeSource.
type PVCSource struct {
	ClaimName string `json:"claimName"`
}

// ContainerDisk is v1.ContainerDiskSource.
type ContainerDisk struct {
	Image string `json:"image"`
}

// DataVolumeRef is v1.DataVolumeSource.
type DataVolumeRef struct {
	Name string `json:"name"`
}

// HostDisk is v1.HostDisk.
type HostDisk struct {
	Path string `json:"path"`
	Type string `json:"type"`
}

// CloudInitNoCloud is v1.CloudInitNoCloudSource.
type CloudInitNoCloud struct {
	UserData    string `json:"userData,omitempty"`
	NetworkData string `json:"networkData,omitempty"`
}

// Finding is one field of the vgpu-host spec that the KubeVirt manifest does not carry as
// written: dropped, approximated, or needing a step outside the manifest.
type Finding struct {
	Field  string `json:"field"` // spec path: "spec.gpus[0].virtioGpu.virgl"
	Value  string `json:"value,omitempty"`
	Reason string `json:"reason"`
}

// String is the finding as stderr shows it.
func (f Finding) String() string {
	if f.Value != "" {
		return fmt.Sprintf("%s (%s): %s", f.Field, f.Value, f.Reason)
	}
	return f.Field + ": " + f.Reason
}

// AnnotationUnsupported is the VM annotation that carries the findings as JSON, so the
// manifest itself says what it does not express.
const AnnotationUnsupported = "vgpu-host.io/unsupported"

// AnnotationDescription carries metadata.description.
const AnnotationDescription = "vgpu-host.io/description"

// TranslateOptions tune TranslateVM.
type TranslateOptions struct {
	// ContainerDisks maps a disk name to a container image reference: that disk becomes a
	// containerDisk instead of an uploaded DataVolume.
	ContainerDisks map[string]string
}

// Translation is a VirtualMachine and what it could not express.
type Translation struct {
	VM       VirtualMachine `json:"virtualMachine"`
	Findings []Finding      `json:"unsupported"`
}

// TranslateVM turns a validated vgpu-host spec into a KubeVirt VirtualMachine. GPUs become
// gpus[] entries whose deviceName is the resource vgpu-host's device plugin serves, matched in
// cat (use Offered: vGPU types need no instance yet) and, for passthrough selectors, against
// inv's devices. Every field KubeVirt cannot express is a Finding, also recorded in the
// AnnotationUnsupported annotation; nothing is dropped silently. A GPU selector that matches no
// resource is an error (host.ErrNotFound), unless its fallback is virtio-gpu.
func TranslateVM(vm *domains.VM, inv *host.Inventory, cat *Catalog, opts TranslateOptions) (*Translation, error) {
	t := &translator{vm: vm, inv: inv, cat: cat, opts: opts}
	if err := t.run(); err != nil {
		return nil, err
	}
	if len(t.findings) > 0 {
		b, err := json.Marshal(t.findings)
		if err != nil {
			return nil, err
		}
		if t.out.Metadata.Annotations == nil {
			t.out.Metadata.Annotations = map[string]string{}
		}
		t.out.Metadata.Annotations[AnnotationUnsupported] = string(b)
	}
	if t.findings == nil {
		t.findings = []Finding{}
	}
	return &Translation{VM: t.out, Findings: t.findings}, nil
}

type translator struct {
	vm       *domains.VM
	inv      *host.Inventory
	cat      *Catalog
	opts     TranslateOptions
	out      VirtualMachine
	findings []Finding
}

func (t *translator) unsupported(field, value, format string, a ...any) {
	t.findings = append(t.findings, Finding{Field: field, Value: value, Reason: fmt.Sprintf(format, a...)})
}

func ptr[T any](v T) *T { return &v }

func (t *translator) run() error {
	s := t.vm.Spec
	name := t.vm.Metadata.Name
	t.out = VirtualMachine{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachine", Metadata: ObjectMeta{Name: name}}
	if t.vm.Metadata.Description != "" {
		t.out.Metadata.Annotations = map[string]string{AnnotationDescription: t.vm.Metadata.Description}
	}
	t.out.Spec.RunStrategy = "Always"
	t.out.Spec.Template.Metadata.Labels = map[string]string{"kubevirt.io/vm": name}
	d := &t.out.Spec.Template.Spec.Domain
	t.cpuMemory(d)
	t.firmware(d)
	t.disks(d)
	t.unexpressed()
	t.network(d)
	t.graphics(d)
	if err := t.gpus(d); err != nil {
		return err
	}
	if s.Quirks.KVMHidden {
		t.features(d).KVM = &FeatureKVM{Hidden: true}
	}
	if s.Quirks.HypervVendorID != "" {
		t.features(d).Hyperv = &Hyperv{VendorID: &VendorID{Enabled: ptr(true), VendorID: s.Quirks.HypervVendorID}}
	}
	if s.MMIO64 != "" && s.MMIO64 != "auto" {
		t.unsupported("spec.mmio64", s.MMIO64, "KubeVirt has no setting for the guest's 64-bit MMIO window; OVMF sizes it from the guest's physical address bits")
	}
	return nil
}

func (t *translator) features(d *DomainSpec) *Features {
	if d.Features == nil {
		d.Features = &Features{}
	}
	return d.Features
}

// Quantity writes a byte count as a Kubernetes quantity in the largest binary unit that
// divides it ("64Gi", "512Mi"), or plain bytes.
func Quantity(b uint64) string {
	for _, u := range []struct {
		s string
		n uint64
	}{{"Ti", 1 << 40}, {"Gi", 1 << 30}, {"Mi", 1 << 20}, {"Ki", 1 << 10}} {
		if b >= u.n && b%u.n == 0 {
			return strconv.FormatUint(b/u.n, 10) + u.s
		}
	}
	return strconv.FormatUint(b, 10)
}

func (t *translator) cpuMemory(d *DomainSpec) {
	s := t.vm.Spec
	d.CPU = &CPU{Cores: uint32(s.VCPUs)}
	switch m := s.CPU.Model; m {
	case "", "host-passthrough":
		d.CPU.Model = "host-passthrough"
	case "maximum":
		t.unsupported("spec.cpu.model", m, "KubeVirt has no 'maximum' CPU model; the VM uses host-passthrough")
		d.CPU.Model = "host-passthrough"
	default:
		d.CPU.Model = m
	}
	d.Memory = &Memory{Guest: Quantity(s.Memory.Bytes)}
	if !s.Hugepages.IsZero() {
		d.Memory.Hugepages = &Hugepages{PageSize: Quantity(s.Hugepages.Bytes)}
	}
	if s.NUMA == "auto" {
		if s.Hugepages.IsZero() {
			t.unsupported("spec.numa", s.NUMA, "KubeVirt passes the host's NUMA topology through only with hugepages and dedicated CPUs; set spec.hugepages")
		} else {
			d.CPU.DedicatedCPUPlacement = true
			d.CPU.NUMA = &NUMA{GuestMappingPassthrough: &struct{}{}}
		}
	}
	switch m := s.Machine; {
	case m == "" || m == "q35":
		d.Machine = &Machine{Type: "q35"}
	case strings.HasPrefix(m, "pc-q35-"):
		d.Machine = &Machine{Type: m}
	default:
		t.unsupported("spec.machine", m, "KubeVirt runs q35 machines only on x86; the VM gets q35")
		d.Machine = &Machine{Type: "q35"}
	}
	if s.VirtType == "qemu" {
		t.unsupported("spec.virtType", s.VirtType, "KubeVirt picks KVM or emulation cluster-wide (spec.configuration.developerConfiguration.useEmulation), not per VM")
	}
}

func (t *translator) firmware(d *DomainSpec) {
	s := t.vm.Spec
	if s.Firmware == "bios" {
		d.Firmware = &Firmware{Bootloader: &Bootloader{BIOS: &struct{}{}}}
		return
	}
	// KubeVirt's EFI defaults to Secure Boot on; vgpu-host's to off: say it.
	d.Firmware = &Firmware{Bootloader: &Bootloader{EFI: &EFI{SecureBoot: ptr(s.SecureBoot)}}}
	if s.SecureBoot {
		t.features(d).SMM = &FeatureState{Enabled: ptr(true)}
	}
}

func diskName(dk domains.Disk, i int) string {
	if dk.Name != "" {
		return dk.Name
	}
	return "disk" + strconv.Itoa(i)
}

func (t *translator) disks(d *DomainSpec) {
	s := t.vm.Spec
	vs := &t.out.Spec.Template.Spec.Volumes
	for i, dk := range s.Disks {
		p := fmt.Sprintf("spec.disks[%d]", i)
		name := diskName(dk, i)
		disk := Disk{Name: name}
		bus := dk.Bus
		if dk.Device == "cdrom" {
			if bus == "" || bus == "virtio" {
				bus = "sata" // a virtio CD-ROM does not exist; KubeVirt's default is sata
			}
			disk.CDRom = &CDRom{Bus: bus, ReadOnly: ptr(true)}
		} else {
			disk.Disk = &DiskTarget{Bus: nonEmpty(bus, "virtio"), ReadOnly: dk.ReadOnly}
		}
		d.Devices.Disks = append(d.Devices.Disks, disk)
		if dk.Format != "" {
			t.unsupported(p+".format", dk.Format, "KubeVirt chooses the image format of its volumes")
		}
		switch {
		case t.opts.ContainerDisks[name] != "":
			*vs = append(*vs, Volume{Name: name, ContainerDisk: &ContainerDisk{Image: t.opts.ContainerDisks[name]}})
			if dk.Size.Bytes > 0 {
				t.unsupported(p+".size", dk.Size.Raw, "a containerDisk is as large as its image")
			}
		case dk.Image != "":
			dv := t.vm.Metadata.Name + "-" + name
			*vs = append(*vs, Volume{Name: name, DataVolume: &DataVolumeRef{Name: dv}})
			st := &StorageSpec{}
			if dk.Size.Bytes > 0 {
				st.Resources = &ResourceRequirements{Requests: map[string]string{"storage": Quantity(dk.Size.Bytes)}}
			} else {
				t.unsupported(p+".size", "", "a DataVolume needs a size; set spec.disks[%d].size", i)
			}
			t.out.Spec.DataVolumeTemplates = append(t.out.Spec.DataVolumeTemplates, DataVolumeTemplate{
				Metadata: ObjectMeta{Name: dv}, Spec: DataVolumeSpec{Source: &DataVolumeSource{Upload: &struct{}{}}, Storage: st}})
			t.unsupported(p+".image", dk.Image, "a host file is not a cluster volume: upload it with `virtctl image-upload dv %s --image-path=%s --no-create`, or pass --container-disk %s=IMAGE", dv, dk.Image, name)
			if dk.Overlay != "" {
				t.unsupported(p+".overlay", dk.Overlay, "KubeVirt stores the disk in the DataVolume %s, not in an overlay file", dv)
			}
		case dk.Blank:
			*vs = append(*vs, Volume{Name: name, EmptyDisk: &EmptyDisk{Capacity: Quantity(dk.Size.Bytes)}})
			t.unsupported(p+".blank", "true", "an emptyDisk is ephemeral in KubeVirt: it is blank at every start; for an install target use a DataVolume (blank source) instead")
		case dk.Volume != "":
			*vs = append(*vs, Volume{Name: name, PVC: &PVCSource{ClaimName: dk.Volume}})
			t.unsupported(p+".volume", dk.Volume, "a libvirt pool volume is not a cluster volume: the VM mounts a PersistentVolumeClaim named %s, which must hold the disk", dk.Volume)
		default:
			*vs = append(*vs, Volume{Name: name, HostDisk: &HostDisk{Path: dk.Path, Type: "Disk"}})
			t.unsupported(p+".path", dk.Path, "kept as a hostDisk, which needs KubeVirt's HostDisk feature gate and the file on the node the VM runs on")
		}
	}
	if ci := s.CloudInit; ci != nil {
		d.Devices.Disks = append(d.Devices.Disks, Disk{Name: "cloudinit", Disk: &DiskTarget{Bus: "virtio"}})
		*vs = append(*vs, Volume{Name: "cloudinit", CloudInitNoCloud: &CloudInitNoCloud{UserData: ci.UserData, NetworkData: ci.NetworkConfig}})
		if ci.MetaData != "" {
			t.unsupported("spec.cloudInit.metaData", "", "KubeVirt writes the NoCloud meta-data itself (instance-id, local-hostname from the VM name)")
		}
	}
}

func (t *translator) network(d *DomainSpec) {
	n := t.vm.Spec.Network
	if n.Type == "none" {
		d.Devices.AutoattachPodInterface = ptr(false)
		return
	}
	d.Devices.Interfaces = []Interface{{Name: "default", Model: n.Model, Masquerade: &struct{}{}, MacAddress: n.MAC}}
	t.out.Spec.Template.Spec.Networks = []Network{{Name: "default", Pod: &struct{}{}}}
	switch {
	case n.Type == "bridge" || n.Bridge != "":
		t.unsupported("spec.network.bridge", n.Bridge, "a host bridge is not a KubeVirt network; the VM gets the pod network (masquerade); use a Multus network for a bridge")
	case n.Network != "" && n.Network != "default":
		t.unsupported("spec.network.network", n.Network, "a libvirt network is not a KubeVirt network; the VM gets the pod network (masquerade)")
	}
}

func (t *translator) graphics(d *DomainSpec) {
	g := t.vm.Spec.Graphics
	switch g.Type {
	case "none":
		d.Devices.AutoattachGraphicsDevice = ptr(false)
	case "", "vnc":
	default:
		t.unsupported("spec.graphics.type", g.Type, "KubeVirt offers VNC only (virtctl vnc)")
	}
	if g.Listen != "" && g.Listen != "127.0.0.1" {
		t.unsupported("spec.graphics.listen", g.Listen, "KubeVirt serves VNC through its API (virtctl vnc), not on a host address")
	}
	if g.GL {
		t.unsupported("spec.graphics.gl", "true", "KubeVirt has no OpenGL display")
	}
	if g.RenderNode != "" {
		t.unsupported("spec.graphics.renderNode", g.RenderNode, "KubeVirt has no host render node for the display")
	}
}

// resourcesOf returns the names of the catalog's resources of kind k that match.
func (t *translator) resourcesOf(k ResourceKind, match func(r *Resource) bool) []string {
	var out []string
	if t.cat == nil {
		return nil
	}
	for i := range t.cat.Resources {
		r := &t.cat.Resources[i]
		if r.Kind == k && match(r) {
			out = append(out, r.Name)
		}
	}
	return out
}

func (t *translator) gpus(d *DomainSpec) error {
	n := 0
	for i, g := range t.vm.Spec.GPUs {
		p := fmt.Sprintf("spec.gpus[%d]", i)
		var names []string
		var count int
		var opts *VGPUOptions
		switch {
		case g.Passthrough != nil:
			names, count = t.passthrough(p+".passthrough", g.Passthrough), max(g.Passthrough.Count, 1)
		case g.VGPU != nil:
			names, count, opts = t.vgpu(p+".vgpu", g.VGPU), max(g.VGPU.Count, 1), t.vgpuDisplay(g.VGPU)
		case g.VirtioGPU != nil:
			t.virtio(d, p+".virtioGpu", *g.VirtioGPU)
			continue
		}
		if len(names) == 0 {
			if vgpu.Kind(g.Fallback) == vgpu.VirtioGPU {
				t.unsupported(p, "", "no device of this host matches; the VM gets the fallback, a 2D virtio-gpu (KubeVirt has no fallback of its own)")
				t.virtio(d, p, domains.VirtioGPU{})
				continue
			}
			err := fmt.Errorf("kubevirt vm %s: %s: no resource of this host's device plugin matches (vgpu-host inspect lists the devices; vgpu-host kubevirt config the resources): %w", t.vm.Metadata.Name, p, host.ErrNotFound)
			if g.Passthrough != nil && g.Passthrough.Model != "" && t.inv != nil {
				if hint := host.UnnamedGPUsHint(t.inv.Devices); hint != "" {
					err = fmt.Errorf("%w; %s", err, hint)
				}
			}
			return err
		}
		if len(names) > 1 {
			t.unsupported(p, strings.Join(names, ", "), "matches several resources; KubeVirt asks for one by name: the first is used")
		}
		if vgpu.Kind(g.Fallback) == vgpu.VirtioGPU {
			t.unsupported(p+".fallback", g.Fallback, "KubeVirt has no fallback: the VM waits until a device of %s is free", names[0])
		}
		for range count {
			d.Devices.GPUs = append(d.Devices.GPUs, GPU{Name: "gpu" + strconv.Itoa(n), DeviceName: names[0], VirtualGPUOptions: opts})
			n++
		}
	}
	return nil
}

func (t *translator) passthrough(p string, pt *domains.Passthrough) []string {
	match := func(dev *host.Device) bool {
		if pt.Address != "" {
			a, err := host.ParseAddress(pt.Address)
			return err == nil && a == dev.Address
		}
		return pt.Selects(dev)
	}
	companions := false
	names := t.resourcesOf(KindPCI, func(r *Resource) bool {
		for _, dv := range r.Devices {
			if dv.Address == nil || t.inv == nil {
				continue
			}
			for j := range t.inv.Devices {
				if hd := &t.inv.Devices[j]; hd.Address == *dv.Address && match(hd) {
					companions = companions || len(dv.Companions) > 0
					return true
				}
			}
		}
		return false
	})
	if len(names) == 0 {
		return nil
	}
	if pt.Address != "" {
		t.unsupported(p+".address", pt.Address, "KubeVirt allocates any device of %s; the address is not kept", names[0])
	}
	if companions && (pt.Companions == nil || *pt.Companions) {
		t.unsupported(p+".companions", "true", "the device plugin gives the companion functions' IOMMU groups to the pod, but KubeVirt attaches only the GPU function to the guest")
	}
	if pt.ROM != nil {
		t.unsupported(p+".rom", pt.ROM.Bar+pt.ROM.File, "KubeVirt has no option ROM setting for host devices")
	}
	if pt.Primary {
		t.unsupported(p+".primary", "true", "KubeVirt cannot make a host GPU the primary display; the emulated display is removed (autoattachGraphicsDevice: false) instead")
		t.out.Spec.Template.Spec.Domain.Devices.AutoattachGraphicsDevice = ptr(false)
	}
	return names
}

func (t *translator) vgpu(p string, v *domains.VGPU) []string {
	kind := vgpu.Mdev
	if vgpu.Kind(v.Mode) == vgpu.VendorVFIO {
		kind = vgpu.VendorVFIO
	}
	k, _ := ResourceKindOf(kind)
	names := t.resourcesOf(k, func(r *Resource) bool {
		return mdev.MatchType(mdev.Type{ID: r.TypeID, Name: r.Model}, v.Profile)
	})
	if len(v.UUIDs) > 0 {
		t.unsupported(p+".uuids", strings.Join(v.UUIDs, ","), "KubeVirt allocates any instance of the type; the UUIDs are not kept")
	}
	if len(v.VFs) > 0 {
		t.unsupported(p+".vfs", strings.Join(v.VFs, ","), "KubeVirt allocates any VF of the type; the addresses are not kept")
	}
	return names
}

func (t *translator) vgpuDisplay(v *domains.VGPU) *VGPUOptions {
	if vgpu.Kind(v.Mode) == vgpu.VendorVFIO {
		return nil
	}
	disp := &VGPUDisplay{Enabled: ptr(v.Display)}
	if v.Display {
		ramfb := v.RAMFB == nil || *v.RAMFB
		disp.RamFB = &FeatureState{Enabled: ptr(ramfb)}
	}
	return &VGPUOptions{Display: disp}
}

func (t *translator) virtio(d *DomainSpec, p string, v domains.VirtioGPU) {
	if v.Virgl {
		t.unsupported(p+".virgl", "true", "KubeVirt has no virgl (3D virtio-gpu); the VM gets a 2D virtio-gpu")
	}
	if v.Heads > 1 {
		t.unsupported(p+".heads", strconv.Itoa(v.Heads), "KubeVirt's video device has one head")
	}
	if d.Devices.Video != nil {
		t.unsupported(p, "", "KubeVirt has one video device; this one is dropped")
		return
	}
	d.Devices.Video = &Video{Type: "virtio"}
}

// unexpressed reports the spec's keys this translation does not carry over (the Windows and
// workstation features of the spec, issue 18): each a finding, never silently dropped.
func (t *translator) unexpressed() {
	s := t.vm.Spec
	if s.OS != "" {
		t.unsupported("spec.os", s.OS, "not translated: set the domain's tpm, firmware (efi secureBoot, smm), features.hyperv and clock by hand, or use KubeVirt's windows preference")
	}
	if s.TPM != nil && *s.TPM {
		t.unsupported("spec.tpm", "true", "not translated: add spec.template.spec.domain.devices.tpm")
	}
	if s.VirtioWin != "" {
		t.unsupported("spec.virtioWin", s.VirtioWin, "a host ISO is not a cluster volume: attach the virtio-win containerDisk instead")
	}
	if len(s.Boot) > 0 {
		t.unsupported("spec.boot", strings.Join(s.Boot, ","), "not translated: set bootOrder on the disks")
	}
	if s.CPU.Topology != nil {
		t.unsupported("spec.cpu.topology", "", "not translated: KubeVirt takes sockets/cores/threads in domain.cpu; vcpus became cores")
	}
	if s.CPU.Pin != nil {
		t.unsupported("spec.cpu.pin", "", "KubeVirt pins with dedicatedCpuPlacement (the kubelet's CPU manager), not a host CPU list")
	}
	dv := s.Devices
	for i, e := range dv.Evdev {
		t.unsupported(fmt.Sprintf("spec.devices.evdev[%d]", i), e.Path, "KubeVirt has no evdev input passthrough")
	}
	if dv.LookingGlass != nil {
		t.unsupported("spec.devices.lookingGlass", dv.LookingGlass.Resolution, "KubeVirt has no ivshmem device")
	}
	for i := range dv.NICs {
		t.unsupported(fmt.Sprintf("spec.devices.nics[%d]", i), "", "not translated: add a Multus network and interface")
	}
	if dv.USBController != "" {
		t.unsupported("spec.devices.usbController", dv.USBController, "KubeVirt chooses the USB controller")
	}
	if dv.Sound != "" {
		t.unsupported("spec.devices.sound", dv.Sound, "set devices.sound by hand")
	}
}
