// Command vgpu-host inspects, prepares and attaches GPUs on libvirt/KVM hosts: the command
// tree of internal/clitree, light to start (no net/http, no Prometheus client). make
// build-static links godebug.default in as its runtime defaults: no transparent huge pages for
// its heap, which a short run would have had zeroed 2 MB at a time (#32).
package main

import (
	"os"

	"github.com/vgpu-host/vgpu-host/internal/clitree"
)

func main() {
	os.Exit(clitree.Main(clitree.Env{}, os.Args))
}
