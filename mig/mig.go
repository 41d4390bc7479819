// Package mig models NVIDIA Multi-Instance GPU (MIG) on a host: which GPUs can be split, the
// GPU-instance profiles each offers (and the fixed slices they occupy), the instances that exist,
// and the changes that bring a GPU to a wanted list of profiles.
//
// The main binary is static and free of cgo, so it never links NVML. It talks to a Backend:
// the NVML implementation lives in its own binary (like libvirt's in vgpu-host-libvirt) and is
// tested against go-nvml's own mock of an 8×A100 machine. Everything in this package itself is
// pure Go: the types, placement (which lists of profiles fit on a GPU), and planning.
package mig

import "context"

// Profile is one GPU-instance profile a GPU offers, named the way nvidia-smi and NVIDIA's
// operators name it ("1g.5gb", "3g.40gb", "1g.10gb+me").
type Profile struct {
	// Name is the profile's name, e.g. "3g.40gb".
	Name string `json:"name"`
	// ID is NVML's GPU-instance profile id (nvml.GPU_INSTANCE_PROFILE_*).
	ID int `json:"id"`
	// Slices is how many of the GPU's memory slices one instance occupies.
	Slices int `json:"slices"`
	// MemoryMiB is one instance's memory.
	MemoryMiB uint64 `json:"memory_mib"`
	// Max is how many instances of this profile alone fit on an empty GPU.
	Max int `json:"max"`
	// Placements are the slice ranges an instance of this profile may start at (NVML's
	// possible placements): profiles occupy fixed slices, so free capacity is not just a sum.
	Placements []Placement `json:"placements"`
}

// Placement is a range of memory slices [Start, Start+Size).
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
	// Placement is the slices it occupies.
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
	// Capable says whether the GPU supports MIG at all.
	Capable bool `json:"mig_capable"`
	// Enabled is the current MIG mode; Pending the mode after the next GPU reset, when they differ.
	Enabled bool `json:"mig_enabled"`
	Pending bool `json:"mig_pending"`
	// Slices is the number of slice positions the GPU's placements span: 8 on an A100, whose
	// seven compute slices sit on eight memory slices (a 3g instance occupies four, 0-3 or 4-7;
	// slice 7 takes no 1g instance). Computed from NVML's possible placements.
	Slices int `json:"slices"`
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
