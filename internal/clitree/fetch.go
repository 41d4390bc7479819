package clitree

import (
	"context"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/virt/remote"
)

// fetchISOFlag makes vgpu-host-agent vgpu-host's downloader: `vgpu-host-agent --fetch-iso URL
// CHECKSUM DEST` downloads URL to DEST (internal/fetch/httpget), printing its progress on
// stdout and, when it fails, the error on stderr in the helpers' wire form (fetchKinds). The
// download needs net/http and crypto/tls, which vgpu-host does not link (their package
// initialisation would cost every command's start); vgpu-host-agent links them anyway, and
// runs this way whether or not an agent is running.
const fetchISOFlag = "--fetch-iso"

// fetchKinds are the error classes of a download that keep their sentinels (exit codes)
// from vgpu-host-agent --fetch-iso back to vgpu-host. A function: a package-level table of
// other packages' errors is filled in by main's initialiser, at every start.
func fetchKinds() []remote.ErrorKind {
	return []remote.ErrorKind{
		{Name: "not-found", Errs: []error{host.ErrNotFound}},
		{Name: "invalid", Errs: []error{host.ErrInvalid}},
		{Name: "unsupported", Errs: []error{host.ErrUnsupported}},
		{Name: "canceled", Errs: []error{context.Canceled}},
		{Name: "deadline", Errs: []error{context.DeadlineExceeded}},
	}
}
