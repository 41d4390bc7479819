package ops

import (
	"context"

	"github.com/vgpu-host/vgpu-host/mdev"
)

// InstallUnitRequest is `host install-unit`: write and enable the systemd unit that runs
// `EXEC host restore` at boot (mdev.UnitName) under the root's /etc/systemd/system.
type InstallUnitRequest struct {
	// Exec is the absolute path of the vgpu-host binary the unit runs (--exec; the CLI's
	// request builder puts this binary's path when it is not given). It is only written into
	// the unit: nothing opens or resolves it.
	Exec string `json:"exec"`
	// DryRun: report the files it would write; write none (--dry-run).
	DryRun bool `json:"dry_run,omitempty"`
}

// Op is "host install-unit".
func (InstallUnitRequest) Op() string { return "host install-unit" }

// Bool is the request's boolean setting by its flag's name.
func (r InstallUnitRequest) Bool(name string) bool { return name == "dry-run" && r.DryRun }

// IsSet reports whether the request sets the named setting.
func (r InstallUnitRequest) IsSet(name string) bool {
	if name == "exec" {
		return r.Exec != ""
	}
	return r.Bool(name)
}

// Check refuses a binary path the unit cannot run as written (mdev.CheckUnitExec): a relative
// one, one with a space, quote, %, \, ';' or a control character (exit 2).
func (r InstallUnitRequest) Check() error { return mdev.CheckUnitExec(r.Exec) }

// InstallUnitResult is what host install-unit wrote (or with DryRun would write): its JSON is
// the command's --output json.
type InstallUnitResult struct {
	DryRun bool `json:"dry_run"`
	// Exec is the binary the unit runs.
	Exec string `json:"exec"`
	// Unit is the unit file's path.
	Unit string `json:"unit"`
	// Written are the files written (the unit, the multi-user.target.wants link); empty when
	// the unit was installed and enabled already.
	Written []string `json:"written"`
}

// InstallUnit is host install-unit: the unit for req.Exec written and enabled as `systemctl
// enable` does, an identical one left alone (mdev.Manager.InstallUnit).
func InstallUnit(_ context.Context, env Env, req InstallUnitRequest) (*InstallUnitResult, error) {
	if err := req.Check(); err != nil {
		return nil, err
	}
	m, _, done := MdevManager(env, 0, req.DryRun)
	defer done()
	wrote, err := m.InstallUnit(req.Exec)
	if err != nil {
		return nil, err
	}
	if wrote == nil {
		wrote = []string{}
	}
	return &InstallUnitResult{DryRun: m.DryRun, Exec: req.Exec, Unit: m.UnitPath(), Written: wrote}, nil
}
