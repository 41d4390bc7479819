package kube

import (
	"sort"
	"strings"
)

// The KubeVirt CR patch `vgpu-host kubevirt config` prints. Field names are KubeVirt's
// (kubevirt.io/api core/v1 PermittedHostDevices); tests decode it strictly into that type.

// KubeVirtPatch is a JSON merge patch for the KubeVirt CR:
//
//	kubectl patch kubevirt kubevirt -n kubevirt --type merge --patch-file patch.json
type KubeVirtPatch struct {
	Spec KubeVirtPatchSpec `json:"spec"`
}

// KubeVirtPatchSpec is the patched part of KubeVirtSpec.
type KubeVirtPatchSpec struct {
	Configuration KubeVirtConfiguration `json:"configuration"`
}

// KubeVirtConfiguration holds only permittedHostDevices: KubeVirt's own
// mediatedDevicesConfiguration is left off on purpose, because vgpu-host owns the vGPU layout
// (KubeVirt would otherwise create and remove mdevs on the node itself).
type KubeVirtConfiguration struct {
	PermittedHostDevices PermittedHostDevices `json:"permittedHostDevices"`
}

// PermittedHostDevices is KubeVirt's list of host devices VMs may use.
type PermittedHostDevices struct {
	PciHostDevices  []PciHostDevice      `json:"pciHostDevices,omitempty"`
	MediatedDevices []MediatedHostDevice `json:"mediatedDevices,omitempty"`
}

// PciHostDevice permits a PCI device by "VENDOR:DEVICE".
type PciHostDevice struct {
	PCIVendorSelector        string `json:"pciVendorSelector"`
	ResourceName             string `json:"resourceName"`
	ExternalResourceProvider bool   `json:"externalResourceProvider,omitempty"`
}

// MediatedHostDevice permits an mdev type by its name.
type MediatedHostDevice struct {
	MDEVNameSelector         string `json:"mdevNameSelector"`
	ResourceName             string `json:"resourceName"`
	ExternalResourceProvider bool   `json:"externalResourceProvider,omitempty"`
}

// Permitted returns the KubeVirt patch that permits every resource of cat (use Offered, so
// that vGPU types without instances yet are permitted too), each with
// externalResourceProvider: true, since vgpu-host's device plugin, not KubeVirt's, serves
// them. Passthrough GPUs and vendor-VFIO VFs are pciHostDevices (one entry per vendor:device
// selector); mdev types are mediatedDevices.
func Permitted(cat *Catalog) KubeVirtPatch {
	var p PermittedHostDevices
	for _, r := range cat.Resources {
		switch r.Kind {
		case KindMdev:
			p.MediatedDevices = append(p.MediatedDevices, MediatedHostDevice{MDEVNameSelector: r.Selector, ResourceName: r.Name, ExternalResourceProvider: true})
		default:
			for _, sel := range strings.Split(r.Selector, ",") {
				p.PciHostDevices = append(p.PciHostDevices, PciHostDevice{PCIVendorSelector: sel, ResourceName: r.Name, ExternalResourceProvider: true})
			}
		}
	}
	sort.SliceStable(p.PciHostDevices, func(i, j int) bool { return p.PciHostDevices[i].ResourceName < p.PciHostDevices[j].ResourceName })
	return KubeVirtPatch{Spec: KubeVirtPatchSpec{Configuration: KubeVirtConfiguration{PermittedHostDevices: p}}}
}
