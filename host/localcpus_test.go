package host_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
)

// TestScanReadsLocalCPUsOncePerNode: the kernel prints local_cpulist from the function's NUMA
// node alone, so Scan reads it for the first function of each node (node -1 included) and
// gives the others that list; a function whose numa_node cannot be read gets its own file's.
// The later function of each node here has no local_cpulist file at all: reading it would
// leave its list empty and warn.
func TestScanReadsLocalCPUsOncePerNode(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	gpu := func(addr string, numa int) host.Address {
		return tr.AddPCI(hosttest.PCI{Addr: addr, Vendor: 0x10de, Device: 0x20b5, Class: 0x030200, Driver: "nvidia", NUMA: numa, NUMASet: true})
	}
	n1a, n1b := gpu("0000:41:00.0", 1), gpu("0000:42:00.0", 1)
	noneA, noneB := gpu("0000:01:00.0", -1), gpu("0000:02:00.0", -1)
	odd := gpu("0000:03:00.0", 1)
	for _, a := range []host.Address{n1b, noneB} {
		if err := os.Remove(filepath.Join(tr.DevDir(a), "local_cpulist")); err != nil {
			t.Fatal(err)
		}
	}
	// A numa_node that does not parse: the node is unknown, so the function's own list counts.
	if err := os.WriteFile(filepath.Join(tr.DevDir(odd), "numa_node"), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tr.DevDir(odd), "local_cpulist"), []byte("2\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	inv, devs, _ := scan(t, tr)
	for a, want := range map[host.Address]string{n1a: "8-15", n1b: "8-15", noneA: "0-3", noneB: "0-3", odd: "2"} {
		if got := devs[a].LocalCPUs; got != want {
			t.Errorf("%s: local_cpulist %q, want %q", a, got, want)
		}
	}
	for _, w := range inv.Warnings {
		if strings.Contains(w, "local_cpulist") {
			t.Errorf("warning about local_cpulist: %s", w)
		}
	}
}
