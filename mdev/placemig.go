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
// time-sliced; why says what limits it.
func migCap(p Parent, t Type) (n int, why string, ok bool) {
	profile, board, backed := vgpu.MIGBacking(t.Name)
	if !backed {
		return 0, "", false
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
