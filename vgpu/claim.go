package vgpu

// ClaimKind is what a claim holds: the unit the ledger keeps exclusive (a PCI function, an
// mdev instance, a VF's vGPU type). It is not a Kind, which names what a guest gets: one
// guest's GPU is several claims (a passthrough GPU and its companions are one pci claim each),
// and a VM also claims devices that are no GPU at all (a NIC is a pci claim). ClaimKindOf says
// which claims a guest of each Kind holds. Its string is the "kind" written in the ledger.
type ClaimKind string

// Claim kinds.
const (
	ClaimPCI        ClaimKind = "pci"         // a whole PCI function (GPU, companion, VF or NIC) given to the VM
	ClaimMdev       ClaimKind = "mdev"        // an mdev instance, by UUID
	ClaimVendorVGPU ClaimKind = "vendor-vgpu" // a VF whose nvidia/current_vgpu_type this VM set
)

// ClaimKindOf returns the kind of claim a guest's GPU of kind k holds: pci for a passthrough
// GPU (and each of its companions) or a plain SR-IOV VF, mdev for an mdev instance,
// vendor-vgpu for a vendor-VFIO VF (MIG-backed or not). A virtio-gpu holds no host device:
// "" (so does a kind this function does not know).
func ClaimKindOf(k Kind) ClaimKind {
	switch k {
	case Passthrough, SRIOVVF:
		return ClaimPCI
	case Mdev:
		return ClaimMdev
	case VendorVFIO, MIGVendorVFIO:
		return ClaimVendorVGPU
	}
	return ""
}

// Claim is one device a VM holds: what domains resolves a spec to and the ledger keeps
// exclusive. It lives here, below both, so that resolving a spec needs no ledger.
type Claim struct {
	Kind ClaimKind `json:"kind"` // pci, mdev, vendor-vgpu
	ID   string    `json:"id"`   // PCI address or mdev UUID
	// Detail says what the claim is for: the mdev type, the vGPU type id, "companion".
	Detail string `json:"detail,omitempty"`
}

// Key returns "kind:id", the unit of exclusivity.
func (c Claim) Key() string { return string(c.Kind) + ":" + c.ID }

// SameClaims reports whether a and b hold the same devices (by Key), in any order.
func SameClaims(a, b []Claim) bool {
	if len(a) != len(b) {
		return false
	}
	keys := map[string]bool{}
	for _, c := range a {
		keys[c.Key()] = true
	}
	for _, c := range b {
		if !keys[c.Key()] {
			return false
		}
	}
	return true
}
