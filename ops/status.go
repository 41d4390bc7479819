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
	inv, err := host.Scan(env.Root)
	if err != nil {
		return nil, err
	}
	r := host.CheckInventory(env.Root, inv)
	if env.GPUNames != nil {
		nameGPUs(r, inv, env.GPUNames(inv))
	}
	if !r.Assignable {
		return r, fmt.Errorf("check %s: no GPU or vGPU can be assigned to a VM (virtio-gpu remains): %w", env.Root.Dir(), host.ErrNotReady)
	}
	return r, nil
}

// nameGPUs names each GPU of r as inspect's table does (host.Device.TitleWith): a GPU pci.ids
// does not name (Debian 12's lacks the H200) gets the product name in names (by address).
func nameGPUs(r *host.Readiness, inv *host.Inventory, names map[string]string) {
	if len(names) == 0 {
		return
	}
	byAddr := map[host.Address]*host.Device{}
	for i := range inv.Devices {
		byAddr[inv.Devices[i].Address] = &inv.Devices[i]
	}
	for i := range r.GPUs {
		if d := byAddr[r.GPUs[i].Address]; d != nil {
			r.GPUs[i].Name = d.TitleWith(names[d.Address.String()])
		}
	}
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
	lc, done, err := env.lifecycle("status", lifecycle.Options{})
	if err != nil {
		return nil, err
	}
	defer done()
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

// DestroyRequest is `destroy NAME...`, DELETE /v1/vms/{name}.
type DestroyRequest struct {
	// Names are the VMs (the CLI reads a spec file's metadata.name for it).
	Names []string
	// Reset is --reset: every released device reset and checked again (docs/health.md).
	Reset bool
}

// Op is "destroy".
func (DestroyRequest) Op() string { return "destroy" }

// Bool is the request's boolean setting by its flag's name.
func (r DestroyRequest) Bool(name string) bool { return name == "reset" && r.Reset }

// IsSet reports whether the request sets the named setting.
func (r DestroyRequest) IsSet(name string) bool { return r.Bool(name) }

// Destroy is destroy: each VM's journal undone, newest first, and the functions it released
// handed back. A record for each VM destroyed; one that failed has none (its error decides
// the exit code), so a failed destroy is never reported as done. Nothing destroyed and an
// error: no result.
func Destroy(ctx context.Context, env Env, req DestroyRequest) ([]*lifecycle.DestroyResult, error) {
	if len(req.Names) == 0 {
		return nil, Usagef("destroy needs at least one VM name or spec file")
	}
	// Every name first: a malformed one is a usage error and nothing is destroyed. A VM
	// name is a file name in the ledger and a domain name: "../../etc" is a malformed name
	// (exit 2), not a VM that does not exist (exit 6).
	for _, n := range req.Names {
		if err := host.CheckComponent("VM name", n); err != nil {
			return nil, err
		}
	}
	lc, done, err := env.lifecycle("destroy", lifecycle.Options{})
	if err != nil {
		return nil, err
	}
	defer done()
	results := []*lifecycle.DestroyResult{}
	var firstErr error
	for _, name := range req.Names {
		r, err := lc.Destroy(ctx, name)
		if err == nil {
			results = append(results, r)
		} else if firstErr == nil {
			firstErr = err
		}
	}
	if len(results) == 0 && firstErr != nil {
		return nil, firstErr // nothing was destroyed: nothing on stdout
	}
	w, _ := env.HostIO()
	for _, r := range results {
		HandBack(ctx, env, w, ReleasedBy(r), "destroy "+r.VM, req.Reset)
	}
	return results, firstErr
}

// ReleasedBy are the PCI functions a destroy gave back: whole functions and the VFs of
// vendor vGPU instances. An mdev instance is gone with its UUID; its parent is checked when
// `mdev remove` hands it back.
func ReleasedBy(r *lifecycle.DestroyResult) []host.Released {
	var rel []host.Released
	for _, c := range r.Released {
		if c.Kind != ledger.KindPCI && c.Kind != ledger.KindVendorVGPU {
			continue
		}
		if a, err := host.ParseAddress(c.ID); err == nil {
			rel = append(rel, host.Released{Address: a})
		}
	}
	return rel
}
