package mig

import (
	"errors"
	"fmt"

	"github.com/vgpu-host/vgpu-host/host"
)

// PendingHolders says, for err a MIG mode change left pending (ErrModePending), who holds the
// NVIDIA device nodes under root now, and how to stop the usual ones (host.DescribeHolders):
// NVIDIA keeps a mode change pending while another process holds the GPU (NVML_ERROR_IN_USE),
// and refuses the GPU reset that would make it take effect. release lets the caller's own NVML
// helper go first, so that it is not listed. "" for any other error (release not called).
func PendingHolders(root host.Root, err error, release func()) string {
	if !errors.Is(err, ErrModePending) {
		return ""
	}
	release()
	hs := host.Holders(root, []string{host.NVIDIADevFamily(root)})
	if len(hs) == 0 {
		return "no process holds an NVIDIA device node now"
	}
	return "holding NVIDIA device nodes now: " + host.DescribeHolders(hs)
}

// WithHolders is err with PendingHolders added when it has something to say: mig apply and
// host layout apply (package ops) and the boot's restore (agent/reconcile) give it.
func WithHolders(root host.Root, err error, release func()) error {
	if s := PendingHolders(root, err, release); s != "" {
		return fmt.Errorf("%w; %s", err, s)
	}
	return err
}
