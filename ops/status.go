package ops

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/ledger"
	"github.com/vgpu-host/vgpu-host/lifecycle"
)

// CheckRequest is `check`, GET /v1/check.
type CheckRequest struct{}

// Op is "check".
func (CheckRequest) Op() string { return "check" }

// Bool is false: check has no boolean setting.
func (CheckRequest) Bool(string) bool { return false }

// IsSet is false: check has no setting.
func (CheckRequest) IsSet(string) bool { return false }

// Check is check: the host's readiness. When nothing can be assigned the report comes back
// with an error that exits 3 (the report is still the answer).
func Check(_ context.Context, env Env, _ CheckRequest) (*host.Readiness, error) {
	r, err := host.Check(env.Root)
	if err != nil {
		return nil, err
	}
	if !r.Assignable {
		return r, fmt.Errorf("check %s: no GPU or vGPU can be assigned to a VM (virtio-gpu remains): %w", env.Root.Dir(), host.ErrNotReady)
	}
	return r, nil
}

// StatusRequest is `status [NAME...]`, GET /v1/status.
type StatusRequest struct {
	// Names are the VMs to list; none: every VM in the ledger.
	Names []string
}

// Op is "status".
func (StatusRequest) Op() string { return "status" }

// Bool is false: status has no boolean setting.
func (StatusRequest) Bool(string) bool { return false }

// IsSet is false: status has no flag of its own the agent takes.
func (StatusRequest) IsSet(string) bool { return false }

// StatusResult is what status lists.
type StatusResult struct {
	VMs []lifecycle.VMStatus
}

// Status is status: the VMs in the ledger, or those named, with their devices and libvirt
// state. A damaged ledger lists the entries that are intact and fails with the reason (exit
// 1); a named VM not in the ledger fails with exit 6 after the others are listed.
func Status(ctx context.Context, env Env, req StatusRequest) (*StatusResult, error) {
	lc, conn, err := env.lifecycle(lifecycle.Options{})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	all, damaged := lc.Status(ctx)
	if all == nil {
		return nil, damaged
	}
	st, missing := all, []string(nil)
	if len(req.Names) > 0 {
		st = []lifecycle.VMStatus{}
		for _, n := range req.Names {
			if i := slices.IndexFunc(all, func(s lifecycle.VMStatus) bool { return s.Name == n }); i >= 0 {
				st = append(st, all[i])
			} else {
				missing = append(missing, strconv.Quote(n))
			}
		}
	}
	res := &StatusResult{VMs: st}
	if len(missing) > 0 {
		return res, errors.Join(damaged, fmt.Errorf("status: no VM %s in the ledger %s (vgpu-host did not create it, or it was destroyed): %w",
			strings.Join(missing, ", "), ledger.Open(env.Root).Path(), host.ErrNotFound))
	}
	return res, damaged
}
