package ops

import (
	"context"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/mdev"
)

// VFResult is what vf enable or vf disable did: the PF as it is now, or with a dry run the
// report of the writes it would make (its JSON output then).
type VFResult struct {
	PF     mdev.PF
	DryRun *DryRunReport
}

// Value is the result as --output json prints it.
func (r *VFResult) Value() any {
	if r.DryRun != nil {
		return r.DryRun
	}
	return r.PF
}

// VFEnableRequest is `vf enable PF`, POST /v1/vfs with action enable.
type VFEnableRequest struct {
	// PF is the physical function's PCI address.
	PF string
	// Count is the number of VFs it must have (--count).
	Count int
	// Driver is mdev.DriverVFIO or mdev.DriverKeep (--driver; the CLI's default is keep).
	Driver string
	// Persist, Force and DryRun are --persist, --force and --dry-run.
	Persist, Force, DryRun bool
	// Timeout bounds each sysfs write and wait (mdev.DefaultTimeout when not positive).
	Timeout time.Duration
}

// Op is "vf enable".
func (VFEnableRequest) Op() string { return "vf enable" }

// Bool is the request's boolean setting by its flag's name.
func (r VFEnableRequest) Bool(name string) bool {
	switch name {
	case "persist":
		return r.Persist
	case "force":
		return r.Force
	case "dry-run":
		return r.DryRun
	}
	return false
}

// IsSet reports whether the request sets the named setting.
func (r VFEnableRequest) IsSet(name string) bool {
	switch name {
	case "count":
		return true
	case "driver":
		return r.Driver != mdev.DriverKeep
	case "timeout":
		return r.Timeout != mdev.DefaultTimeout
	}
	return r.Bool(name)
}

// VFDisableRequest is `vf disable PF`, POST /v1/vfs with action disable.
type VFDisableRequest struct {
	// PF is the physical function's PCI address.
	PF string
	// Persist, Force, DryRun and Reset are --persist, --force, --dry-run and --reset.
	Persist, Force, DryRun, Reset bool
	// Timeout bounds each sysfs write and wait (mdev.DefaultTimeout when not positive).
	Timeout time.Duration
}

// Op is "vf disable".
func (VFDisableRequest) Op() string { return "vf disable" }

// Bool is the request's boolean setting by its flag's name.
func (r VFDisableRequest) Bool(name string) bool {
	switch name {
	case "persist":
		return r.Persist
	case "force":
		return r.Force
	case "dry-run":
		return r.DryRun
	case "reset":
		return r.Reset
	}
	return false
}

// IsSet reports whether the request sets the named setting.
func (r VFDisableRequest) IsSet(name string) bool {
	if name == "timeout" {
		return r.Timeout != mdev.DefaultTimeout
	}
	return r.Bool(name)
}

// pfAddress parses a request's PF address.
func pfAddress(s string) (host.Address, error) {
	a, err := host.ParseAddress(s)
	if err != nil {
		return host.Address{}, Usagef("%v", err)
	}
	return a, nil
}

// Check refuses a request whose PF address or driver is not one (exit 2).
func (req VFEnableRequest) Check() error {
	if _, err := pfAddress(req.PF); err != nil {
		return err
	}
	if req.Driver != mdev.DriverKeep && req.Driver != mdev.DriverVFIO {
		return Usagef("--driver %q: use vfio-pci or keep", req.Driver)
	}
	return nil
}

// persistFiles is what persist would write, for a dry run's report.
func persistFiles(m *mdev.Manager, persist bool) []string {
	if persist {
		return []string{m.SRIOVPath()}
	}
	return nil
}

// VFEnable is vf enable: the PF made to have exactly Count VFs; with DryRun, the exact writes
// and nothing changed.
func VFEnable(ctx context.Context, env Env, req VFEnableRequest) (*VFResult, error) {
	if err := req.Check(); err != nil {
		return nil, err
	}
	a, _ := host.ParseAddress(req.PF)
	m, rec, done := MdevManager(env, req.Timeout, req.DryRun)
	defer done()
	pf, err := m.EnableVFs(ctx, a, req.Count, mdev.EnableOptions{Driver: req.Driver, Persist: req.Persist, Force: req.Force})
	if err != nil {
		return nil, err
	}
	if rec != nil {
		return &VFResult{PF: pf, DryRun: DryRun(rec, persistFiles(m, req.Persist), nil)}, nil
	}
	return &VFResult{PF: pf}, nil
}

// VFDisable is vf disable: every VF of the PF removed and the sriov_drivers_autoprobe value
// vf enable changed restored, the PF handed back (HandBack, checked only); with DryRun, the
// exact writes and nothing changed.
func VFDisable(ctx context.Context, env Env, req VFDisableRequest) (*VFResult, error) {
	a, err := pfAddress(req.PF)
	if err != nil {
		return nil, err
	}
	m, rec, done := MdevManager(env, req.Timeout, req.DryRun)
	defer done()
	pf, err := m.DisableVFsWith(ctx, a, mdev.DisableOptions{Persist: req.Persist, Force: req.Force})
	if err != nil {
		return nil, err
	}
	if rec != nil {
		return &VFResult{PF: pf, DryRun: DryRun(rec, persistFiles(m, req.Persist), nil)}, nil
	}
	HandBack(ctx, env, m.W, []host.Released{{Address: a, CheckOnly: true}}, "vf disable", req.Reset)
	return &VFResult{PF: pf}, nil
}

// VFListRequest is `vf list [PF]`: SR-IOV physical functions and their VFs.
type VFListRequest struct {
	// PF is one physical function's PCI address; empty: every SR-IOV capable function.
	PF string `json:"pf,omitempty"`
}

// Op is "vf list".
func (VFListRequest) Op() string { return "vf list" }

// Bool is false: vf list has no boolean setting.
func (VFListRequest) Bool(string) bool { return false }

// IsSet is false: vf list has no flag.
func (VFListRequest) IsSet(string) bool { return false }

// VFListResult is what vf list lists: its JSON is the command's --output json.
type VFListResult []mdev.PF

// VFList is vf list: every SR-IOV capable function with its VFs, or the PF named (exit 2 for
// an address that is not one).
func VFList(_ context.Context, env Env, req VFListRequest) (*VFListResult, error) {
	m, _, done := MdevManager(env, 0, false)
	defer done()
	var pfs []mdev.PF
	if req.PF != "" {
		a, err := pfAddress(req.PF)
		if err != nil {
			return nil, err
		}
		pf, err := m.ReadPF(a)
		if err != nil {
			return nil, err
		}
		pfs = []mdev.PF{pf}
	} else {
		var err error
		if pfs, err = m.ListPFs(); err != nil {
			return nil, err
		}
	}
	res := VFListResult(pfs)
	return &res, nil
}
