package ops

import (
	"context"

	"github.com/vgpu-host/vgpu-host/lifecycle"
)

// VerifyRequest is `verify NAME`: whether every device assigned to the VM is in its guest.
type VerifyRequest struct {
	// Name is the VM (its libvirt domain).
	Name string `json:"name"`
}

// Op is "verify".
func (VerifyRequest) Op() string { return "verify" }

// Bool is false: verify has no boolean setting.
func (VerifyRequest) Bool(string) bool { return false }

// IsSet is false: verify has no flag the agent takes.
func (VerifyRequest) IsSet(string) bool { return false }

// VerifyResult is what verify found, device by device: its JSON is the command's --output json.
type VerifyResult = lifecycle.VerifyResult

// Verify is verify: the running QEMU asked (QMP query-pci through libvirt) for every hostdev
// and virtio GPU of the domain. A device missing in the guest comes back with the result and
// an error (exit 1); no such domain exits 6 with no result.
func Verify(ctx context.Context, env Env, req VerifyRequest) (*VerifyResult, error) {
	lc, done, err := env.lifecycle("verify", lifecycle.Options{})
	if err != nil {
		return nil, err
	}
	defer done()
	return lc.Verify(ctx, req.Name)
}
