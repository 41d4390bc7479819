package nvmlfacts

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/vgpu-host/vgpu-host/internal/lazy"
)

// Facts is a capture of what NVML answered on a real machine, in the format of
// ../shared/fixtures/nvidia-h200/nvml-facts.json (docs/mig.md describes it): per GPU its
// identity, memory, MIG mode and, for every GPU-instance profile index 0 … profile_count-1,
// the return code of GetGpuInstanceProfileInfo(index), the info it returned and the profile's
// possible placements. Capture writes it; Server replays it.
type Facts struct {
	// Driver is the driver version the capture was taken with.
	Driver string `json:"driver"`
	// ProfileCount is nvml.GPU_INSTANCE_PROFILE_COUNT of the go-nvml that took the capture.
	ProfileCount int `json:"profile_count"`
	// GPUs are the GPUs in NVML's index order.
	GPUs []GPU `json:"gpus"`
	// Events are NVML events the replay delivers (events.go); a capture records none.
	Events []Event `json:"events,omitempty"`
}

// GPU is one GPU of a capture.
type GPU struct {
	Index          int    `json:"index"`
	Name           string `json:"name"`
	UUID           string `json:"uuid"`
	PCIBusID       string `json:"pci_bus_id"` // NVML's form, "00000000:00:06.0"
	PCIDeviceID    uint32 `json:"pci_device_id"`
	PCISubsystemID uint32 `json:"pci_subsystem_id"`
	MemoryTotal    uint64 `json:"memory_total"` // bytes
	// Architecture, VirtualizationMode, HostVGPUMode and SupportedVGPUs are recorded as the
	// capture prints them ("9", "1 (Success)", "0 (Not Supported)", "0 types (Not Supported)")
	// and answered back by the replay; vgpu-host itself does not read them.
	Architecture       string `json:"architecture,omitempty"`
	VirtualizationMode string `json:"virtualization_mode,omitempty"`
	HostVGPUMode       string `json:"host_vgpu_mode,omitempty"`
	// MigCurrent and MigPending are GetMigMode's answers; MigRet its return code ("Success",
	// "Not Supported" on a GPU without MIG).
	MigCurrent     int       `json:"mig_current"`
	MigPending     int       `json:"mig_pending"`
	MigRet         string    `json:"mig_ret"`
	Profiles       []Profile `json:"profiles"`
	SupportedVGPUs string    `json:"supported_vgpus,omitempty"`
}

// Profile is what NVML answered for one GPU-instance profile index. Ret and RetPlacements
// are NVML's return codes as its error strings print them ("Success", "Not Supported").
type Profile struct {
	Index             int                          `json:"index"`
	Ret               string                       `json:"ret"`
	Info              *nvml.GpuInstanceProfileInfo `json:"info,omitempty"`
	Placements        []nvml.GpuInstancePlacement  `json:"placements,omitempty"`
	RetPlacements     string                       `json:"ret_placements,omitempty"`
	RemainingCapacity int                          `json:"remaining_capacity"`
}

// Load reads and checks a capture.
func Load(path string) (*Facts, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read NVML facts: %w", err)
	}
	var f Facts
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("NVML facts %s: %w", path, err)
	}
	if err := f.check(); err != nil {
		return nil, fmt.Errorf("NVML facts %s: %w", path, err)
	}
	return &f, nil
}

func (f *Facts) check() error {
	if len(f.GPUs) == 0 {
		return errors.New("no gpus")
	}
	if err := f.checkEvents(); err != nil {
		return err
	}
	for i, g := range f.GPUs {
		if g.MemoryTotal == 0 || g.PCIBusID == "" {
			return fmt.Errorf("gpus[%d]: memory_total and pci_bus_id are required", i)
		}
		if _, err := parseRet(g.MigRet); err != nil {
			return fmt.Errorf("gpus[%d].mig_ret: %w", i, err)
		}
		for j, p := range g.Profiles {
			ret, err := parseRet(p.Ret)
			if err != nil {
				return fmt.Errorf("gpus[%d].profiles[%d].ret: %w", i, j, err)
			}
			if ret == nvml.SUCCESS && p.Info == nil {
				return fmt.Errorf("gpus[%d].profiles[%d] (index %d): ret Success without info", i, j, p.Index)
			}
			if _, err := parseRet(p.RetPlacements); err != nil {
				return fmt.Errorf("gpus[%d].profiles[%d].ret_placements: %w", i, j, err)
			}
		}
	}
	return nil
}

// parseRet reads an NVML return code as a capture writes it: the real library's error string
// ("Success", "Not Supported", "Insufficient Resources") or go-nvml's constant name
// ("ERROR_NOT_SUPPORTED"); empty is Success.
func parseRet(s string) (nvml.Return, error) {
	key := func(s string) string {
		s = strings.ToLower(s)
		s = strings.TrimPrefix(s, "error_")
		return strings.NewReplacer(" ", "", "_", "", "-", "").Replace(s)
	}
	k := key(s)
	if k == "" {
		return nvml.SUCCESS, nil
	}
	for r := nvml.SUCCESS; r <= nvml.ERROR_RESET_TYPE_NOT_SUPPORTED; r++ {
		if key(r.Error()) == k {
			return r, nil
		}
	}
	if key(nvml.ERROR_UNKNOWN.Error()) == k {
		return nvml.ERROR_UNKNOWN, nil
	}
	return nvml.ERROR_UNKNOWN, fmt.Errorf("%q: not an NVML return code", s)
}

// Server is an nvml.Interface that answers from Facts, built on go-nvml's generated mocks
// (a method the replay does not answer panics, naming itself). On top of the captured profiles
// it keeps MIG mode, GPU instances and compute instances in memory, with NVIDIA's placement
// rules: an instance only at one of its profile's possible placements, not over another's
// memory slices, at most InstanceCount of a profile, and the GPU's engines (decoders, JPEG,
// OFA, encoders, copy engines) not handed out beyond what the whole-GPU profile has — so the
// single OFA of an H200 goes to one "+me" instance or the 7g, not both. Instances exist only
// with MIG mode on, as on the driver (GetGpuInstances answers Not Supported with MIG off).
type Server struct {
	mock.Interface
	mu      sync.Mutex
	facts   *Facts
	devices []*factsDevice
}

var _ nvml.Interface = (*Server)(nil)

type factsDevice struct {
	mock.Device
	s         *Server
	f         GPU
	mig       int
	instances map[uint32]*factsGI
}

type factsGI struct {
	mock.GpuInstance
	d       *factsDevice
	info    nvml.GpuInstanceInfo
	profile nvml.GpuInstanceProfileInfo
	cis     map[uint32]*factsCI
}

type factsCI struct {
	mock.ComputeInstance
	gi     *factsGI
	info   nvml.ComputeInstanceInfo
	slices uint32
}

// NewServer returns a server answering from f, each GPU in its captured MIG mode with no
// instances.
func NewServer(f *Facts) *Server {
	s := &Server{facts: f}
	for _, g := range f.GPUs {
		d := &factsDevice{s: s, f: g, mig: g.MigCurrent, instances: map[uint32]*factsGI{}}
		d.setFuncs()
		s.devices = append(s.devices, d)
	}
	s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return s.newEventSet(), nvml.SUCCESS }
	s.InitFunc = func() nvml.Return { return nvml.SUCCESS }
	s.ShutdownFunc = func() nvml.Return { return nvml.SUCCESS }
	s.SystemGetDriverVersionFunc = func() (string, nvml.Return) { return f.Driver, nvml.SUCCESS }
	s.DeviceGetCountFunc = func() (int, nvml.Return) { return len(s.devices), nvml.SUCCESS }
	s.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i < 0 || i >= len(s.devices) {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		return s.devices[i], nvml.SUCCESS
	}
	s.DeviceGetHandleByUUIDFunc = func(uuid string) (nvml.Device, nvml.Return) {
		for _, d := range s.devices {
			if d.f.UUID == uuid {
				return d, nvml.SUCCESS
			}
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
	return s
}

// profile returns the captured profile whose info has ID id.
func (d *factsDevice) profile(id uint32) (Profile, bool) {
	for _, p := range d.f.Profiles {
		if ret, _ := parseRet(p.Ret); ret == nvml.SUCCESS && p.Info.Id == id {
			return p, true
		}
	}
	return Profile{}, false
}

// whole is the engines of the GPU: the profile with the most compute slices (the 7g).
func (d *factsDevice) whole() nvml.GpuInstanceProfileInfo {
	var w nvml.GpuInstanceProfileInfo
	for _, p := range d.f.Profiles {
		if ret, _ := parseRet(p.Ret); ret == nvml.SUCCESS && p.Info.SliceCount > w.SliceCount {
			w = *p.Info
		}
	}
	return w
}

// fits is NVIDIA's rule for one more instance of p at pl, with d's lock held: SUCCESS,
// ERROR_INVALID_ARGUMENT (not a placement of p) or ERROR_INSUFFICIENT_RESOURCES.
func (d *factsDevice) fits(p Profile, pl nvml.GpuInstancePlacement) nvml.Return {
	ok := false
	for _, c := range p.Placements {
		ok = ok || c == pl
	}
	if !ok {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	n := 0
	w := d.whole()
	engines := [5]uint32{p.Info.DecoderCount, p.Info.JpegCount, p.Info.OfaCount, p.Info.EncoderCount, p.Info.CopyEngineCount}
	for _, gi := range d.instances {
		if gi.profile.Id == p.Info.Id {
			n++
		}
		o := gi.info.Placement
		if o.Start < pl.Start+pl.Size && pl.Start < o.Start+o.Size {
			return nvml.ERROR_INSUFFICIENT_RESOURCES
		}
		in := gi.profile
		for i, c := range [5]uint32{in.DecoderCount, in.JpegCount, in.OfaCount, in.EncoderCount, in.CopyEngineCount} {
			engines[i] += c
		}
	}
	if n >= int(p.Info.InstanceCount) {
		return nvml.ERROR_INSUFFICIENT_RESOURCES
	}
	for i, max := range [5]uint32{w.DecoderCount, w.JpegCount, w.OfaCount, w.EncoderCount, w.CopyEngineCount} {
		if engines[i] > max {
			return nvml.ERROR_INSUFFICIENT_RESOURCES
		}
	}
	return nvml.SUCCESS
}

// remaining is how many more instances of p fit, with d's lock held: placed one after another
// at the first placement that fits, so that each takes its slices and its engines, as NVML
// counts (a real H200 answers 1 for 1g.18gb+me, whose single OFA the first instance takes,
// and 7 for 1g.18gb).
func (d *factsDevice) remaining(p Profile) int {
	saved := d.instances
	defer func() { d.instances = saved }()
	d.instances = make(map[uint32]*factsGI, len(saved))
	for id, gi := range saved {
		d.instances[id] = gi
	}
	n := 0
	for placed := true; placed; {
		placed = false
		for _, pl := range p.Placements {
			if d.fits(p, pl) == nvml.SUCCESS {
				n++
				d.instances[^uint32(n)] = &factsGI{profile: *p.Info, info: nvml.GpuInstanceInfo{ProfileId: p.Info.Id, Placement: pl}}
				placed = true
				break
			}
		}
	}
	return n
}

// create makes a GPU instance of p at pl with d's lock held, its id the lowest unused from 1
// (NVML numbers instances by placement; the replay does not claim to).
func (d *factsDevice) create(p Profile, pl nvml.GpuInstancePlacement, id uint32) (*factsGI, nvml.Return) {
	if d.mig != nvml.DEVICE_MIG_ENABLE {
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	if ret := d.fits(p, pl); ret != nvml.SUCCESS {
		return nil, ret
	}
	if id == 0 {
		for id = 1; d.instances[id] != nil; id++ {
		}
	}
	gi := &factsGI{d: d, profile: *p.Info, cis: map[uint32]*factsCI{},
		info: nvml.GpuInstanceInfo{Device: d, Id: id, ProfileId: p.Info.Id, Placement: pl}}
	gi.setFuncs()
	d.instances[id] = gi
	return gi, nvml.SUCCESS
}

func (d *factsDevice) setFuncs() {
	s := d.s
	d.GetIndexFunc = func() (int, nvml.Return) { return d.f.Index, nvml.SUCCESS }
	d.RegisterEventsFunc = d.register
	d.GetNameFunc = func() (string, nvml.Return) { return d.f.Name, nvml.SUCCESS }
	d.GetUUIDFunc = func() (string, nvml.Return) { return d.f.UUID, nvml.SUCCESS }
	d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		return nvml.Memory{Total: d.f.MemoryTotal, Free: d.f.MemoryTotal}, nvml.SUCCESS
	}
	d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
		p := nvml.PciInfo{PciDeviceId: d.f.PCIDeviceID, PciSubSystemId: d.f.PCISubsystemID}
		copy(p.BusId[:], d.f.PCIBusID)
		if f := strings.FieldsFunc(d.f.PCIBusID, func(r rune) bool { return r == ':' || r == '.' }); len(f) == 4 {
			dom, _ := strconv.ParseUint(f[0], 16, 32)
			bus, _ := strconv.ParseUint(f[1], 16, 32)
			dev, _ := strconv.ParseUint(f[2], 16, 32)
			p.Domain, p.Bus, p.Device = uint32(dom), uint32(bus), uint32(dev)
		}
		return p, nvml.SUCCESS
	}
	d.GetArchitectureFunc = func() (nvml.DeviceArchitecture, nvml.Return) {
		n, ret := recorded(d.f.Architecture)
		return nvml.DeviceArchitecture(n), ret
	}
	d.GetVirtualizationModeFunc = func() (nvml.GpuVirtualizationMode, nvml.Return) {
		n, ret := recorded(d.f.VirtualizationMode)
		return nvml.GpuVirtualizationMode(n), ret
	}
	d.GetHostVgpuModeFunc = func() (nvml.HostVgpuMode, nvml.Return) {
		n, ret := recorded(d.f.HostVGPUMode)
		return nvml.HostVgpuMode(n), ret
	}
	d.GetSupportedVgpusFunc = func() ([]nvml.VgpuTypeId, nvml.Return) {
		n, ret := recorded(strings.Replace(d.f.SupportedVGPUs, " types", "", 1))
		if ret != nvml.SUCCESS {
			return nil, ret
		}
		// The capture keeps the count only; type IDs are not replayed.
		return make([]nvml.VgpuTypeId, n), ret
	}
	d.GetMigModeFunc = func() (int, int, nvml.Return) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if ret, _ := parseRet(d.f.MigRet); ret != nvml.SUCCESS {
			return 0, 0, ret
		}
		return d.mig, d.mig, nvml.SUCCESS
	}
	d.SetMigModeFunc = func(mode int) (nvml.Return, nvml.Return) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if ret, _ := parseRet(d.f.MigRet); ret != nvml.SUCCESS {
			return ret, ret
		}
		if mode != nvml.DEVICE_MIG_ENABLE && mode != nvml.DEVICE_MIG_DISABLE {
			return nvml.ERROR_INVALID_ARGUMENT, nvml.ERROR_INVALID_ARGUMENT
		}
		if mode == nvml.DEVICE_MIG_DISABLE && len(d.instances) > 0 {
			return nvml.ERROR_IN_USE, nvml.ERROR_IN_USE
		}
		d.mig = mode
		return nvml.SUCCESS, nvml.SUCCESS
	}
	d.GetGpuInstanceProfileInfoFunc = func(index int) (nvml.GpuInstanceProfileInfo, nvml.Return) {
		if index < 0 || index >= nvml.GPU_INSTANCE_PROFILE_COUNT {
			return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_INVALID_ARGUMENT
		}
		for _, p := range d.f.Profiles {
			if p.Index != index {
				continue
			}
			ret, _ := parseRet(p.Ret)
			if ret != nvml.SUCCESS {
				return nvml.GpuInstanceProfileInfo{}, ret
			}
			return *p.Info, nvml.SUCCESS
		}
		return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
	}
	d.GetGpuInstancePossiblePlacementsFunc = func(info *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstancePlacement, nvml.Return) {
		p, ok := d.profile(info.Id)
		if !ok {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		if ret, _ := parseRet(p.RetPlacements); ret != nvml.SUCCESS {
			return nil, ret
		}
		return append([]nvml.GpuInstancePlacement(nil), p.Placements...), nvml.SUCCESS
	}
	d.GetGpuInstanceRemainingCapacityFunc = func(info *nvml.GpuInstanceProfileInfo) (int, nvml.Return) {
		s.mu.Lock()
		defer s.mu.Unlock()
		p, ok := d.profile(info.Id)
		if !ok {
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		return d.remaining(p), nvml.SUCCESS
	}
	d.CreateGpuInstanceWithPlacementFunc = func(info *nvml.GpuInstanceProfileInfo, pl *nvml.GpuInstancePlacement) (nvml.GpuInstance, nvml.Return) {
		s.mu.Lock()
		defer s.mu.Unlock()
		p, ok := d.profile(info.Id)
		if !ok || pl == nil {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		gi, ret := d.create(p, *pl, 0)
		if ret != nvml.SUCCESS {
			return nil, ret
		}
		return gi, ret
	}
	d.CreateGpuInstanceFunc = func(info *nvml.GpuInstanceProfileInfo) (nvml.GpuInstance, nvml.Return) {
		s.mu.Lock()
		defer s.mu.Unlock()
		p, ok := d.profile(info.Id)
		if !ok {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		for _, pl := range p.Placements {
			if d.fits(p, pl) == nvml.SUCCESS {
				return d.create(p, pl, 0)
			}
		}
		return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
	}
	d.GetGpuInstancesFunc = func(info *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstance, nvml.Return) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if d.mig != nvml.DEVICE_MIG_ENABLE {
			return nil, nvml.ERROR_NOT_SUPPORTED
		}
		var out []nvml.GpuInstance
		for _, id := range sortedIDs(d.instances) {
			if gi := d.instances[id]; gi.profile.Id == info.Id {
				out = append(out, gi)
			}
		}
		return out, nvml.SUCCESS
	}
	d.GetGpuInstanceByIdFunc = func(id int) (nvml.GpuInstance, nvml.Return) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if gi := d.instances[uint32(id)]; gi != nil {
			return gi, nvml.SUCCESS
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
}

// recorded reads a value as a capture records it, "N (Return)" or a bare "N" (Success); an
// empty or unreadable one is Not Supported.
func recorded(s string) (int, nvml.Return) {
	num, ret, _ := strings.Cut(s, " (")
	n, err := strconv.Atoi(strings.TrimSpace(num))
	if err != nil {
		return 0, nvml.ERROR_NOT_SUPPORTED
	}
	r, err := parseRet(strings.TrimSuffix(ret, ")"))
	if err != nil {
		return 0, nvml.ERROR_NOT_SUPPORTED
	}
	return n, r
}

func sortedIDs[T any](m map[uint32]T) []uint32 {
	ids := make([]uint32, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// ciSlices is the compute slices of each compute-instance profile index
// (nvml.COMPUTE_INSTANCE_PROFILE_*).
var ciSlices = lazy.Value[map[int]uint32]{New: func() map[int]uint32 {
	return map[int]uint32{
		nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE: 1, nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE: 2,
		nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE: 3, nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE: 4,
		nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE: 7, nvml.COMPUTE_INSTANCE_PROFILE_8_SLICE: 8,
		nvml.COMPUTE_INSTANCE_PROFILE_6_SLICE: 6,
	}
}}

func (gi *factsGI) setFuncs() {
	s := gi.d.s
	gi.GetInfoFunc = func() (nvml.GpuInstanceInfo, nvml.Return) { return gi.info, nvml.SUCCESS }
	// A GPU instance offers the compute-instance profiles of at most its own compute slices.
	gi.GetComputeInstanceProfileInfoFunc = func(index, eng int) (nvml.ComputeInstanceProfileInfo, nvml.Return) {
		if eng != nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED {
			return nvml.ComputeInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
		}
		n, ok := ciSlices.Get()[index]
		if !ok || n > gi.profile.SliceCount {
			return nvml.ComputeInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
		}
		return nvml.ComputeInstanceProfileInfo{Id: uint32(index), SliceCount: n, InstanceCount: gi.profile.SliceCount / n,
			MultiprocessorCount: gi.profile.MultiprocessorCount * n / gi.profile.SliceCount}, nvml.SUCCESS
	}
	gi.CreateComputeInstanceFunc = func(info *nvml.ComputeInstanceProfileInfo) (nvml.ComputeInstance, nvml.Return) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return gi.createCI(info.Id, info.SliceCount)
	}
	gi.GetComputeInstancesFunc = func(info *nvml.ComputeInstanceProfileInfo) ([]nvml.ComputeInstance, nvml.Return) {
		s.mu.Lock()
		defer s.mu.Unlock()
		var out []nvml.ComputeInstance
		for _, id := range sortedIDs(gi.cis) {
			if ci := gi.cis[id]; ci.info.ProfileId == info.Id {
				out = append(out, ci)
			}
		}
		return out, nvml.SUCCESS
	}
	gi.DestroyFunc = func() nvml.Return {
		s.mu.Lock()
		defer s.mu.Unlock()
		if gi.d.instances[gi.info.Id] != gi {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		if len(gi.cis) > 0 {
			return nvml.ERROR_IN_USE // compute instances first, as on the driver
		}
		delete(gi.d.instances, gi.info.Id)
		return nvml.SUCCESS
	}
}

// createCI makes a compute instance of profile index with n slices, with the lock held.
func (gi *factsGI) createCI(index, n uint32) (*factsCI, nvml.Return) {
	used := n
	for _, ci := range gi.cis {
		used += ci.slices
	}
	if n == 0 || used > gi.profile.SliceCount {
		return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
	}
	var id uint32
	for gi.cis[id] != nil {
		id++
	}
	ci := &factsCI{gi: gi, slices: n, info: nvml.ComputeInstanceInfo{Device: gi.d, GpuInstance: gi, Id: id, ProfileId: index}}
	ci.GetInfoFunc = func() (nvml.ComputeInstanceInfo, nvml.Return) { return ci.info, nvml.SUCCESS }
	ci.DestroyFunc = func() nvml.Return {
		gi.d.s.mu.Lock()
		defer gi.d.s.mu.Unlock()
		if gi.cis[ci.info.Id] != ci {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		delete(gi.cis, ci.info.Id)
		return nvml.SUCCESS
	}
	gi.cis[id] = ci
	return ci, nvml.SUCCESS
}

// State is what a Server holds beyond its capture: per GPU (in index order) its MIG
// mode and GPU instances. Saved to a file it carries the replay from one helper process to
// the next (VGPU_HOST_NVML_MOCK_STATE).
type State struct {
	GPUs []GPUState `json:"gpus"`
}

// GPUState is one GPU's MIG mode and instances.
type GPUState struct {
	MigMode   int             `json:"mig_mode"`
	Instances []InstanceState `json:"instances"`
}

// InstanceState is one GPU instance: its id, its profile's ID (info.Id, as nvidia-smi
// prints it), its placement and how many compute instances it holds.
type InstanceState struct {
	ID               uint32 `json:"id"`
	ProfileID        uint32 `json:"profile_id"`
	Start            uint32 `json:"start"`
	Size             uint32 `json:"size"`
	ComputeInstances int    `json:"compute_instances"`
}

// State returns the server's MIG modes and instances.
func (s *Server) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := State{GPUs: []GPUState{}}
	for _, d := range s.devices {
		g := GPUState{MigMode: d.mig, Instances: []InstanceState{}}
		for _, id := range sortedIDs(d.instances) {
			gi := d.instances[id]
			g.Instances = append(g.Instances, InstanceState{ID: id, ProfileID: gi.profile.Id,
				Start: gi.info.Placement.Start, Size: gi.info.Placement.Size, ComputeInstances: len(gi.cis)})
		}
		st.GPUs = append(st.GPUs, g)
	}
	return st
}

// Restore sets the server's MIG modes and instances to st, by the same rules as creating them
// through NVML (an instance that would not fit is an error); each restored GPU instance gets
// its compute instances back as one covering compute instance each.
func (s *Server) Restore(st State) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, g := range st.GPUs {
		if i >= len(s.devices) {
			return fmt.Errorf("state of GPU %d: the capture has %d GPUs", i, len(s.devices))
		}
		d := s.devices[i]
		d.mig, d.instances = g.MigMode, map[uint32]*factsGI{}
		for _, in := range g.Instances {
			p, ok := d.profile(in.ProfileID)
			if !ok {
				return fmt.Errorf("GPU %d: GPU instance %d: GPU %s offers no profile ID %d", i, in.ID, d.f.PCIBusID, in.ProfileID)
			}
			gi, ret := d.create(p, nvml.GpuInstancePlacement{Start: in.Start, Size: in.Size}, in.ID)
			if ret != nvml.SUCCESS {
				return fmt.Errorf("GPU %d: GPU instance %d (profile ID %d at %d+%d): %s", i, in.ID, in.ProfileID, in.Start, in.Size, ret.Error())
			}
			for c := 0; c < in.ComputeInstances; c++ {
				n := gi.profile.SliceCount / uint32(in.ComputeInstances)
				if _, ret := gi.createCI(ciIndex(n), n); ret != nvml.SUCCESS {
					return fmt.Errorf("GPU %d: GPU instance %d: compute instance: %s", i, in.ID, ret.Error())
				}
			}
		}
	}
	return nil
}

func ciIndex(n uint32) uint32 {
	for i, s := range ciSlices.Get() {
		if s == n {
			return uint32(i)
		}
	}
	return 0
}

// LoadState restores the state saved at path; a missing file is the capture's own state.
func (s *Server) LoadState(path string) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read NVML replay state: %w", err)
	}
	var st State
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("NVML replay state %s: %w", path, err)
	}
	if err := s.Restore(st); err != nil {
		return fmt.Errorf("NVML replay state %s: %w", path, err)
	}
	return nil
}

// SaveState writes the server's state to path (through a temporary file and a rename).
func (s *Server) SaveState(path string) error {
	b, err := json.MarshalIndent(s.State(), "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("save NVML replay state: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("save NVML replay state: %w", err)
	}
	return nil
}
