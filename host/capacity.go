package host

// Capacity answers "what can this parent still give?" as the most instances any single one of
// its types can still create now: the largest available_instances, not their sum.
//
// A parent's per-type available_instances are alternatives, not a budget to add up. NVIDIA's
// mdev driver (vGPU up to 16.x) runs one type per physical GPU at a time: on an idle A100 each
// of its six types reports its own maximum (20× A100-2C, 10× A100-4C...), and creating one
// instance of any type makes every other type report 0. The kernel's mbochs sample and Intel
// GVT-g share one budget (mbochs' memory, GVT-g's aperture) between their types, so taking
// instances of one type lowers the others. Summing the types of the A100 above reports 45
// instances where the GPU gives at most 20. Placement keeps using each type's own
// available_instances (MdevType.AvailableInstances); Capacity is the one number for the
// parent as a whole (`vgpu-host check`).
func (p MdevParent) Capacity() int {
	best := 0
	for _, t := range p.Types {
		best = max(best, t.AvailableInstances)
	}
	return best
}
