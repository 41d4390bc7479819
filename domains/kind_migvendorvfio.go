package domains

import "github.com/vgpu-host/vgpu-host/vgpu"

// migVendorVFIOKind is a vendor-VFIO VF whose type is MIG-backed (vgpu.MIGBacking: "H100-3-40C"
// runs on a 3g.40gb GPU instance). It is the vendor-VFIO kind in every respect (the same
// resolution over the VFs' creatable_vgpu_types, the same assign-vgpu step, claim and
// managed='no' hostdev); its own name lets plans and the ledger's readers tell a VM on a MIG
// slice from a time-sliced one. No spec entry asks for it: vendorVFIOKind.resolve chooses it
// when the type it resolved is MIG-backed.
type migVendorVFIOKind struct{ vendorVFIOKind }

func (migVendorVFIOKind) Name() vgpu.Kind { return vgpu.MIGVendorVFIO }

func (migVendorVFIOKind) wants(GPU) bool { return false }

// vendorKindOf is the kind of a vendor-VFIO allocation: MIG-backed when its type is.
func vendorKindOf(slots []Slot, profile string) vgpu.Kind {
	name := profile
	if len(slots) > 0 && slots[0].VGPUTypeName != "" {
		name = slots[0].VGPUTypeName
	}
	if _, _, ok := vgpu.MIGBacking(name); ok {
		return vgpu.MIGVendorVFIO
	}
	return vgpu.VendorVFIO
}
