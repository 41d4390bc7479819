package mdev

import (
	"fmt"
	"strings"

	"github.com/vgpu-host/vgpu-host/mig"
	"github.com/vgpu-host/vgpu-host/vgpu"
)

// migCap is how many instances of type t parent p can still take when t is MIG-backed
// (vgpu.MIGBacking): each instance runs on a GPU instance of t's profile, and GPU instances
// occupy fixed slices, so the new ones must fit on the GPU's slices beside the GPU instances
// that p's running MIG-backed instances hold. The geometry is NVIDIA's documented one for the
// board (mig.DocumentedGPU; NVML's exact view is `vgpu-host mig show`). ok is false when t is
// time-sliced; why says what limits it. With st (NVML's view) listing p's GPU, it is exact.
func migCap(p Parent, t Type, st *mig.State) (n int, why string, ok bool) {
	profile, board, backed := vgpu.MIGBacking(t.Name)
	if !backed {
		return 0, "", false
	}
	if st != nil {
		if g, err := st.GPU(p.Name); err == nil && g.Capable {
			return migCapNVML(p, g, profile)
		}
	}
	var offered, running []string
	for _, pt := range p.Types {
		prof, _, b := vgpu.MIGBacking(pt.Name)
		if !b {
			continue
		}
		offered = append(offered, prof)
		for range pt.Instances {
			running = append(running, prof)
		}
	}
	compute := 7
	if strings.HasPrefix(board, "A30") {
		compute = 4
	}
	g, err := mig.DocumentedGPU(p.Name, compute, append(offered, profile))
	if err != nil {
		return 0, "", false // a geometry vgpu-host does not know: the driver's count stands
	}
	n, err = mig.Capacity(g, profile, running)
	if n == 0 && err != nil {
		return 0, fmt.Sprintf("MIG: %v", err), true
	}
	if len(running) > 0 {
		return n, fmt.Sprintf("MIG: %d× %s fit beside the GPU instances of its %d running MIG-backed vGPU(s)", n, profile, len(running)), true
	}
	return n, fmt.Sprintf("MIG: %d× %s fit on its slices", n, profile), true
}

// migCapNVML counts on NVML's view g of p's GPU: the GPU instances of profile that no running
// MIG-backed vGPU of p uses, plus the instances of profile that still fit beside all of g's.
func migCapNVML(p Parent, g mig.GPU, profile string) (int, string, bool) {
	if _, err := g.LookupProfile(profile); err != nil {
		return 0, fmt.Sprintf("MIG (NVML): %v", err), true
	}
	free := 0
	for _, in := range g.Instances {
		if strings.EqualFold(in.Profile, profile) {
			free++
		}
	}
	for _, pt := range p.Types {
		if prof, _, b := vgpu.MIGBacking(pt.Name); b && strings.EqualFold(prof, profile) {
			free -= len(pt.Instances)
		}
	}
	free = max(free, 0)
	more, err := mig.Capacity(g, profile, nil)
	if free+more == 0 && err != nil {
		return 0, fmt.Sprintf("MIG (NVML): no free %s GPU instance, and %v", profile, err), true
	}
	return free + more, fmt.Sprintf("MIG (NVML): %d free %s GPU instance(s), room for %d more", free, profile, more), true
}
