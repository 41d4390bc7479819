package domains

import (
	"fmt"
	"strconv"

	"github.com/vgpu-host/vgpu-host/host"
)

func pinAuto(vm *VM) bool { return vm.Spec.CPU.Pin != nil && vm.Spec.CPU.Pin.Auto }

// placePins implements spec.cpu.pin. A list pins vCPU i to the i-th host CPU. auto uses the
// CPUs of the GPU's NUMA node (alloc.CPUSet) grouped into physical cores by their thread
// siblings: the emulator gets the node's first core, and the vCPUs the following cores, a
// guest core's threads on one host core's sibling threads, so that a guest core is a host core.
// When the node has too few CPUs for that, the vCPUs float over the node (cpuset) and a note
// says so. Every choice is recorded in alloc.Notes for plan.
func placePins(vm *VM, alloc *Allocation, siblings map[int][]int) {
	pin := vm.Spec.CPU.Pin
	if pin == nil {
		return
	}
	if !pin.Auto {
		for _, c := range pin.CPUs {
			alloc.VCPUPins = append(alloc.VCPUPins, strconv.Itoa(c))
		}
		return
	}
	if alloc.CPUSet == "" {
		alloc.Notes = append(alloc.Notes, "cpu.pin auto: no NUMA placement (no physical GPU with a node, or offline), vCPUs not pinned")
		return
	}
	cpus, err := host.ParseCPUList(alloc.CPUSet)
	if err != nil {
		alloc.Notes = append(alloc.Notes, fmt.Sprintf("cpu.pin auto: %v, vCPUs not pinned", err))
		return
	}
	cores := physicalCores(cpus, siblings)
	t, _ := topology(vm.Spec.VCPUs, vm.Spec.CPU.Topology)
	// A guest core goes on one host core when the host core has as many threads; otherwise
	// each of its threads gets a host core of its own.
	perHost := t.Threads
	if len(cores) > 0 && len(cores[0]) < t.Threads {
		perHost = 1
	}
	need := (vm.Spec.VCPUs + perHost - 1) / perHost // host cores for the vCPUs
	if len(cores) < need+1 {
		alloc.Notes = append(alloc.Notes, fmt.Sprintf("cpu.pin auto: node %d has %d cores for %d vCPU cores and the emulator; vCPUs float over %s", alloc.NUMANode, len(cores), need, alloc.CPUSet))
		return
	}
	alloc.EmulatorPin = host.FormatCPUList(cores[0])
	v := 0
	for _, core := range cores[1 : need+1] {
		for j := 0; j < perHost && v < vm.Spec.VCPUs; j++ {
			if perHost > 1 {
				alloc.VCPUPins = append(alloc.VCPUPins, strconv.Itoa(core[j]))
			} else {
				alloc.VCPUPins = append(alloc.VCPUPins, host.FormatCPUList(core))
			}
			v++
		}
	}
	alloc.Notes = append(alloc.Notes, fmt.Sprintf("cpu.pin auto: NUMA node %d (%s, %d cores): emulator on %s, vCPUs 0-%d on %s (one guest core per host core)",
		alloc.NUMANode, alloc.CPUSet, len(cores), alloc.EmulatorPin, vm.Spec.VCPUs-1, pinSummary(alloc.VCPUPins)))
}

// physicalCores groups cpus into cores by their thread siblings, in order of each core's
// first CPU; a CPU without sibling information is a core of its own. Only CPUs in cpus count.
func physicalCores(cpus []int, siblings map[int][]int) [][]int {
	in := map[int]bool{}
	for _, c := range cpus {
		in[c] = true
	}
	done := map[int]bool{}
	var out [][]int
	for _, c := range cpus {
		if done[c] {
			continue
		}
		core := []int{c}
		for _, s := range siblings[c] {
			if s != c && in[s] && !done[s] {
				core = append(core, s)
			}
		}
		for _, s := range core {
			done[s] = true
		}
		out = append(out, core)
	}
	return out
}

func pinSummary(pins []string) string {
	s := ""
	for i, p := range pins {
		if i > 0 {
			s += " "
		}
		s += p
	}
	return s
}
