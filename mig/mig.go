// Package mig models NVIDIA Multi-Instance GPU (MIG) on a host: which GPUs can be split, the
// GPU-instance profiles each offers (and the fixed slices they occupy), the instances that exist,
// and the changes that bring a GPU to a wanted list of profiles.
//
// The main binary is static and free of cgo, so it never links NVML. It talks to a Backend:
// the NVML implementation lives in its own binary (like libvirt's in vgpu-host-libvirt) and is
// tested against go-nvml's own mock of an 8×A100 machine. Everything in this package itself is
// pure Go: the types, placement (which lists of profiles fit on a GPU), and planning.
package mig

import (
	"context"
	"sort"
	"strings"
)

// Profile is one GPU-instance profile a GPU offers, named the way nvidia-smi and NVIDIA's
// operators name it ("1g.18gb", "3g.71gb", "1g.18gb+me").
//
// A profile counts two kinds of slices, kept apart: its name's "<g>g" is compute slices (7 for
// the whole GPU), its placements are in memory slices (8 on an A100, H100 or H200: the whole
// GPU is placement {0}:8, a 3g instance takes four).
type Profile struct {
	// Name is the profile's name, e.g. "3g.40gb".
	Name string `json:"name"`
	// ID is the profile's ID as NVML reports it (GpuInstanceProfileInfo.Id): what nvidia-smi
	// mig -lgip prints as ID and nvidia-smi mig -cgi takes (19 for 1g.18gb on an H200).
	ID int `json:"id"`
	// Index is NVML's profile index (nvml.GPU_INSTANCE_PROFILE_*, the argument of
	// GetGpuInstanceProfileInfo), which says the profile's kind; -1 when not read from NVML.
	Index int `json:"index"`
	// ComputeSlices is how many compute slices ("g") one instance has.
	ComputeSlices int `json:"compute_slices"`
	// MemorySlices is how many memory slices one instance occupies (its placements' size).
	MemorySlices int `json:"memory_slices"`
	// MemoryMiB is one instance's memory.
	MemoryMiB uint64 `json:"memory_mib"`
	// Max is how many instances of this profile alone fit on an empty GPU.
	Max int `json:"max"`
	// Placements are the memory-slice ranges an instance of this profile may occupy (NVML's
	// possible placements): profiles occupy fixed slices, so free capacity is not just a sum.
	Placements []Placement `json:"placements"`
}

// SortProfiles orders profiles as nvidia-smi mig -lgip lists them, so that a listing reads
// against nvidia-smi's line by line: by compute slices, then memory, a variant with a suffix
// (1g.18gb+me) after its plain profile, and otherwise in the order given (NVML's profile
// index). NVML's own index order puts the variants last (an H200: 1g.18gb, 2g.35gb, 3g.71gb,
// 4g.71gb, 7g.141gb, 1g.18gb+me, 1g.35gb; nvidia-smi: 1g.18gb, 1g.18gb+me, 1g.35gb, 2g.35gb, ...).
func SortProfiles(ps []Profile) {
	sort.SliceStable(ps, func(i, j int) bool {
		a, b := ps[i], ps[j]
		if a.ComputeSlices != b.ComputeSlices {
			return a.ComputeSlices < b.ComputeSlices
		}
		if a.MemoryMiB != b.MemoryMiB {
			return a.MemoryMiB < b.MemoryMiB
		}
		return !strings.Contains(a.Name, "+") && strings.Contains(b.Name, "+")
	})
}

// Placement is a range of memory slices [Start, Start+Size); nvidia-smi writes it {Start}:Size.
type Placement struct {
	Start int `json:"start"`
	Size  int `json:"size"`
}

// Instance is one GPU instance that exists on a GPU.
type Instance struct {
	// ID is the GPU instance id NVML gave it.
	ID int `json:"id"`
	// Profile is its profile's name.
	Profile string `json:"profile"`
	// Placement is the memory slices it occupies.
	Placement Placement `json:"placement"`
	// ComputeInstances counts the compute instances inside it.
	ComputeInstances int `json:"compute_instances"`
}

// GPU is one MIG-capable (or not) NVIDIA GPU as the backend sees it.
type GPU struct {
	// Index is NVML's device index.
	Index int `json:"index"`
	// Address is the PCI address, normalised to the kernel's form (0000:41:00.0).
	Address string `json:"address"`
	// UUID is the GPU's UUID (GPU-...).
	UUID string `json:"uuid"`
	// Name is the product name NVML reports.
	Name string `json:"name"`
	// Virtualization is the GPU's virtualization mode as nvidia-smi -q prints it ("None",
	// "Pass-Through", "VGPU", "Host VGPU", "Host VSGA"); "" when NVML does not say. The real
	// H200 and H100 of the captures are "Pass-Through": this system is a VM the GPU is given to.
	Virtualization string `json:"virtualization,omitempty"`
	// Capable says whether the GPU supports MIG at all.
	Capable bool `json:"mig_capable"`
	// Enabled is the current MIG mode; Pending the mode after the next GPU reset (the same as
	// Enabled when no change waits for one: NVML's GetMigMode answers both).
	Enabled bool `json:"mig_enabled"`
	Pending bool `json:"mig_pending"`
	// ComputeSlices is the GPU's compute slices: the most any of its profiles has (7 on an
	// A100, H100 or H200; 4 on an A30).
	ComputeSlices int `json:"compute_slices"`
	// MemorySlices is the number of memory-slice positions the GPU's placements span: 8 on an
	// A100, H100 or H200, whose seven compute slices sit on eight memory slices (a 3g instance
	// occupies four, 0-3 or 4-7; slice 7 takes no 1g instance). Computed from NVML's possible
	// placements.
	MemorySlices int `json:"memory_slices"`
	// Profiles are the GPU-instance profiles the GPU offers (empty unless Capable).
	Profiles []Profile `json:"profiles,omitempty"`
	// Instances are the GPU instances that exist now.
	Instances []Instance `json:"instances,omitempty"`
}

// State is every NVIDIA GPU the backend sees.
type State struct {
	GPUs []GPU `json:"gpus"`
}

// Backend is what vgpu-host needs of NVML. Addresses are PCI addresses in the kernel's form.
// Every method is safe to call again with the same arguments after a failure.
type Backend interface {
	// State reads every GPU, its MIG mode, profiles and instances.
	State(ctx context.Context) (State, error)
	// SetMode turns MIG mode on or off on the GPU at address.
	SetMode(ctx context.Context, address string, enabled bool) error
	// Create creates one GPU instance of the named profile at placement start (the lowest free
	// one when start < 0), with one compute instance covering it, and returns it.
	Create(ctx context.Context, address, profile string, start int) (Instance, error)
	// Destroy destroys the GPU instance id (and its compute instances) on the GPU at address.
	Destroy(ctx context.Context, address string, id int) error
}
