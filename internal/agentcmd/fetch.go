package agentcmd

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/vgpu-host/vgpu-host/internal/clitree"
	"github.com/vgpu-host/vgpu-host/internal/fetch/httpget"
	"github.com/vgpu-host/vgpu-host/virt/remote"
)

// fetchISO downloads in this process (Env.FetchISO): vgpu-host-agent links net/http, and
// VGPU_HOST_AGENT_BIN plays no part.
func fetchISO(ctx context.Context, url, checksum, dest string, progress io.Writer) error {
	return httpget.Fetch(ctx, url, checksum, dest, progress)
}

// FetchMain serves `vgpu-host-agent --fetch-iso URL CHECKSUM DEST` (clitree.FetchISOFlag) for
// vgpu-host, before the command tree; ok is false for any other command line. SIGTERM or
// SIGINT stops the download and removes its partial file.
func FetchMain(args []string) (code int, ok bool) {
	if len(args) == 0 || args[0] != clitree.FetchISOFlag {
		return 0, false
	}
	if len(args) != 4 {
		fmt.Fprintf(os.Stderr, "%s %s URL CHECKSUM DEST: vgpu-host runs this to download an ISO\n", clitree.AgentBinary, clitree.FetchISOFlag)
		return clitree.ExitUsage, true
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := httpget.Fetch(ctx, args[1], args[2], args[3], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, remote.ToWire(clitree.FetchKinds(), err))
		return clitree.ExitCode(err), true
	}
	return 0, true
}
