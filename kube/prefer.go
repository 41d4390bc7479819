package kube

import (
	"fmt"
	"sort"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/mdev"
)

// Prefer chooses size devices of r among available (which includes mustInclude) for the
// kubelet's GetPreferredAllocation, with vgpu-host's own placement (mdev.Place): devices are
// grouped into pools — the parent GPU of mdev instances and VFs, the NUMA node of whole
// GPUs — and the pools are filled best-fit: the pool with the fewest free devices that still
// fits the whole request wins, so big holes stay for big requests; pools on the NUMA node of
// the devices the kubelet must include come first. The answer lists mustInclude first.
//
// Example: two GPUs free on NUMA node 0 and three on node 1, a request for 2: both from node
// 0 (it fits exactly and leaves node 1's three together).
func Prefer(r *Resource, available, mustInclude []string, size int) ([]string, error) {
	if size <= 0 {
		return nil, fmt.Errorf("preferred allocation of %s: size %d: %w", r.Name, size, host.ErrInvalid)
	}
	byID := map[string]*Device{}
	for i := range r.Devices {
		byID[r.Devices[i].ID] = &r.Devices[i]
	}
	out := []string{}
	taken := map[string]bool{}
	numa := -1
	for _, id := range mustInclude {
		if taken[id] {
			continue
		}
		d, ok := byID[id]
		if !ok {
			return nil, fmt.Errorf("preferred allocation of %s: must-include device %s: %w", r.Name, id, host.ErrNotFound)
		}
		out = append(out, id)
		taken[id] = true
		if numa < 0 {
			numa = d.NUMA
		}
	}
	left := size - len(out)
	if left <= 0 {
		return out[:size], nil
	}
	// Pools of free devices, in a stable order.
	pools := map[string][]string{}
	poolNUMA := map[string]int{}
	for _, id := range available {
		d, ok := byID[id]
		if !ok || taken[id] || !d.Healthy {
			continue
		}
		p := poolOf(d)
		pools[p] = append(pools[p], id)
		poolNUMA[p] = d.NUMA
	}
	const profile = "device"
	parents := make([]mdev.Parent, 0, len(pools))
	for p, ids := range pools {
		sort.Strings(ids)
		parents = append(parents, mdev.Parent{Name: p, NUMA: poolNUMA[p],
			Types: []mdev.Type{{ID: profile, Name: profile, Available: len(ids)}}})
	}
	pl, err := mdev.Place(mdev.Request{Profile: profile, Count: left, NUMA: numa}, parents)
	if err != nil {
		return nil, fmt.Errorf("preferred allocation of %d× %s: %w", size, r.Name, err)
	}
	for _, a := range pl.Assignments {
		out = append(out, pools[a.Parent][:a.Count]...)
		pools[a.Parent] = pools[a.Parent][a.Count:]
	}
	return out, nil
}

// poolOf is the placement pool of a device: its parent GPU, else its NUMA node.
func poolOf(d *Device) string {
	if d.Parent != "" {
		return d.Parent
	}
	return fmt.Sprintf("numa%d", d.NUMA)
}
