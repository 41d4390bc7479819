package ops

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/lifecycle"
)

// MigrateRequest is `migrate VM --to URI` (and `plan --migrate VM`, a dry run): a running VM
// moved live to another host run by vgpu-host, with an equivalent vGPU there.
type MigrateRequest struct {
	// VM is the VM's name.
	VM string `json:"vm"`
	// To is the target's libvirt URI as this host's libvirtd reaches it (--to).
	To string `json:"to"`
	// TargetCmd is how to run vgpu-host on the target, word by word, no shell (--target-cmd);
	// none: ssh to the host of a qemu+ssh To.
	TargetCmd []string `json:"target_cmd,omitempty"`
	// MigrateURI is where QEMU's migration stream goes, tcp://ADDR[:PORT] (--migrate-uri).
	MigrateURI string `json:"migrate_uri,omitempty"`
	// CopyStorage, SharedStorage, DryRun and Reset are --copy-storage, --shared-storage,
	// --dry-run and --reset.
	CopyStorage   bool `json:"copy_storage,omitempty"`
	SharedStorage bool `json:"shared_storage,omitempty"`
	DryRun        bool `json:"dry_run,omitempty"`
	Reset         bool `json:"reset,omitempty"`
}

// Op is "migrate".
func (MigrateRequest) Op() string { return "migrate" }

// Bool is the request's boolean setting by its flag's name.
func (r MigrateRequest) Bool(name string) bool {
	switch name {
	case "copy-storage":
		return r.CopyStorage
	case "shared-storage":
		return r.SharedStorage
	case "dry-run":
		return r.DryRun
	case "reset":
		return r.Reset
	}
	return false
}

// IsSet reports whether the request sets the named setting.
func (r MigrateRequest) IsSet(name string) bool {
	switch name {
	case "to":
		return r.To != ""
	case "target-cmd":
		return len(r.TargetCmd) > 0
	case "migrate-uri":
		return r.MigrateURI != ""
	}
	return r.Bool(name)
}

// Check refuses a malformed VM name, both storage modes, or a migration URI that is not
// tcp://ADDR[:PORT] (exit 2).
func (r MigrateRequest) Check() error {
	if err := host.CheckComponent("VM name", r.VM); err != nil {
		return err
	}
	if r.CopyStorage && r.SharedStorage {
		return Usagef("--copy-storage and --shared-storage: choose one")
	}
	if mu := r.MigrateURI; mu != "" {
		if u, err := url.Parse(mu); err != nil || u.Scheme != "tcp" || u.Host == "" {
			return Usagef("--migrate-uri %q: want tcp://ADDR[:PORT]", mu)
		}
	}
	return nil
}

// MigrationTarget is how to reach the target's vgpu-host: targetCmd when given, else ssh to the
// host of a qemu+ssh URI to; ssh says the last word runs in a remote shell.
func MigrationTarget(to string, targetCmd []string) (words []string, ssh bool, err error) {
	if len(targetCmd) > 0 {
		return targetCmd, targetCmd[0] == "ssh", nil
	}
	u, err := url.Parse(to)
	if err != nil {
		return nil, false, Usagef("--to %q: %v", to, err)
	}
	if w := SSHWords(u); w != nil {
		return w, true, nil
	}
	if strings.HasSuffix(u.Scheme, "+ssh") {
		return nil, false, Usagef("--to %q: no host to reach", to)
	}
	// A local URI is a second libvirtd on this machine: its vgpu-host has a root and ledger of
	// its own, which only the caller knows how to name.
	return nil, false, Usagef("--to %q: vgpu-host reaches the target's vgpu-host over ssh for qemu+ssh:// URIs; for this one say how with --target-cmd", to)
}

// SSHWords is the command that runs vgpu-host on the host of a qemu+ssh URI:
// ssh [-p PORT] -- [USER@]HOST vgpu-host; nil for another URI or one without a usable host.
func SSHWords(u *url.URL) []string {
	if !strings.HasSuffix(u.Scheme, "+ssh") || u.Hostname() == "" || strings.HasPrefix(u.Hostname(), "-") {
		return nil
	}
	w := []string{"ssh"}
	if p := u.Port(); p != "" {
		w = append(w, "-p", p)
	}
	dest := u.Hostname()
	if u.User != nil && u.User.Username() != "" {
		dest = u.User.Username() + "@" + dest
	}
	return append(w, "--", dest, "vgpu-host")
}

// MigrateResult is what migrate did (or with DryRun would do) on both hosts: its JSON is the
// command's --output json.
type MigrateResult = lifecycle.MigrateResult

// Migrate is migrate: the target (reached through env.MigrationTarget) reserves and prepares
// an equivalent device, libvirt moves the VM live, the target records it and this host
// releases and checks its devices (HandBack). A failure before the VM moved gives no result;
// one after gives the result and the error (the message says where the VM runs).
func Migrate(ctx context.Context, env Env, req MigrateRequest) (*MigrateResult, error) {
	if err := req.Check(); err != nil {
		return nil, err
	}
	words, ssh, err := MigrationTarget(req.To, req.TargetCmd)
	if err != nil {
		return nil, err
	}
	if env.MigrationTarget == nil {
		return nil, fmt.Errorf("migrate %s: this vgpu-host has no way to reach a migration target: %w", req.VM, host.ErrUnsupported)
	}
	lc, done, err := env.lifecycle("migrate", lifecycle.Options{})
	if err != nil {
		return nil, err
	}
	defer done()
	res, err := lc.Migrate(ctx, req.VM, lifecycle.MigrateOptions{Target: env.MigrationTarget(words, ssh), DestURI: req.To,
		MigrateURI: req.MigrateURI, CopyStorage: req.CopyStorage, SharedStorage: req.SharedStorage, DryRun: req.DryRun})
	migrated := res != nil && !res.DryRun && slices.ContainsFunc(res.SourceSteps, func(s string) bool { return strings.HasPrefix(s, "migrate domain ") })
	if err != nil && !migrated {
		return nil, err // the VM is where it was: no result
	}
	if len(res.Released) > 0 {
		w, _ := env.HostIO()
		HandBack(ctx, env, w, ReleasedBy(&lifecycle.DestroyResult{VM: req.VM, Released: res.Released}), "migrate "+req.VM, req.Reset)
	}
	return res, err
}
