package kube

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/ledger"
	"github.com/vgpu-host/vgpu-host/vgpu"
)

// ResourceKind is how KubeVirt attaches a resource's devices: by PCI address, as a
// vendor-VFIO VF, or by mdev UUID. It is coarser than vgpu.Kind, which names what a guest
// gets: a whole GPU and a plain SR-IOV VF are both pci resources, and a MIG-backed vendor-VFIO
// VF is a vendor-vfio one. ResourceKindOf maps a vgpu.Kind to it. Its string is the "kind" of
// the catalog's JSON and of the DRA driver's device attribute.
type ResourceKind string

const (
	// KindPCI is a whole PCI GPU on vfio-pci, or a plain SR-IOV VF of one: KubeVirt reads its
	// addresses from PCI_RESOURCE_<NAME>.
	KindPCI ResourceKind = "pci"
	// KindVendorVFIO is an NVIDIA vendor-specific VFIO VF (vGPU 17+) with a vGPU type set: a
	// PCI device to KubeVirt (PCI_RESOURCE_<NAME>), one resource per vGPU type.
	KindVendorVFIO ResourceKind = "vendor-vfio"
	// KindMdev is a mediated-device instance: KubeVirt reads its UUIDs from
	// MDEV_PCI_RESOURCE_<NAME>, one resource per mdev type.
	KindMdev ResourceKind = "mdev"
)

// ResourceKindOf returns the kind of resource through which a pod's guest gets a GPU of kind
// k: pci for a whole GPU or a plain SR-IOV VF, vendor-vfio for a vendor-VFIO VF (MIG-backed or
// not), mdev for an mdev instance. A virtio-gpu needs no resource (KubeVirt emulates it), nor
// does a kind this function does not know: false.
func ResourceKindOf(k vgpu.Kind) (ResourceKind, bool) {
	switch k {
	case vgpu.Passthrough, vgpu.SRIOVVF:
		return KindPCI, true
	case vgpu.VendorVFIO, vgpu.MIGVendorVFIO:
		return KindVendorVFIO, true
	case vgpu.Mdev:
		return KindMdev, true
	}
	return "", false
}

// Catalog is every resource a node offers, built from one inventory.
type Catalog struct {
	Resources []Resource `json:"resources"`
}

// Resource is one extended resource of the node: a GPU model or a vGPU type.
type Resource struct {
	// Name is the resource name ("nvidia.com/GA100_A100_PCIE_80GB", "nvidia.com/GRID_A100-4C").
	Name string       `json:"name"`
	Kind ResourceKind `json:"kind"`
	// Selector is what KubeVirt's permittedHostDevices matches: "VENDOR:DEVICE" in upper-case
	// hex (pciVendorSelector) for pci and vendor-vfio, the mdev type's name (mdevNameSelector)
	// for mdev.
	Selector string `json:"selector"`
	// Model is the pci.ids device name, or the vGPU type's name.
	Model string `json:"model"`
	// TypeID is the mdev type id ("nvidia-471") or vendor-VFIO type number ("1160").
	TypeID  string   `json:"type_id,omitempty"`
	Devices []Device `json:"devices"`
}

// Device is one allocatable unit of a resource.
type Device struct {
	// ID is the device-plugin ID: the PCI address of a GPU or VF, or an mdev UUID.
	ID string `json:"id"`
	// Address is the PCI function KubeVirt attaches (pci, vendor-vfio).
	Address *host.Address `json:"address,omitempty"`
	// Companions are the other functions of the GPU's slot or group (HDMI audio, USB-C): they
	// go to the pod with the GPU (their /dev/vfio groups), so no other pod can take them.
	Companions []host.Address `json:"companions,omitempty"`
	// Groups are the IOMMU groups the pod needs (/dev/vfio/N): the device's and its companions'.
	Groups []int `json:"iommu_groups"`
	// NUMA is the device's NUMA node, -1 when the platform reports none.
	NUMA int `json:"numa_node"`
	// Parent is the mdev parent or the VF's physical function ("" for a whole GPU).
	Parent  string `json:"parent,omitempty"`
	Healthy bool   `json:"healthy"`
	// Reason says why the device is not healthy.
	Reason string `json:"reason,omitempty"`
}

// Healthy returns how many of r's devices are healthy.
func (r Resource) Healthy() int {
	n := 0
	for _, d := range r.Devices {
		if d.Healthy {
			n++
		}
	}
	return n
}

// EnvVar returns the variable KubeVirt reads r's allocated devices from.
func (r Resource) EnvVar() string {
	if r.Kind == KindMdev {
		return EnvVar(MdevResourcePrefix, r.Name)
	}
	return EnvVar(PCIResourcePrefix, r.Name)
}

// Resource returns the resource named name.
func (c *Catalog) Resource(name string) (*Resource, bool) {
	for i := range c.Resources {
		if c.Resources[i].Name == name {
			return &c.Resources[i], true
		}
	}
	return nil, false
}

// Build lists the resources of inv:
//
//   - every GPU (display class, not an EmulatedDisplay) that is not the boot VGA, not an mdev
//     parent and not running vendor-VFIO VFs, by model: healthy when it is on vfio-pci and its IOMMU group is viable;
//     on a host driver it is listed but unhealthy, so binding it with `vgpu-host bind` makes
//     it allocatable without restarting anything;
//   - every SR-IOV VF of a GPU on vfio-pci without a vendor vGPU type, by model;
//   - every vendor-VFIO VF with a vGPU type set, by type;
//   - every mdev instance of a real GPU (gpuParent), by type.
//
// With cfg.IncludeEmulated, emulated display devices and mdevs of any parent are listed too.
//
// VFs without a vGPU type and free mdev capacity are not devices: vgpu-host owns the layout
// (`vgpu-host mdev create`), and a device plugin cannot create instances on demand.
func Build(inv *host.Inventory, cfg Config) *Catalog {
	b := builder{inv: inv, cfg: cfg, byAddr: map[host.Address]*host.Device{}, groups: map[int]*host.Group{},
		res: map[string]*Resource{}, parents: map[string]bool{}}
	for i := range inv.Devices {
		b.byAddr[inv.Devices[i].Address] = &inv.Devices[i]
	}
	for i := range inv.Groups {
		b.groups[inv.Groups[i].ID] = &inv.Groups[i]
	}
	for _, p := range inv.MdevParents {
		b.parents[p.Parent] = true
	}
	for i := range inv.Devices {
		d := &inv.Devices[i]
		switch {
		case d.VendorVGPU != nil:
			b.vendorVF(d)
		case d.PhysFn != nil:
			if d.Driver == "vfio-pci" && b.gpuVF(d) {
				b.pci(d)
			}
		case d.IsGPU && !d.BootVGA && !b.parents[d.Address.String()] && !b.vendorPF(d) && (cfg.IncludeEmulated || !EmulatedDisplay(d)):
			b.pci(d)
		}
	}
	for _, g := range inv.Groups {
		for _, m := range g.Mdevs {
			if cfg.IncludeEmulated || b.gpuParent(m.Parent) {
				b.mdev(g.ID, m)
			}
		}
	}
	c := &Catalog{Resources: []Resource{}}
	for _, r := range b.res {
		sort.Slice(r.Devices, func(i, j int) bool { return r.Devices[i].ID < r.Devices[j].ID })
		c.Resources = append(c.Resources, *r)
	}
	sort.Slice(c.Resources, func(i, j int) bool { return c.Resources[i].Name < c.Resources[j].Name })
	return c
}

type builder struct {
	inv     *host.Inventory
	cfg     Config
	byAddr  map[host.Address]*host.Device
	groups  map[int]*host.Group
	parents map[string]bool
	res     map[string]*Resource
}

// add puts dev into the resource name, creating it from r the first time.
func (b *builder) add(r Resource, dev Device) {
	if x, ok := b.res[r.Name]; ok {
		if !strings.Contains(x.Selector, r.Selector) {
			// Two device ids with one pci.ids name share the resource; KubeVirt gets one
			// permittedHostDevices entry per selector (PermittedHostDevices splits on ",").
			x.Selector += "," + r.Selector
		}
		x.Devices = append(x.Devices, dev)
		return
	}
	r.Devices = []Device{dev}
	b.res[r.Name] = &r
}

// EmulatedDisplay reports whether d is a display device that hypervisors emulate rather than a
// GPU: QEMU's standard VGA (bochs, 1234:1111), virtio-gpu (1af4:1050), QXL (1b36:0100), Cirrus
// (1013:00b8) and VMware SVGA II (15ad:0405). They have display class 0x03 like a GPU, and show
// up on nested and cloud hosts; unless Config.IncludeEmulated, they are no resources (handing
// one to a VM gives it nothing a GPU resource promises).
func EmulatedDisplay(d *host.Device) bool {
	switch strings.ToLower(d.VendorID + ":" + d.DeviceID) {
	case "1234:1111", "1af4:1050", "1b36:0100", "1013:00b8", "15ad:0405":
		return true
	}
	return false
}

// gpuParent reports whether the mdev parent named parent is a real GPU: a PCI function of
// display class that is not EmulatedDisplay (NVIDIA vGPU, Intel GVT-g). Virtual parents (the
// kernel's mbochs, mdpy and mtty samples) and mdev parents of other classes are not.
func (b *builder) gpuParent(parent string) bool {
	for _, p := range b.inv.MdevParents {
		if p.Parent == parent && p.Address != nil {
			d, ok := b.byAddr[*p.Address]
			return ok && d.IsGPU && !EmulatedDisplay(d)
		}
	}
	return false
}

// gpuVF reports whether a VF belongs to a GPU the inventory lists.
func (b *builder) gpuVF(d *host.Device) bool {
	pf, ok := b.byAddr[*d.PhysFn]
	return ok && pf.IsGPU
}

// vendorPF reports whether d has VFs that use NVIDIA's vendor-specific VFIO interface: such a
// GPU is shared through its VFs, not passed through whole.
func (b *builder) vendorPF(d *host.Device) bool {
	if d.SRIOV == nil {
		return false
	}
	for _, vf := range d.SRIOV.VFs {
		if v, ok := b.byAddr[vf]; ok && v.VendorVGPU != nil {
			return true
		}
	}
	return false
}

func selector(d *host.Device) string {
	return strings.ToUpper(d.VendorID + ":" + d.DeviceID)
}

// pci adds a whole GPU or plain VF.
func (b *builder) pci(d *host.Device) {
	name := b.cfg.pciResource(d)
	a := d.Address
	dev := Device{ID: a.String(), Address: &a, NUMA: d.NUMANode, Groups: []int{d.IOMMUGroup}, Healthy: true}
	if d.PhysFn != nil {
		dev.Parent = d.PhysFn.String()
	}
	for _, c := range d.Companions {
		dev.Companions = append(dev.Companions, c)
		if cd, ok := b.byAddr[c]; ok && !containsInt(dev.Groups, cd.IOMMUGroup) {
			dev.Groups = append(dev.Groups, cd.IOMMUGroup)
		}
	}
	sort.Ints(dev.Groups)
	dev.Healthy, dev.Reason = b.pciHealth(d, dev.Groups)
	b.add(Resource{Name: name, Kind: KindPCI, Selector: selector(d), Model: d.DeviceName}, dev)
}

// pciHealth says whether a passthrough device can be given to a pod now: on vfio-pci, in an
// IOMMU group (or groups, with companions) that is viable.
func (b *builder) pciHealth(d *host.Device, groups []int) (bool, string) {
	if d.IOMMUGroup < 0 {
		return false, "no IOMMU group (is the IOMMU on?)"
	}
	if d.Driver != "vfio-pci" {
		drv := d.Driver
		if drv == "" {
			drv = "no driver"
		}
		return false, fmt.Sprintf("on %s, not vfio-pci (vgpu-host bind %s)", drv, d.Address)
	}
	for _, id := range groups {
		g, ok := b.groups[id]
		if !ok {
			return false, fmt.Sprintf("IOMMU group %d is gone", id)
		}
		if !g.Viable {
			var bl []string
			for _, x := range g.Blockers {
				bl = append(bl, fmt.Sprintf("%s on %s", x.Address, nonEmpty(x.Driver, "no driver")))
			}
			return false, fmt.Sprintf("IOMMU group %d not viable: %s", id, strings.Join(bl, ", "))
		}
	}
	return true, ""
}

// vendorVF adds a vendor-VFIO VF that has a vGPU type.
func (b *builder) vendorVF(d *host.Device) {
	cur := d.VendorVGPU.CurrentType
	if cur == 0 {
		return
	}
	id := strconv.Itoa(cur)
	tname := nonEmpty(b.vendorTypeName(cur), b.cfg.recordedTypeName(cur))
	name := b.cfg.vendorTypeResource(d.VendorID, tname, cur)
	a := d.Address
	dev := Device{ID: a.String(), Address: &a, NUMA: d.NUMANode, Groups: []int{d.IOMMUGroup}, Healthy: true}
	if d.PhysFn != nil {
		dev.Parent = d.PhysFn.String()
		if pf, ok := b.byAddr[*d.PhysFn]; ok && dev.NUMA < 0 {
			dev.NUMA = pf.NUMANode
		}
	}
	if d.IOMMUGroup < 0 {
		dev.Healthy, dev.Reason = false, "no IOMMU group"
	}
	b.add(Resource{Name: name, Kind: KindVendorVFIO, Selector: selector(d), Model: tname, TypeID: id}, dev)
}

// vendorTypeName finds a vendor vGPU type's name in any VF's creatable list (the list of a VF
// that runs the type no longer shows it once the GPU is full).
func (b *builder) vendorTypeName(id int) string {
	for _, d := range b.inv.Devices {
		if d.VendorVGPU == nil {
			continue
		}
		for _, t := range d.VendorVGPU.Creatable {
			if t.ID == id {
				return t.Name
			}
		}
	}
	return ""
}

// mdev adds an mdev instance.
func (b *builder) mdev(group int, m host.GroupMdev) {
	tname, vendor, numa := "", "", -1
	for _, p := range b.inv.MdevParents {
		if p.Parent != m.Parent {
			continue
		}
		for _, t := range p.Types {
			if t.ID == m.Type {
				tname = t.Name
			}
		}
		if p.Address != nil {
			if pd, ok := b.byAddr[*p.Address]; ok {
				vendor, numa = pd.VendorID, pd.NUMANode
			}
		}
	}
	name := b.cfg.typeResource(vendor, tname, m.Type)
	// An instance that exists is healthy: the kernel gives it a group of its own, and the
	// driver (vfio_mdev, or the parent's own since 5.16) binds when QEMU opens it. Removed,
	// it is gone from the inventory and the plugin reports it unhealthy.
	dev := Device{ID: m.UUID, NUMA: numa, Groups: []int{group}, Parent: m.Parent, Healthy: true}
	b.add(Resource{Name: name, Kind: KindMdev, Selector: nonEmpty(tname, m.Type), Model: tname, TypeID: m.Type}, dev)
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func nonEmpty(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// Offered is Build plus every vGPU type the host offers but has no instance of yet (mdev types
// of every parent, vendor-VFIO types creatable on some VF), as resources without devices: what
// KubeVirt must permit so that instances created later need no new patch.
func Offered(inv *host.Inventory, cfg Config) *Catalog {
	c := Build(inv, cfg)
	have := map[string]bool{}
	for _, r := range c.Resources {
		have[r.Name] = true
	}
	addEmpty := func(r Resource) {
		if !have[r.Name] {
			have[r.Name] = true
			r.Devices = []Device{}
			c.Resources = append(c.Resources, r)
		}
	}
	gpu := builder{inv: inv, byAddr: map[host.Address]*host.Device{}}
	for i := range inv.Devices {
		gpu.byAddr[inv.Devices[i].Address] = &inv.Devices[i]
	}
	for _, p := range inv.MdevParents {
		if !cfg.IncludeEmulated && !gpu.gpuParent(p.Parent) {
			continue
		}
		vendor := ""
		for _, d := range inv.Devices {
			if p.Address != nil && d.Address == *p.Address {
				vendor = d.VendorID
			}
		}
		for _, t := range p.Types {
			addEmpty(Resource{Name: cfg.typeResource(vendor, t.Name, t.ID), Kind: KindMdev, Selector: nonEmpty(t.Name, t.ID), Model: t.Name, TypeID: t.ID})
		}
	}
	for i := range inv.Devices {
		d := &inv.Devices[i]
		if d.VendorVGPU == nil {
			continue
		}
		for _, t := range d.VendorVGPU.Creatable {
			id := strconv.Itoa(t.ID)
			addEmpty(Resource{Name: cfg.vendorTypeResource(d.VendorID, t.Name, t.ID), Kind: KindVendorVFIO, Selector: selector(d), Model: t.Name, TypeID: id})
		}
	}
	sort.Slice(c.Resources, func(i, j int) bool { return c.Resources[i].Name < c.Resources[j].Name })
	return c
}

// MarkHeld marks unhealthy every device that a VM of `vgpu-host apply` holds on this host
// (holder is ledger.Book.Holder: the VM holding a claim, or ""), so the kubelet never hands a
// pod a GPU, companion, VF or mdev instance that vgpu-host gave to a libvirt VM.
func (c *Catalog) MarkHeld(holder func(ledger.Claim) string) {
	for i := range c.Resources {
		r := &c.Resources[i]
		for j := range r.Devices {
			d := &r.Devices[j]
			var claims []ledger.Claim
			switch r.Kind {
			case KindPCI:
				claims = append(claims, ledger.Claim{Kind: ledger.KindPCI, ID: d.ID})
				for _, a := range d.Companions {
					claims = append(claims, ledger.Claim{Kind: ledger.KindPCI, ID: a.String()})
				}
			case KindVendorVFIO:
				claims = append(claims, ledger.Claim{Kind: ledger.KindVendorVGPU, ID: d.ID})
			case KindMdev:
				claims = append(claims, ledger.Claim{Kind: ledger.KindMdev, ID: strings.ToLower(d.ID)})
			}
			for _, cl := range claims {
				if vm := holder(cl); vm != "" {
					d.Healthy, d.Reason = false, fmt.Sprintf("%s is held by VM %s (vgpu-host apply; vgpu-host destroy %s frees it)", cl.ID, vm, vm)
					break
				}
			}
		}
	}
}

// MarkHeldFromLedger applies MarkHeld with the allocation ledger under root.
func (c *Catalog) MarkHeldFromLedger(root host.Root) error {
	// The claims index answers Holder: no VM file is read.
	err := ledger.Open(root).View(func(book *ledger.Book) error { c.MarkHeld(book.Holder); return nil })
	if err != nil {
		return fmt.Errorf("devices held by vgpu-host's VMs: %w", err)
	}
	return nil
}
