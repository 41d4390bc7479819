package ops

import (
	"context"

	"github.com/vgpu-host/vgpu-host/host"
)

// ReleaseQuarantineRequest is `host release-quarantine ADDR`: check a quarantined device
// again and, when it is healthy, remove its quarantine record.
type ReleaseQuarantineRequest struct {
	// Address is the PCI function to release.
	Address host.Address `json:"address"`
}

// Op is "host release-quarantine".
func (ReleaseQuarantineRequest) Op() string { return "host release-quarantine" }

// Bool is false: host release-quarantine has no boolean setting.
func (ReleaseQuarantineRequest) Bool(string) bool { return false }

// IsSet is false: host release-quarantine has no flag.
func (ReleaseQuarantineRequest) IsSet(string) bool { return false }

// ReleaseQuarantineResult is what host release-quarantine did: its JSON is the command's
// --output json.
type ReleaseQuarantineResult struct {
	Address host.Address `json:"address"`
	// Health is the check just taken.
	Health host.DeviceHealth `json:"health"`
	// Released: the device was quarantined and its record is removed.
	Released bool `json:"released"`
	// Was is the quarantine record released (nil: there was none).
	Was *host.Quarantine `json:"-" yaml:"-"`
}

// ReleaseQuarantine is host release-quarantine: the device checked as a handback checks it;
// healthy, its quarantine record (if any) is removed and the check recorded; still failing,
// the record stays and the error names the reasons (host.ReleaseQuarantine's).
func ReleaseQuarantine(_ context.Context, env Env, req ReleaseQuarantineRequest) (*ReleaseQuarantineResult, error) {
	q, err := host.LoadQuarantine(env.Root, req.Address)
	if err != nil {
		return nil, err
	}
	h, err := host.ReleaseQuarantine(env.Root, req.Address, env.now().UTC())
	if err != nil {
		return nil, err
	}
	return &ReleaseQuarantineResult{Address: req.Address, Health: h, Released: q != nil, Was: q}, nil
}
