// Package vgpu is vgpu-host's one vocabulary for the ways a guest gets a GPU, used by the
// command line, the VM spec, placement and the ledger alike:
//
//   - Kind names each way: whole-device passthrough, an SR-IOV VF, an mdev instance, an NVIDIA
//     vendor-VFIO VF (VF + nvidia/current_vgpu_type), a MIG-backed vendor-VFIO VF (the same, its
//     type running on a MIG GPU instance: MIGBacking), and paravirtual virtio-gpu.
//   - LookupProfile is the one profile matcher: a type named by its ID ("nvidia-558", "1155"),
//     by its whole name ("GRID A100-4C") or by its name without the vendor prefix ("A100-4C"),
//     case-insensitively, with a did-you-mean listing the types on offer when nothing matches.
//   - InstanceUUID is the one UUID scheme: instance N of VM V has the same UUID whether
//     `mdev create --name V` or `apply` of a spec named V made it.
//
// The package reads nothing and writes nothing; host is the one reader of the host.
package vgpu

import (
	"fmt"
	"strings"

	"github.com/google/uuid"

	"github.com/vgpu-host/vgpu-host/host"
)

// Kind is one way a guest gets a GPU. Its string is the stable name used in JSON output, plan
// steps and the ledger.
type Kind string

// The kinds. A spec's gpus[] entry resolves to exactly one of them.
const (
	// Passthrough is a whole PCI GPU with its companion functions (HDMI audio, USB-C), its
	// whole IOMMU group on vfio-pci.
	Passthrough Kind = "passthrough"
	// SRIOVVF is a plain SR-IOV virtual function of a GPU, on vfio-pci, without companions.
	SRIOVVF Kind = "sriov-vf"
	// Mdev is a mediated device instance, named by its UUID (NVIDIA vGPU up to 16.x, Intel
	// GVT-g, the kernel's mbochs/mdpy samples).
	Mdev Kind = "mdev"
	// VendorVFIO is an NVIDIA vendor-specific VFIO VF (vGPU 17+, kernel >= 6.8): the VF stays on
	// the nvidia driver with a type written to nvidia/current_vgpu_type, attached managed='no'.
	VendorVFIO Kind = "vendor-vfio"
	// MIGVendorVFIO is a vendor-VFIO VF whose type is backed by a MIG GPU instance
	// (MIGBacking): set up and attached exactly as VendorVFIO, named apart.
	MIGVendorVFIO Kind = "mig-vendor-vfio"
	// VirtioGPU is a paravirtual virtio-gpu (with virgl when asked), also the fallback when no
	// GPU or vGPU is free.
	VirtioGPU Kind = "virtio-gpu"
)

// Kinds lists every kind, in the order documentation and tables show them.
var Kinds = []Kind{Passthrough, SRIOVVF, Mdev, VendorVFIO, MIGVendorVFIO, VirtioGPU}

// Profile is one vGPU type a parent offers: its ID (an mdev type directory such as
// "nvidia-471", or an NVIDIA vendor type number such as "1155") and its name ("GRID A100-4C").
type Profile struct {
	ID   string
	Name string
}

// String renders "ID (NAME)", or the ID alone when the type has no other name.
func (p Profile) String() string {
	if p.Name != "" && p.Name != p.ID {
		return fmt.Sprintf("%s (%s)", p.ID, p.Name)
	}
	return p.ID
}

// vendorPrefixes are stripped by ShortName, in this order.
var vendorPrefixes = []string{"GRID ", "NVIDIA ", "Nvidia "}

// ShortName strips the vendor prefix from a type name: "GRID A100-4C" → "A100-4C",
// "NVIDIA L40S-8Q" → "L40S-8Q". Other names are returned trimmed and otherwise unchanged.
func ShortName(name string) string {
	n := strings.TrimSpace(name)
	for _, p := range vendorPrefixes {
		if len(n) > len(p) && strings.EqualFold(n[:len(p)], p) {
			return strings.TrimSpace(n[len(p):])
		}
	}
	return n
}

// Matches reports whether want names p by any of the three rules LookupProfile applies.
func Matches(p Profile, want string) bool {
	w := strings.TrimSpace(want)
	if w == "" {
		return false
	}
	return strings.EqualFold(p.ID, w) || (p.Name != "" && (strings.EqualFold(p.Name, w) ||
		strings.EqualFold(ShortName(p.Name), ShortName(w))))
}

// LookupProfile returns the index in offered of the type want names. The rules are tried in
// order, and the first that matches decides:
//
//  1. the type ID, ignoring case ("nvidia-471", "mbochs-small", "1155");
//  2. the whole name, ignoring case ("GRID A100-4C", "NVIDIA L40S-8Q");
//  3. the name without its vendor prefix, ignoring case ("A100-4C", "l40s-8q").
//
// When a rule matches several types the profile is ambiguous: an error wrapping
// host.ErrInvalid that lists them. When nothing matches: an error wrapping host.ErrNotFound
// that lists what is offered (the did-you-mean), with the closest names first. where names
// the parent or host for the message ("on 0000:41:00.0").
func LookupProfile(offered []Profile, want, where string) (int, error) {
	w := strings.TrimSpace(want)
	if w != "" {
		rules := []func(Profile) bool{
			func(p Profile) bool { return strings.EqualFold(p.ID, w) },
			func(p Profile) bool { return p.Name != "" && strings.EqualFold(p.Name, w) },
			func(p Profile) bool { return p.Name != "" && strings.EqualFold(ShortName(p.Name), ShortName(w)) },
		}
		for _, rule := range rules {
			var hits []int
			for i, p := range offered {
				if rule(p) {
					hits = append(hits, i)
				}
			}
			switch {
			case len(hits) == 1:
				return hits[0], nil
			case len(hits) > 1:
				var names []string
				for _, i := range hits {
					names = append(names, offered[i].String())
				}
				return -1, fmt.Errorf("vGPU profile %q%s: %w: it names several types: %s (use the type ID)",
					want, sep(where), host.ErrInvalid, strings.Join(names, ", "))
			}
		}
	}
	return -1, fmt.Errorf("vGPU profile %q%s: %w (%s)", want, sep(where), host.ErrNotFound, DidYouMean(offered, want))
}

// DidYouMean lists offered types for an error message, closest to want first: "did you mean
// nvidia-471 (GRID A100-4C)? offered: …", or "no vGPU types are offered" when there are none.
func DidYouMean(offered []Profile, want string) string {
	if len(offered) == 0 {
		return "no vGPU types are offered here"
	}
	best, bestD := -1, 1<<30
	w := strings.ToLower(ShortName(want))
	for i, p := range offered {
		for _, cand := range []string{p.ID, ShortName(p.Name)} {
			if cand == "" {
				continue
			}
			if d := distance(w, strings.ToLower(cand)); d < bestD {
				best, bestD = i, d
			}
		}
	}
	list := List(offered)
	if best >= 0 && bestD <= max(2, len(w)/3) {
		return fmt.Sprintf("did you mean %s? offered: %s", offered[best], list)
	}
	return "offered: " + list
}

// List renders offered types as "ID (NAME), ID (NAME)", each once, or "none".
func List(offered []Profile) string {
	var all []string
	seen := map[string]bool{}
	for _, p := range offered {
		if s := p.String(); !seen[s] {
			seen[s] = true
			all = append(all, s)
		}
	}
	if len(all) == 0 {
		return "none"
	}
	return strings.Join(all, ", ")
}

func sep(where string) string {
	if where == "" {
		return ""
	}
	return " " + where
}

// distance is the Levenshtein edit distance between a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// Namespace is the fixed name-based UUID namespace of vgpu-host's instance UUIDs (UUID v5 of
// "https://github.com/vgpu-host/vgpu-host/mdev" in the URL namespace). Changing it would change
// every derived instance UUID, so it is a constant. Written out (4336266f-025a-5c8b-b7a0-14741909dfa9,
// TestNamespacesWrittenOut computes it) rather than computed by the package's initialiser at
// every start.
var Namespace = uuid.UUID{0x43, 0x36, 0x26, 0x6f, 0x02, 0x5a, 0x5c, 0x8b, 0xb7, 0xa0, 0x14, 0x74, 0x19, 0x09, 0xdf, 0xa9}

// domainNamespace is the UUID v5 namespace of domain UUIDs derived from VM names:
// 8a3f6c1e-2b0d-5e4f-9c7a-6d1b0e2f3a45, written out as bytes (TestNamespacesWrittenOut).
var domainNamespace = uuid.UUID{0x8a, 0x3f, 0x6c, 0x1e, 0x2b, 0x0d, 0x5e, 0x4f, 0x9c, 0x7a, 0x6d, 0x1b, 0x0e, 0x2f, 0x3a, 0x45}

// MaxInstanceIndex is the largest index a VM's instance can have: a spec has at most 16
// gpus[] entries (domains.MaxGPUCount) of at most 16 instances each, numbered from 0.
const MaxInstanceIndex = 16*16 - 1

// InstanceUUID is the UUID of instance number index of VM vm: UUID v5 of "VM/INDEX" in
// Namespace. A VM's mdev instances are numbered from 0 across its whole spec (the second
// gpus[] entry continues where the first stopped), the same numbering `mdev create --name VM
// [--first-index N]` uses, so the same VM gets the same UUIDs whichever way they were made.
func InstanceUUID(vm string, index int) string {
	return uuid.NewSHA1(Namespace, []byte(fmt.Sprintf("%s/%d", vm, index))).String()
}

// DomainUUID is the libvirt domain UUID of VM vm: UUID v5 of "domain/VM", so rendering twice
// gives the same domain.
func DomainUUID(vm string) string {
	return uuid.NewSHA1(domainNamespace, []byte("domain/"+vm)).String()
}

// ParseUUID validates an instance UUID and returns it in the kernel's lower-case form.
func ParseUUID(s string) (string, error) {
	u, err := uuid.Parse(s)
	if err != nil || len(s) != 36 {
		return "", fmt.Errorf("mdev uuid %q: %w: not a UUID like 83c32df7-d52e-4ec1-9668-1f3c7e4df107", s, host.ErrInvalid)
	}
	return u.String(), nil
}
