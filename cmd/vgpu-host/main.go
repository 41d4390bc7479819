// Command vgpu-host inspects, prepares and attaches GPUs on libvirt/KVM hosts: the command
// tree of internal/clitree, light to start (no net/http, no Prometheus client).
package main

import (
	"os"

	"github.com/vgpu-host/vgpu-host/internal/clitree"
)

func main() {
	os.Exit(clitree.Main(clitree.Env{}, os.Args))
}
