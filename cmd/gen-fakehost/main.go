// Command gen-fakehost writes a generated fake host tree (sysfs, procfs, devfs) for benchmarks:
//
//	go run ./cmd/gen-fakehost -size big DIR     # ~2,000 PCI functions, 8 GPUs behind PCIe switches
//	go run ./cmd/gen-fakehost -size small DIR   # a workstation
//	go run ./cmd/gen-fakehost -size gpu64 DIR   # 64 GPUs on 8 NUMA nodes (hosttest.GPUHost64)
//
// DIR must not exist or be empty. The tree carries `config` files so lspci can read it too.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/vgpu-host/vgpu-host/host/hosttest"
)

func main() {
	size := flag.String("size", "big", "host size: big (~2,000 functions), small or gpu64 (64 GPUs)")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: gen-fakehost [-size big|small|gpu64] DIR")
		os.Exit(2)
	}
	spec, ok := map[string]hosttest.HostSpec{"big": hosttest.BenchHost, "small": hosttest.SmallHost, "gpu64": hosttest.GPUHost64}[*size]
	if !ok {
		fmt.Fprintf(os.Stderr, "gen-fakehost: unknown -size %q: use big, small or gpu64\n", *size)
		os.Exit(2)
	}
	dir := flag.Arg(0)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "gen-fakehost:", err)
		os.Exit(1)
	}
	if ents, _ := os.ReadDir(dir); len(ents) > 0 {
		fmt.Fprintf(os.Stderr, "gen-fakehost: %s is not empty\n", dir)
		os.Exit(1)
	}
	t := hosttest.New(hosttest.ProgramTB("gen-fakehost", dir))
	t.GenerateHost(spec)
	fmt.Printf("%d\n", len(t.Addresses()))
}
