//go:build agent

package clitree

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/vgpu-host/vgpu-host/internal/fetch/httpget"
	"github.com/vgpu-host/vgpu-host/virt/remote"
)

// fetchInProcess says that this binary downloads itself (VGPU_HOST_AGENT_BIN plays no part).
const fetchInProcess = true

// fetchISO downloads in this process: vgpu-host-agent links net/http.
var fetchISO = httpget.Fetch

// fetchMain serves `vgpu-host-agent --fetch-iso URL CHECKSUM DEST` (fetchISOFlag) for
// vgpu-host, before the command tree; ok is false for any other command line. SIGTERM or
// SIGINT stops the download and removes its partial file.
func fetchMain(args []string) (code int, ok bool) {
	if len(args) == 0 || args[0] != fetchISOFlag {
		return 0, false
	}
	if len(args) != 4 {
		fmt.Fprintf(os.Stderr, "%s %s URL CHECKSUM DEST: vgpu-host runs this to download an ISO\n", AgentBinary, fetchISOFlag)
		return exitUsage, true
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := httpget.Fetch(ctx, args[1], args[2], args[3], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, remote.ToWire(fetchKinds(), err))
		return exitCode(err), true
	}
	return 0, true
}
