// Command vgpu-host-agent is the host agent: vgpu-host's command tree (internal/clitree) with
// what only the agent links (internal/agentcmd): its server over the unix socket, Prometheus
// metrics, the boot reconcile, the drift watcher, and the HTTP download that vgpu-host runs as
// `vgpu-host-agent --fetch-iso`. `vgpu-host agent` replaces itself with this binary.
package main

import (
	"os"

	"github.com/vgpu-host/vgpu-host/internal/agentcmd"
	"github.com/vgpu-host/vgpu-host/internal/clitree"
	vremote "github.com/vgpu-host/vgpu-host/virt/remote"
)

// init names the process (it is started through /proc/self/fd/N): see remote.NameProcess.
func init() { vremote.NameProcess() }

func main() {
	if code, ok := agentcmd.FetchMain(os.Args[1:]); ok {
		os.Exit(code)
	}
	env := agentcmd.Env()
	fakeKernel(&env)
	os.Exit(clitree.Main(env, os.Args))
}
