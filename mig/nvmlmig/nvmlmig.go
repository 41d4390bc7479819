// Package nvmlmig is mig.Backend on NVML, through github.com/NVIDIA/go-nvml. go-nvml is cgo
// (it dlopens libnvidia-ml.so.1 at Init), so only the NVML helper binary, vgpu-host-nvml,
// imports this package; vgpu-host talks to it through mig/remote. It is tested against
// a replay of a real H200's NVML answers and go-nvml's own mock of a DGX A100
// (mig/nvmlmig/mocknvml).
package nvmlmig

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/mig"
)

// Init initialises lib, turning a missing library into an error wrapping mig.ErrNoNVML and
// host.ErrUnsupported that says how to fix it.
func Init(lib nvml.Interface) error {
	switch ret := lib.Init(); ret {
	case nvml.SUCCESS:
		return nil
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return fmt.Errorf("%w: libnvidia-ml.so.1 not found (install the NVIDIA driver): %w", mig.ErrNoNVML, host.ErrUnsupported)
	default:
		return fmt.Errorf("%w: nvmlInit: %s: %w", mig.ErrNoNVML, ret.Error(), host.ErrUnsupported)
	}
}

// Backend is mig.Backend on an initialised nvml.Interface. Its methods are serialised: NVML
// is thread-safe, but a create's check of free placements and the create itself must not
// interleave with another create.
type Backend struct {
	lib nvml.Interface
	mu  sync.Mutex
	// facts are the profile facts read so far, per GPU and MIG mode (profileFacts); under mu.
	facts map[factsKey][]profileFact
	// xmu serialises WaitXid, apart from mu so that MIG calls go on while it waits.
	xmu sync.Mutex
	xid *xidWatch
}

var _ mig.Backend = (*Backend)(nil)

// New returns the backend on lib, which the caller has initialised (Init).
func New(lib nvml.Interface) mig.Backend { return &Backend{lib: lib} }

// nvErr turns an NVML return code into an error with vgpu-host's sentinel, saying what failed.
func nvErr(what string, ret nvml.Return) error {
	if ret == nvml.SUCCESS {
		return nil
	}
	msg := fmt.Sprintf("%s: NVML: %s", what, ret.Error())
	switch ret {
	case nvml.ERROR_NOT_SUPPORTED:
		return fmt.Errorf("%s: %w", msg, host.ErrUnsupported)
	case nvml.ERROR_IN_USE, nvml.ERROR_INSUFFICIENT_RESOURCES:
		return fmt.Errorf("%s: %w", msg, host.ErrBusy)
	case nvml.ERROR_NOT_FOUND:
		return fmt.Errorf("%s: %w", msg, host.ErrNotFound)
	case nvml.ERROR_INVALID_ARGUMENT:
		return fmt.Errorf("%s: %w", msg, host.ErrInvalid)
	case nvml.ERROR_NO_PERMISSION:
		return fmt.Errorf("%s (run as root)", msg)
	}
	return errors.New(msg)
}

// BusID normalises NVML's PCI bus id ("00000000:41:00.0", upper-case hex) to the kernel's form
// ("0000:41:00.0").
func BusID(p nvml.PciInfo) string {
	n := 0
	for n < len(p.BusId) && p.BusId[n] != 0 {
		n++
	}
	s := strings.ToLower(strings.TrimSpace(string(p.BusId[:n])))
	if s == "" {
		return fmt.Sprintf("%04x:%02x:%02x.0", p.Domain, p.Bus, p.Device)
	}
	if dom, rest, ok := strings.Cut(s, ":"); ok && strings.Count(rest, ":") == 1 {
		if d, err := strconv.ParseUint(dom, 16, 32); err == nil {
			s = fmt.Sprintf("%04x:%s", d, rest)
		}
	}
	if a, err := host.ParseAddress(s); err == nil {
		return a.String()
	}
	return s
}

// gpu is one device with what State read of it.
type gpu struct {
	dev   nvml.Device
	g     mig.GPU
	infos map[string]nvml.GpuInstanceProfileInfo // by profile name
}

// State implements mig.Backend.
func (b *Backend) State(ctx context.Context) (mig.State, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	gs, err := b.gpus(ctx)
	if err != nil {
		return mig.State{}, err
	}
	s := mig.State{GPUs: []mig.GPU{}}
	for _, g := range gs {
		s.GPUs = append(s.GPUs, g.g)
	}
	return s, nil
}

func (b *Backend) gpus(ctx context.Context) ([]*gpu, error) {
	n, ret := b.lib.DeviceGetCount()
	if err := nvErr("count GPUs", ret); err != nil {
		return nil, err
	}
	var out []*gpu
	for i := 0; i < n; i++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		dev, ret := b.lib.DeviceGetHandleByIndex(i)
		if err := nvErr(fmt.Sprintf("GPU %d", i), ret); err != nil {
			return nil, err
		}
		g, err := b.readGPU(i, dev)
		if err != nil {
			return nil, err
		}
		out = append(out, g)
	}
	return out, nil
}

// profileFact is what NVML says of one GPU-instance profile index a GPU offers: its info and
// its possible placements. Neither changes while a helper runs, and reading them for every index
// was 7.1 ms of the 9.0 ms a State took on a real H200 (BenchmarkRealNVML, 2026-11-27: 4.5 ms of
// GetGpuInstanceProfileInfo over every index, 2.6 ms of placements); so State reads them once per
// GPU and MIG mode (factsKey), and every later State only what changes (the mode, the instances).
type profileFact struct {
	index      int
	info       nvml.GpuInstanceProfileInfo
	placements []nvml.GpuInstancePlacement
}

// factsKey names a GPU's profile facts: its UUID and address, and its MIG mode, which a mode
// change made past this helper would change (read again then, to be safe).
type factsKey struct {
	uuid, address string
	migOn         bool
}

// profileFacts returns the facts of dev's profile indices, from NVML the first time for key;
// b.mu is held. An error is not remembered.
func (b *Backend) profileFacts(where string, dev nvml.Device, key factsKey) ([]profileFact, error) {
	if f, ok := b.facts[key]; ok {
		return f, nil
	}
	var out []profileFact
	// Every profile index NVML knows, none skipped: the index says the profile's kind (its
	// compute slices and attribute), info.Id is its ID as nvidia-smi prints it, and the two
	// differ on real GPUs (index 0, 1g.18gb on an H200, has ID 19).
	for index := 0; index < nvml.GPU_INSTANCE_PROFILE_COUNT; index++ {
		info, ret := dev.GetGpuInstanceProfileInfo(index)
		if ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue // the GPU does not offer this profile
		}
		if err := nvErr(fmt.Sprintf("%s: GPU instance profile index %d", where, index), ret); err != nil {
			return nil, err
		}
		pls, ret := dev.GetGpuInstancePossiblePlacements(&info)
		if err := nvErr(fmt.Sprintf("%s: placements of profile index %d (ID %d)", where, index, info.Id), ret); err != nil {
			return nil, err
		}
		out = append(out, profileFact{index: index, info: info, placements: slices.Clone(pls)})
	}
	if b.facts == nil {
		b.facts = map[factsKey][]profileFact{}
	}
	b.facts[key] = out
	return out, nil
}

func (b *Backend) readGPU(index int, dev nvml.Device) (*gpu, error) {
	g := &gpu{dev: dev, g: mig.GPU{Index: index}, infos: map[string]nvml.GpuInstanceProfileInfo{}}
	pci, ret := dev.GetPciInfo()
	if err := nvErr(fmt.Sprintf("GPU %d: PCI info", index), ret); err != nil {
		return nil, err
	}
	g.g.Address = BusID(pci)
	where := "GPU " + g.g.Address
	if u, ret := dev.GetUUID(); ret == nvml.SUCCESS {
		g.g.UUID = u
	}
	if name, ret := dev.GetName(); ret == nvml.SUCCESS {
		g.g.Name = name
	}
	if m, ret := dev.GetVirtualizationMode(); ret == nvml.SUCCESS {
		g.g.Virtualization = VirtualizationMode(m)
	}
	cur, pending, ret := dev.GetMigMode()
	switch ret {
	case nvml.SUCCESS:
		g.g.Capable = true
		g.g.Enabled = cur == nvml.DEVICE_MIG_ENABLE
		g.g.Pending = pending == nvml.DEVICE_MIG_ENABLE
	case nvml.ERROR_NOT_SUPPORTED:
		return g, nil // no MIG on this GPU
	default:
		return nil, nvErr(where+": read MIG mode", ret)
	}
	mem, ret := dev.GetMemoryInfo()
	if err := nvErr(where+": memory size", ret); err != nil {
		return nil, err
	}
	facts, err := b.profileFacts(where, dev, factsKey{uuid: g.g.UUID, address: g.g.Address, migOn: g.g.Enabled})
	if err != nil {
		return nil, err
	}
	for _, f := range facts {
		index, info := f.index, f.info
		name, err := mig.ProfileName(index, info.MemorySizeMB, mem.Total)
		if err != nil {
			return nil, fmt.Errorf("%s: GPU instance profile index %d (ID %d): %w", where, index, info.Id, err)
		}
		p := mig.Profile{Name: name, ID: int(info.Id), Index: index, ComputeSlices: int(info.SliceCount), MemoryMiB: info.MemorySizeMB,
			Max: int(info.InstanceCount), Placements: []mig.Placement{}}
		g.g.ComputeSlices = max(g.g.ComputeSlices, p.ComputeSlices)
		for _, pl := range f.placements {
			p.Placements = append(p.Placements, mig.Placement{Start: int(pl.Start), Size: int(pl.Size)})
			p.MemorySlices = max(p.MemorySlices, int(pl.Size))
			g.g.MemorySlices = max(g.g.MemorySlices, int(pl.Start+pl.Size))
		}
		g.g.Profiles = append(g.g.Profiles, p)
		g.infos[name] = info
		if !g.g.Enabled {
			continue // no instances; NVML answers GetGpuInstances with Not Supported
		}
		gis, ret := dev.GetGpuInstances(&info)
		if err := nvErr(fmt.Sprintf("%s: GPU instances of %s", where, name), ret); err != nil {
			return nil, err
		}
		for _, gi := range gis {
			in, err := readInstance(where, name, gi)
			if err != nil {
				return nil, err
			}
			g.g.Instances = append(g.g.Instances, in)
		}
	}
	mig.SortProfiles(g.g.Profiles)
	sort.Slice(g.g.Instances, func(i, j int) bool { return g.g.Instances[i].ID < g.g.Instances[j].ID })
	return g, nil
}

func readInstance(where, profile string, gi nvml.GpuInstance) (mig.Instance, error) {
	info, ret := gi.GetInfo()
	if err := nvErr(where+": GPU instance info", ret); err != nil {
		return mig.Instance{}, err
	}
	in := mig.Instance{ID: int(info.Id), Profile: profile, Placement: mig.Placement{Start: int(info.Placement.Start), Size: int(info.Placement.Size)}}
	cis, err := computeInstances(gi)
	if err != nil {
		return mig.Instance{}, fmt.Errorf("%s: GPU instance %d: %w", where, in.ID, err)
	}
	in.ComputeInstances = len(cis)
	return in, nil
}

// computeInstances lists every compute instance of gi, of every profile it offers.
func computeInstances(gi nvml.GpuInstance) ([]nvml.ComputeInstance, error) {
	var out []nvml.ComputeInstance
	for id := 0; id < nvml.COMPUTE_INSTANCE_PROFILE_COUNT; id++ {
		info, ret := gi.GetComputeInstanceProfileInfo(id, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret != nvml.SUCCESS {
			continue // not offered by this GPU instance
		}
		cis, ret := gi.GetComputeInstances(&info)
		if err := nvErr("compute instances", ret); err != nil {
			return nil, err
		}
		out = append(out, cis...)
	}
	return out, nil
}

// find reads the GPU at address.
func (b *Backend) find(ctx context.Context, address string) (*gpu, error) {
	gs, err := b.gpus(ctx)
	if err != nil {
		return nil, err
	}
	s := mig.State{}
	for _, g := range gs {
		s.GPUs = append(s.GPUs, g.g)
	}
	want, err := s.GPU(address)
	if err != nil {
		return nil, err
	}
	for _, g := range gs {
		if g.g.Address == want.Address {
			return g, nil
		}
	}
	return nil, fmt.Errorf("GPU %s: %w", address, host.ErrNotFound)
}

// SetMode implements mig.Backend. Turning MIG on or off may need a GPU reset to take effect:
// NVML then keeps the new mode pending (GetMigMode's second answer) and says why in the
// activation status: NVML_ERROR_RESET_REQUIRED where the driver cannot reset the GPU itself
// (a GPU passed through to a VM: the VM must reboot), NVML_ERROR_IN_USE while a process holds
// the GPU. Both are an error wrapping mig.ErrModePending (and host.ErrBusy) that says what to
// do. A GPU whose current mode is already the one asked is left alone, unless the other mode
// is pending (someone ran nvidia-smi -mig without a reset): setting the current mode again
// cancels that.
func (b *Backend) SetMode(ctx context.Context, address string, enabled bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	g, err := b.find(ctx, address)
	if err != nil {
		return err
	}
	if !g.g.Capable {
		return fmt.Errorf("%s: %w: it does not support MIG", g.g.Where(), host.ErrUnsupported)
	}
	if g.g.Enabled == enabled && g.g.Pending == enabled {
		return nil
	}
	mode, word := nvml.DEVICE_MIG_DISABLE, "disable"
	if enabled {
		mode, word = nvml.DEVICE_MIG_ENABLE, "enable"
	}
	if !enabled && len(g.g.Instances) > 0 {
		return fmt.Errorf("%s: disable MIG mode: %w: %d GPU instance(s) exist; destroy them first", g.g.Where(), host.ErrBusy, len(g.g.Instances))
	}
	ret, activation := g.dev.SetMigMode(mode)
	if err := nvErr(fmt.Sprintf("%s: %s MIG mode", g.g.Where(), word), ret); err != nil {
		return err
	}
	cur, pending, ret := g.dev.GetMigMode()
	if activation == nvml.SUCCESS && (ret != nvml.SUCCESS || (cur == nvml.DEVICE_MIG_ENABLE) == enabled) {
		return nil
	}
	why := "NVML reports it pending"
	switch activation {
	case nvml.SUCCESS:
	case nvml.ERROR_RESET_REQUIRED:
		why = "activation: NVML_ERROR_RESET_REQUIRED"
	case nvml.ERROR_IN_USE:
		why = "activation: NVML_ERROR_IN_USE"
	default:
		why = "activation: " + activation.Error()
	}
	if ret == nvml.SUCCESS {
		why = fmt.Sprintf("now %s, %s after a reset; %s", onOff(cur == nvml.DEVICE_MIG_ENABLE), onOff(pending == nvml.DEVICE_MIG_ENABLE), why)
	}
	return PendingError(g.g, word, why, activation == nvml.ERROR_IN_USE)
}

// PendingError is the error for a MIG mode change on g that waits for a GPU reset: what to
// do, wrapping mig.ErrModePending and host.ErrBusy. inUse says the driver could not reset the
// GPU because something holds it.
func PendingError(g mig.GPU, word, why string, inUse bool) error {
	todo := fmt.Sprintf("reset the GPU (nvidia-smi -r -i %d, with nothing using it) or reboot the host; in a VM with the GPU passed through, "+
		"where the GPU cannot be reset from inside, reboot the VM; then run again", g.Index)
	if inUse {
		todo = "stop what holds the GPU (nvidia-persistenced, DCGM, a VM or a CUDA process) and run again, or " + todo
	}
	return fmt.Errorf("MIG mode on GPU %s is pending (asked to %s it; %s): %s: %w: %w", g.Address, word, why, todo, mig.ErrModePending, host.ErrBusy)
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

// CIProfile is the compute-instance profile (nvml.COMPUTE_INSTANCE_PROFILE_*) covering a whole
// GPU instance of slices slices.
func CIProfile(slices int) (int, bool) {
	switch slices {
	case 1:
		return nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE, true
	case 2:
		return nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE, true
	case 3:
		return nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE, true
	case 4:
		return nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE, true
	case 6:
		return nvml.COMPUTE_INSTANCE_PROFILE_6_SLICE, true
	case 7:
		return nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE, true
	case 8:
		return nvml.COMPUTE_INSTANCE_PROFILE_8_SLICE, true
	}
	return 0, false
}

// Create implements mig.Backend: the GPU instance at the placement starting at start (the
// first that fits when start < 0), checked free first, then one compute instance covering it.
// If the compute instance cannot be made, the GPU instance is destroyed again.
func (b *Backend) Create(ctx context.Context, address, profile string, start int) (mig.Instance, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	g, err := b.find(ctx, address)
	if err != nil {
		return mig.Instance{}, err
	}
	if !g.g.Capable {
		return mig.Instance{}, fmt.Errorf("%s: %w: it does not support MIG", g.g.Where(), host.ErrUnsupported)
	}
	if !g.g.Enabled {
		return mig.Instance{}, fmt.Errorf("%s: create %s: %w: MIG mode is off (vgpu-host mig apply turns it on)", g.g.Where(), profile, host.ErrInvalid)
	}
	p, err := g.g.LookupProfile(profile)
	if err != nil {
		return mig.Instance{}, err
	}
	var pl mig.Placement
	if start < 0 {
		pls, err := mig.Fit(g.g, []string{p.Name})
		if err != nil {
			return mig.Instance{}, fmt.Errorf("create %s: %w", p.Name, err)
		}
		pl = pls[0]
	} else {
		found := false
		for _, cand := range p.Placements {
			if cand.Start == start {
				pl, found = cand, true
			}
		}
		if !found {
			return mig.Instance{}, fmt.Errorf("%s: create %s at slice %d: %w: %s starts only at %s", g.g.Where(), p.Name, start, host.ErrInvalid, p.Name, starts(p.Placements))
		}
		for _, in := range g.g.Instances {
			if in.Placement.Start < pl.End() && pl.Start < in.Placement.End() {
				return mig.Instance{}, fmt.Errorf("%s: create %s at slices %s: %w: GPU instance %d (%s) holds %s",
					g.g.Where(), p.Name, pl, host.ErrBusy, in.ID, in.Profile, in.Placement)
			}
		}
	}
	info := g.infos[p.Name]
	npl := nvml.GpuInstancePlacement{Start: uint32(pl.Start), Size: uint32(pl.Size)}
	gi, ret := g.dev.CreateGpuInstanceWithPlacement(&info, &npl)
	if err := nvErr(fmt.Sprintf("%s: create a %s GPU instance at slices %s", g.g.Where(), p.Name, pl), ret); err != nil {
		return mig.Instance{}, err
	}
	in, err := readInstance(g.g.Where(), p.Name, gi)
	if err != nil {
		return mig.Instance{}, errors.Join(err, nvErr("destroy it again", gi.Destroy()))
	}
	ci, ok := CIProfile(int(info.SliceCount))
	if !ok {
		return mig.Instance{}, errors.Join(fmt.Errorf("%s: %s: no compute-instance profile covers %d slices", g.g.Where(), p.Name, info.SliceCount),
			nvErr("destroy it again", gi.Destroy()))
	}
	ciInfo, ret := gi.GetComputeInstanceProfileInfo(ci, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	if err := nvErr(fmt.Sprintf("%s: compute-instance profile of GPU instance %d", g.g.Where(), in.ID), ret); err != nil {
		return mig.Instance{}, errors.Join(err, nvErr("destroy it again", gi.Destroy()))
	}
	if _, ret := gi.CreateComputeInstance(&ciInfo); ret != nvml.SUCCESS {
		return mig.Instance{}, errors.Join(nvErr(fmt.Sprintf("%s: create the compute instance of GPU instance %d", g.g.Where(), in.ID), ret),
			nvErr("destroy it again", gi.Destroy()))
	}
	in.ComputeInstances = 1
	return in, nil
}

func starts(pls []mig.Placement) string {
	var s []string
	for _, p := range pls {
		s = append(s, strconv.Itoa(p.Start))
	}
	return strings.Join(s, ", ")
}

// Destroy implements mig.Backend: the compute instances of GPU instance id, then the GPU
// instance. An id that does not exist (any more) is already destroyed: nil.
func (b *Backend) Destroy(ctx context.Context, address string, id int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	g, err := b.find(ctx, address)
	if err != nil {
		return err
	}
	if !g.g.Enabled {
		return nil // MIG off: no GPU instance exists
	}
	for name, info := range g.infos {
		gis, ret := g.dev.GetGpuInstances(&info)
		if err := nvErr(fmt.Sprintf("%s: GPU instances of %s", g.g.Where(), name), ret); err != nil {
			return err
		}
		for _, gi := range gis {
			gii, ret := gi.GetInfo()
			if ret != nvml.SUCCESS || int(gii.Id) != id {
				continue
			}
			cis, err := computeInstances(gi)
			if err != nil {
				return fmt.Errorf("%s: GPU instance %d: %w", g.g.Where(), id, err)
			}
			for _, ci := range cis {
				if err := nvErr(fmt.Sprintf("%s: destroy a compute instance of GPU instance %d (in use by a process or VM?)", g.g.Where(), id), ci.Destroy()); err != nil {
					return err
				}
			}
			return nvErr(fmt.Sprintf("%s: destroy GPU instance %d (%s)", g.g.Where(), id, name), gi.Destroy())
		}
	}
	return nil
}

// VirtualizationMode names m as nvidia-smi -q does ("Virtualization Mode : Pass-Through").
func VirtualizationMode(m nvml.GpuVirtualizationMode) string {
	switch m {
	case nvml.GPU_VIRTUALIZATION_MODE_NONE:
		return "None"
	case nvml.GPU_VIRTUALIZATION_MODE_PASSTHROUGH:
		return "Pass-Through"
	case nvml.GPU_VIRTUALIZATION_MODE_VGPU:
		return "VGPU"
	case nvml.GPU_VIRTUALIZATION_MODE_HOST_VGPU:
		return "Host VGPU"
	case nvml.GPU_VIRTUALIZATION_MODE_HOST_VSGA:
		return "Host VSGA"
	}
	return fmt.Sprintf("mode %d", m)
}
