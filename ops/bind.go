package ops

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/vfio"
)

// BindRequest is `bind ADDR...`, POST /v1/bind.
type BindRequest struct {
	// Addresses are the PCI functions whose IOMMU groups move to vfio-pci.
	Addresses []string
	// Force, Persist and DryRun are bind's --force, --persist and --dry-run.
	Force, Persist, DryRun bool
	// Timeout bounds each sysfs write and driver wait; it must be positive (the CLI's
	// default, and the agent's, is vfio.DefaultTimeout).
	Timeout time.Duration
}

// Op is "bind".
func (BindRequest) Op() string { return "bind" }

// Bool is the request's boolean setting by its flag's name.
func (r BindRequest) Bool(name string) bool {
	return map[string]bool{"force": r.Force, "persist": r.Persist, "dry-run": r.DryRun}[name]
}

// IsSet reports whether the request sets the named setting.
func (r BindRequest) IsSet(name string) bool {
	return r.Bool(name) || name == "timeout" && r.Timeout != vfio.DefaultTimeout
}

// UnbindRequest is `unbind ADDR...`, POST /v1/unbind.
type UnbindRequest struct {
	// Addresses are the PCI functions whose IOMMU groups go back to their drivers.
	Addresses []string
	// Force, Persist, DryRun and Reset are unbind's --force, --persist, --dry-run and --reset.
	Force, Persist, DryRun, Reset bool
	// Timeout bounds each sysfs write and driver wait; it must be positive.
	Timeout time.Duration
}

// Op is "unbind".
func (UnbindRequest) Op() string { return "unbind" }

// Bool is the request's boolean setting by its flag's name.
func (r UnbindRequest) Bool(name string) bool {
	return map[string]bool{"force": r.Force, "persist": r.Persist, "dry-run": r.DryRun, "reset": r.Reset}[name]
}

// IsSet reports whether the request sets the named setting.
func (r UnbindRequest) IsSet(name string) bool {
	return r.Bool(name) || name == "timeout" && r.Timeout != vfio.DefaultTimeout
}

// binder builds the Binder of a bind or unbind named op and parses its addresses.
func binder(env Env, op string, addrs []string, timeout time.Duration) (*vfio.Binder, []host.Address, error) {
	if len(addrs) == 0 {
		return nil, nil, Usagef("%s needs at least one PCI address (e.g. 0000:01:00.0)", op)
	}
	var out []host.Address
	for _, s := range addrs {
		a, err := host.ParseAddress(s)
		if err != nil {
			return nil, nil, Usagef("%v", err)
		}
		out = append(out, a)
	}
	if timeout <= 0 {
		return nil, nil, Usagef("--timeout must be positive, got %s", timeout)
	}
	w, m := env.HostIO()
	return &vfio.Binder{Root: env.Root, W: w, Modules: m, Timeout: timeout}, out, nil
}

// Bind is bind: each function's whole IOMMU group moved to vfio-pci, the original drivers
// recorded for unbind; with DryRun, the exact writes and nothing changed.
func Bind(ctx context.Context, env Env, req BindRequest) (*vfio.Result, error) {
	b, addrs, err := binder(env, "bind", req.Addresses, req.Timeout)
	if err != nil {
		return nil, err
	}
	return b.Bind(ctx, addrs, vfio.BindOptions{Force: req.Force, Persist: req.Persist, DryRun: req.DryRun})
}

// Unbind is unbind: the groups bind moved put back on their recorded drivers, and the
// functions released checked (and reset or quarantined) by HandBack.
func Unbind(ctx context.Context, env Env, req UnbindRequest) (*vfio.Result, error) {
	b, addrs, err := binder(env, "unbind", req.Addresses, req.Timeout)
	if err != nil {
		return nil, err
	}
	res, err := b.Unbind(ctx, addrs, vfio.UnbindOptions{Force: req.Force, Persist: req.Persist, DryRun: req.DryRun})
	if err != nil {
		if errors.Is(err, host.ErrNotFound) && !req.DryRun {
			// A function vgpu-host bound has left the bus (removed, or fell off and the
			// kernel removed it): it is quarantined, so that when a rescan brings it back
			// nothing hands it to a VM before a clean check.
			HandBack(ctx, env, b.W, goneFromLedger(b, addrs), "unbind", req.Reset)
		}
		return nil, err
	}
	if !res.DryRun {
		HandBack(ctx, env, b.W, unbound(res), "unbind", req.Reset)
	}
	return res, nil
}

// unbound are the functions an unbind moved off vfio-pci, each with the driver it should be on
// now ("-": none, as it had none before bind).
func unbound(res *vfio.Result) []host.Released {
	var rel []host.Released
	for _, d := range res.Devices {
		if !d.Changed || d.From != vfio.DriverName {
			continue
		}
		drv := d.To
		if drv == "" {
			drv = "-"
		}
		rel = append(rel, host.Released{Address: d.Address, Driver: drv})
	}
	return rel
}

// goneFromLedger are the addresses among addrs that the vfio ledger records as bound by
// vgpu-host and that are no longer on the PCI bus.
func goneFromLedger(b *vfio.Binder, addrs []host.Address) []host.Released {
	l, err := b.Ledger()
	if err != nil {
		return nil
	}
	var rel []host.Released
	for _, a := range addrs {
		if _, ours := l.Lookup(a); ours && !host.OnBus(b.Root, a) {
			rel = append(rel, host.Released{Address: a})
		}
	}
	return rel
}

// HandBack checks the functions an operation op released, resets and quarantines them as
// /etc/vgpu-host/health.yaml (or reset) says, and reports every quarantine as a progress event
// (the CLI prints them on stderr). The operation itself is done: what the check finds does
// not change its exit code, but the next plan, apply, bind or layout refuses a quarantined
// function.
func HandBack(ctx context.Context, env Env, w host.Writer, rel []host.Released, op string, reset bool) []host.HandbackResult {
	if len(rel) == 0 {
		return nil
	}
	pol, err := host.LoadHealthPolicy(env.Root)
	if err != nil {
		env.warn(op, "", "vgpu-host: %v; using reset: %s", err, pol.Reset)
	}
	res, err := host.Handback(ctx, env.Root, w, rel, host.HandbackOptions{Policy: pol, Reset: reset, Op: op})
	if err != nil {
		env.warn(op, "", "vgpu-host: handback check: %v", err)
	}
	for _, r := range res {
		if q := r.Quarantined; q != nil {
			env.warn(op, q.Address.String(), "%s", fmt.Sprintf("vgpu-host: %s quarantined (%s): it is not given to a VM again until `vgpu-host host release-quarantine %s` finds it healthy; record %s; docs/health.md",
				q.Address, q.Reason(), q.Address, q.Path))
		}
	}
	return res
}
