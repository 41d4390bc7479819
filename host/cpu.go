package host

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// ParseCPUList parses a kernel CPU list ("0-3,8,10-11") into sorted CPU numbers.
func ParseCPUList(s string) ([]int, error) {
	var out []int
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("cpu list %s: bad cpu %s: %w", quoted(s), quoted(lo), ErrInvalid)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a || b-a > 1<<16 {
				return nil, fmt.Errorf("cpu list %s: bad range %s: %w", quoted(s), quoted(part), ErrInvalid)
			}
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	sort.Ints(out)
	return out, nil
}

// FormatCPUList writes CPU numbers as a kernel CPU list ("0-3,8").
func FormatCPUList(cpus []int) string {
	c := append([]int(nil), cpus...)
	sort.Ints(c)
	var parts []string
	for i := 0; i < len(c); {
		j := i
		for j+1 < len(c) && c[j+1] == c[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.Itoa(c[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", c[i], c[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// ThreadSiblings reads each online CPU's SMT siblings (topology/thread_siblings_list), keyed
// by CPU number; the list includes the CPU itself. CPUs without a topology directory
// (offline) are left out.
func ThreadSiblings(root Root) (map[int][]int, error) {
	dir := root.Sys("devices", "system", "cpu")
	ents, err := root.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read cpu topology: %w", err)
	}
	out := map[int][]int{}
	for _, e := range ents {
		n, ok := strings.CutPrefix(e.Name(), "cpu")
		cpu, err := strconv.Atoi(n)
		if !ok || err != nil {
			continue
		}
		b, err := root.ReadHostFile(filepath.Join(dir, e.Name(), "topology", "thread_siblings_list"), 0)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("cpu%d thread siblings: %w", cpu, err)
		}
		sib, err := ParseCPUList(string(b))
		if err != nil {
			return nil, fmt.Errorf("cpu%d thread siblings: %w", cpu, err)
		}
		out[cpu] = sib
	}
	return out, nil
}

// PhysAddrBits returns the host CPU's physical address width, from /proc/cpuinfo's
// "address sizes : 46 bits physical, 48 bits virtual"; 0 when it does not say. A KVM guest can
// be given at most this many (maxphysaddr), and with maxphysaddr passthrough it gets exactly
// this many, which sets the size of its firmware's 64-bit MMIO window.
func PhysAddrBits(root Root) uint {
	b, err := root.ReadHostFile(root.Proc("cpuinfo"), 0)
	if err != nil {
		return 0
	}
	f := strings.Fields(cpuinfoField(string(b), "address sizes"))
	if len(f) >= 2 && f[1] == "bits" {
		if n, err := strconv.Atoi(f[0]); err == nil && n > 0 && n <= 64 {
			return uint(n)
		}
	}
	return 0
}
