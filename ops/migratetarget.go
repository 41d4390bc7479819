package ops

import (
	"context"

	"github.com/vgpu-host/vgpu-host/lifecycle"
)

// MigrateTargetRequest is `migrate-target`: the target's end of a live migration (`migrate`
// on the source runs it there), one request of the source (plan, prepare, commit or abort an
// incoming VM; docs/migrate.md).
type MigrateTargetRequest struct {
	// Incoming is the source's request (--request JSON, or `commit VM`, `abort VM`).
	Incoming lifecycle.IncomingRequest `json:"incoming"`
}

// Op is "migrate-target".
func (MigrateTargetRequest) Op() string { return "migrate-target" }

// Bool is false: migrate-target has no boolean setting (even its plan runs as a change: the
// class of migrate-target does not depend on its request).
func (MigrateTargetRequest) Bool(string) bool { return false }

// IsSet is false: migrate-target's one setting, its request, decides nothing of how it runs.
func (MigrateTargetRequest) IsSet(string) bool { return false }

// Check refuses a malformed request (lifecycle.IncomingRequest.Check, exit 2).
func (r MigrateTargetRequest) Check() error { return r.Incoming.Check() }

// MigrateTargetResult is the target's answer: its JSON (compact, one line) is what
// migrate-target prints whatever --output says, and what the source decodes.
type MigrateTargetResult = lifecycle.IncomingReply

// MigrateTarget is migrate-target: one request of a migration's source served by this host's
// lifecycle (lifecycle.Lifecycle.Incoming): plan, prepare (reserve and prepare an equivalent
// device), commit (record the migrated VM) or abort (undo a prepare).
func MigrateTarget(ctx context.Context, env Env, req MigrateTargetRequest) (*MigrateTargetResult, error) {
	if err := req.Check(); err != nil {
		return nil, err
	}
	lc, done, err := env.lifecycle("migrate-target", lifecycle.Options{})
	if err != nil {
		return nil, err
	}
	defer done()
	return lc.Incoming(ctx, req.Incoming)
}
