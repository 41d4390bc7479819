package clitree

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/virt/remote"
)

// fetchViaAgent downloads through vgpu-host-agent --fetch-iso (fetchISOFlag says why), its
// progress lines going to progress (nil: discarded): the light CLI's download (a nil
// Env.FetchISO; VGPU_HOST_AGENT_BIN names the downloader). Its error keeps its message and
// sentinels; when ctx ends, the download is stopped with SIGTERM (it removes its partial file).
func fetchViaAgent(ctx context.Context, url, checksum, dest string, progress io.Writer) error {
	helper, err := remote.OpenHelper(AgentBinary, "VGPU_HOST_AGENT_BIN", "downloading an ISO (spec.disks[].url)", errNoAgentBinary)
	if err != nil {
		return fmt.Errorf("fetch %s: %w", url, err)
	}
	defer helper.Close()
	p := helper.Path
	cmd := helper.Command(ctx, fetchISOFlag, url, checksum, dest) // runs the file checked, not the path again
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = progress, &stderr
	err = cmd.Run()
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("fetch %s: %w", url, ctx.Err())
	}
	msg := strings.TrimSpace(stderr.String())
	var we *remote.WireError
	if werr := remote.FromWire(fetchKinds(), msg); !strings.Contains(msg, "\n") && errors.As(werr, &we) {
		return werr
	}
	// Not the downloader's answer: it crashed, or it is an older vgpu-host-agent.
	return fmt.Errorf("fetch %s: %s %s: %w: %s", url, p, fetchISOFlag, err, host.Clip(msg, 400))
}
