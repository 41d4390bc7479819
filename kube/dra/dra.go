// Package dra is vgpu-host's Dynamic Resource Allocation driver (resource.k8s.io/v1), built on
// k8s.io/dynamic-resource-allocation's kubeletplugin helper: it publishes the node's GPUs and
// vGPUs as ResourceSlice devices with attributes (model, NUMA node, PCI address, vGPU type, the
// device plugin's resource name) and prepares allocated claims by writing a CDI spec with the
// VFIO device nodes of each device's IOMMU groups. It reads the host only through the inventory
// and never changes it: preparing and unpreparing a claim touches only the CDI file.
//
// Like kube/deviceplugin it links Kubernetes packages, so only the helper vgpu-host-kube
// imports it.
package dra

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/internal/lazy"
	"github.com/vgpu-host/vgpu-host/kube"
	"github.com/vgpu-host/vgpu-host/ops"
)

// DriverName is the DRA driver's name (the "driver" of its DeviceClass selectors).
const DriverName = "gpu.vgpu-host.io"

// Attribute names (qualified by the driver name when a DeviceClass selects on them:
// device.attributes["gpu.vgpu-host.io"].model).
const (
	AttrKind     = "kind"         // "pci", "vendor-vfio", "mdev"
	AttrResource = "resourceName" // the device plugin's resource name
	AttrModel    = "model"        // pci.ids device name or vGPU type name
	AttrType     = "vgpuType"     // mdev type id or vendor-VFIO type number
	AttrNUMA     = "numaNode"
	AttrParent   = "parent" // mdev parent or VF's physical function
	AttrMdevUUID = "mdevUUID"
	// CapMemory is the framebuffer of a vGPU type whose description states it.
	CapMemory = "memory"
)

// CDIKind is the CDI kind of the devices the driver prepares.
const CDIKind = "vgpu-host.io/gpu"

// Driver implements kubeletplugin.DRAPlugin over the host's inventory.
type Driver struct {
	Root   host.Root
	Config kube.Config
	// CDIDir is where claim CDI specs are written (kubeletplugin.DefaultCDIDir, /var/run/cdi).
	CDIDir string

	mu  sync.Mutex
	cat *kube.Catalog
	inv *host.Inventory
}

// Scan re-reads the host and returns the devices to publish.
func (d *Driver) Scan() ([]resourceapi.Device, error) { return d.scan(context.Background()) }

// scan is Scan under ctx. The inventory comes from the typed operation the CLI's inspect and
// the agent's GET /v1/inventory run (ops.Inventory, the host alone: the catalog reads health
// and quarantine records itself).
func (d *Driver) scan(ctx context.Context) ([]resourceapi.Device, error) {
	res, err := ops.Inventory(ctx, ops.Env{Root: d.Root}, ops.InventoryRequest{HostOnly: true})
	if err != nil {
		return nil, fmt.Errorf("dra: %w", err)
	}
	inv := res.Inventory.Inventory
	cfg, err := d.Config.WithRecorded(d.Root)
	if err != nil {
		d.HandleError(ctx, err, "scan")
	}
	cat := kube.Build(inv, cfg)
	if err := cat.RecordNames(d.Root, cfg); err != nil {
		d.HandleError(ctx, err, "scan")
	}
	cat.MarkDeviceNodes(d.Root)
	if err := cat.MarkHeldFromLedger(d.Root); err != nil {
		d.HandleError(ctx, err, "scan")
	}
	d.mu.Lock()
	d.cat, d.inv = cat, inv
	d.mu.Unlock()
	return Devices(inv, cat), nil
}

// nonLabel and framebufferRE compile on first use, not at every start (archtest: TestNoCompileAtInit).
var nonLabel = lazy.Regexp{Expr: `[^a-z0-9-]+`}

// DeviceName is a device's name in a ResourceSlice (a DNS label): the kind and its ID,
// "pci-0000-41-00-0", "mdev-0c6ed5e3-0b80-4f4c-9a8c-1c0a8a2f7d11".
func DeviceName(r kube.Resource, dev kube.Device) string {
	prefix := "pci"
	if r.Kind == kube.KindMdev {
		prefix = "mdev"
	} else if r.Kind == kube.KindVendorVFIO {
		prefix = "vf"
	}
	return prefix + "-" + strings.Trim(nonLabel.Get().ReplaceAllString(strings.ToLower(dev.ID), "-"), "-")
}

var framebufferRE = lazy.Regexp{Expr: `framebuffer=(\d+)M`}

// Devices lists the healthy devices of cat as ResourceSlice devices, sorted by name.
func Devices(inv *host.Inventory, cat *kube.Catalog) []resourceapi.Device {
	fb := map[string]int64{} // mdev type id → framebuffer MiB, from its description
	for _, p := range inv.MdevParents {
		for _, t := range p.Types {
			if m := framebufferRE.Get().FindStringSubmatch(t.Description); m != nil {
				n, _ := strconv.ParseInt(m[1], 10, 64)
				fb[t.ID] = n
			}
		}
	}
	str := func(s string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{StringValue: &s} }
	var out []resourceapi.Device
	for _, r := range cat.Resources {
		for _, dev := range r.Devices {
			if !dev.Healthy {
				continue
			}
			attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				AttrKind:     str(string(r.Kind)),
				AttrResource: str(r.Name),
			}
			if r.Model != "" {
				attrs[AttrModel] = str(r.Model)
			}
			if r.TypeID != "" {
				attrs[AttrType] = str(r.TypeID)
			}
			if dev.NUMA >= 0 {
				n := int64(dev.NUMA)
				attrs[AttrNUMA] = resourceapi.DeviceAttribute{IntValue: &n}
			}
			if dev.Parent != "" {
				attrs[AttrParent] = str(dev.Parent)
			}
			if dev.Address != nil {
				attrs[deviceattribute.StandardDeviceAttributePCIBusID] = str(dev.Address.String())
			}
			var capacity map[resourceapi.QualifiedName]resourceapi.DeviceCapacity
			if r.Kind == kube.KindMdev {
				attrs[AttrMdevUUID] = str(dev.ID)
				if mib, ok := fb[r.TypeID]; ok {
					capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
						CapMemory: {Value: *apiresource.NewQuantity(mib<<20, apiresource.BinarySI)}}
				}
			}
			out = append(out, resourceapi.Device{Name: DeviceName(r, dev), Attributes: attrs, Capacity: capacity})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Resources is what the driver publishes for node: one pool named after the node.
func Resources(node string, devices []resourceapi.Device) resourceslice.DriverResources {
	return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		node: {Slices: []resourceslice.Slice{{Devices: devices}}},
	}}
}

// find returns the resource and device named name in the last scan.
func (d *Driver) find(name string) (kube.Resource, kube.Device, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cat == nil {
		return kube.Resource{}, kube.Device{}, false
	}
	for _, r := range d.cat.Resources {
		for _, dev := range r.Devices {
			if DeviceName(r, dev) == name {
				return r, dev, true
			}
		}
	}
	return kube.Resource{}, kube.Device{}, false
}

// cdiSpec is the part of a CDI spec (cdiVersion 0.6.0) the driver writes.
type cdiSpec struct {
	Version string      `json:"cdiVersion"`
	Kind    string      `json:"kind"`
	Devices []cdiDevice `json:"devices"`
}

type cdiDevice struct {
	Name           string   `json:"name"`
	ContainerEdits cdiEdits `json:"containerEdits"`
}

type cdiEdits struct {
	Env         []string  `json:"env,omitempty"`
	DeviceNodes []cdiNode `json:"deviceNodes,omitempty"`
}

type cdiNode struct {
	Path        string `json:"path"`
	Permissions string `json:"permissions,omitempty"`
}

// SpecPath is the CDI spec file of a claim.
func (d *Driver) SpecPath(uid types.UID) string {
	return filepath.Join(d.CDIDir, "vgpu-host.io-gpu_"+string(uid)+".json")
}

// PrepareResourceClaims writes one CDI spec per claim with a CDI device per allocated device of
// this driver: the VFIO container and group nodes of its IOMMU groups (companions' included)
// and the variable KubeVirt's device-plugin contract uses (PCI_RESOURCE_<NAME>,
// MDEV_PCI_RESOURCE_<NAME>). Nothing on the host changes. A device that is unknown or no longer
// healthy fails that claim (the kubelet retries).
func (d *Driver) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := map[types.UID]kubeletplugin.PrepareResult{}
	for _, c := range claims {
		out[c.UID] = d.prepare(c)
	}
	return out, nil
}

func (d *Driver) prepare(c *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
	if c.Status.Allocation == nil {
		return kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s/%s is not allocated", c.Namespace, c.Name)}
	}
	spec := cdiSpec{Version: "0.6.0", Kind: CDIKind}
	var res kubeletplugin.PrepareResult
	for _, a := range c.Status.Allocation.Devices.Results {
		if a.Driver != DriverName {
			continue
		}
		r, dev, ok := d.find(a.Device)
		if !ok {
			return kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s/%s: device %s: %w", c.Namespace, c.Name, a.Device, host.ErrNotFound)}
		}
		if !dev.Healthy {
			return kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s/%s: device %s is unhealthy: %s: %w", c.Namespace, c.Name, a.Device, dev.Reason, host.ErrBusy)}
		}
		name := string(c.UID) + "-" + a.Device
		edits := cdiEdits{Env: []string{r.EnvVar() + "=" + dev.ID}, DeviceNodes: []cdiNode{{Path: "/dev/vfio/vfio", Permissions: "rw"}}}
		for _, g := range dev.Groups {
			edits.DeviceNodes = append(edits.DeviceNodes, cdiNode{Path: "/dev/vfio/" + strconv.Itoa(g), Permissions: "rw"})
		}
		if dev.Address != nil {
			for _, a := range append([]host.Address{*dev.Address}, dev.Companions...) {
				for _, n := range host.VFIOCdevs(d.Root, a) {
					edits.DeviceNodes = append(edits.DeviceNodes, cdiNode{Path: n, Permissions: "rw"})
				}
			}
		}
		spec.Devices = append(spec.Devices, cdiDevice{Name: name, ContainerEdits: edits})
		res.Devices = append(res.Devices, kubeletplugin.Device{Requests: []string{a.Request}, PoolName: a.Pool, DeviceName: a.Device,
			CDIDeviceIDs: []string{CDIKind + "=" + name}})
	}
	b, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return kubeletplugin.PrepareResult{Err: err}
	}
	if err := host.WriteFileAtomic(d.SpecPath(c.UID), b, 0o644); err != nil {
		return kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s/%s: %w", c.Namespace, c.Name, err)}
	}
	return res
}

// UnprepareResourceClaims removes the claims' CDI specs; a claim that was not prepared is fine.
func (d *Driver) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := map[types.UID]error{}
	for _, c := range claims {
		if err := os.Remove(d.SpecPath(c.UID)); err != nil && !errors.Is(err, os.ErrNotExist) {
			out[c.UID] = fmt.Errorf("claim %s: %w", c.NamespacedName, err)
			continue
		}
		out[c.UID] = nil
	}
	return out, nil
}

// HandleError logs errors of the helper's background work (ResourceSlice publishing).
func (d *Driver) HandleError(_ context.Context, err error, msg string) {
	fmt.Fprintf(os.Stderr, "vgpu-host-kube: dra: %s: %v\n", msg, err)
}

// WatchHealthStatus is not supported: an unhealthy device leaves the published slice instead.
func (d *Driver) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}

// Run publishes the node's devices through helper every interval, whenever they change,
// until ctx ends.
func (d *Driver) Run(ctx context.Context, helper *kubeletplugin.Helper, node string, interval time.Duration) error {
	var last []byte
	for {
		devs, err := d.scan(ctx)
		if err != nil {
			d.HandleError(ctx, err, "scan")
		} else if b, _ := json.Marshal(devs); string(b) != string(last) {
			if err := helper.PublishResources(ctx, Resources(node, devs)); err != nil {
				return fmt.Errorf("dra: publish: %w", err)
			}
			last = b
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
	}
}
