// Package agentapi is what the vgpu-host CLI and the host agent (package agent) share: the
// JSON bodies of the agent's API, the contract between the agent and the command tree that
// runs its requests (Job, Runner), the agent's defaults, and the Client the CLI speaks to the
// agent's socket with. It imports neither net/http nor the server, so that vgpu-host links it
// without paying their package initialisation on every start (docs/architecture.md).
package agentapi

import (
	"context"
	"encoding/json"
	"time"

	"github.com/vgpu-host/vgpu-host/virt"
)

// APIVersion is the path prefix of every endpoint.
const APIVersion = "v1"

// DefaultSocket is the agent's socket, resolved under the host root.
const DefaultSocket = "/run/vgpu-host/agent.sock"

// DefaultGroup is the group whose members may change the host through the agent, when it exists.
const DefaultGroup = "vgpu-host"

// Defaults of the agent's limits.
const (
	DefaultMaxBody         = 4 << 20
	DefaultRequestTimeout  = 10 * time.Minute
	DefaultShutdownTimeout = 5 * time.Minute
)

// Class says how a request is run: who may run it, and whether it waits its turn.
type Class int

const (
	// Read changes nothing: open to anyone who can connect, run concurrently.
	Read Class = iota
	// Mutation changes the host: root or the agent's group, one at a time through the queue.
	Mutation
	// RootMutation changes the host and names a path the agent would write or run as root
	// (image export --to, host install-unit --exec): root only.
	RootMutation
)

func (c Class) String() string {
	return [...]string{"read", "mutation", "root-mutation"}[c]
}

// Job is a request the Runner has checked, before it runs: the command, how it runs (decided
// on the request's typed values) and which of its values name files the command reads.
type Job struct {
	// Request is the checked request.
	Request ExecRequest
	// Op names the command ("apply", "mdev create"), for logs and metrics.
	Op string
	// Class is how it runs.
	Class Class
	// Files are the operands and flag values (as the caller gave them) that name files the
	// command reads: each must come with its content in Request.Files.
	Files []string
	// Operation is the typed request of the command's operation, built by Prepare from the
	// request's typed values: Class was decided on it, and it is what runs. Nil when the
	// command's request builder refuses the values (the request is then refused when it runs,
	// after the permission check, as the command reports it).
	Operation Operation
}

// Peer is the process at the other end of a connection, as the kernel saw it when it
// connected (SO_PEERCRED).
type Peer struct {
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
	PID int32  `json:"pid"`
}

// RunEnv is what one run gets from the agent besides its request.
type RunEnv struct {
	// Peer is the caller.
	Peer Peer
	// Conn, when set, returns the agent's one libvirt connection: commands use it instead of
	// opening their own, and must not close it.
	Conn func() (virt.Conn, error)
	// Progress, when set, receives the run's progress events (ops.Event values) as they
	// happen, to stream them to the caller (application/x-ndjson); they are then not printed
	// on the result's stderr.
	Progress func(event any)
}

// Runner runs vgpu-host's commands in-process, each as its typed operation.
type Runner interface {
	// Prepare checks a request without running it: the command exists and may run through
	// the agent, every flag is one of its flags with a value of the flag's type, and from
	// those typed values its class and file arguments. An error refuses the request (exit
	// code 2).
	Prepare(req ExecRequest) (Job, error)
	// Run runs the job and returns what it printed and its exit code.
	Run(ctx context.Context, job Job, env RunEnv) ExecResult
}

// Operation is a typed request of one of the agent's typed endpoints (package ops's
// requests): Op names it as the CLI's command, Bool and IsSet give its settings by their
// flag's name, so that its class is decided on these typed values by the command's rule.
type Operation interface {
	Op() string
	Bool(name string) bool
	IsSet(name string) bool
}

// Operator runs typed operations in-process, with no command line: the agent's typed
// endpoints call it (a Runner that is also an Operator serves them).
type Operator interface {
	// Class is how op runs: read, mutation or root-mutation, decided on its typed values.
	Class(op Operation) Class
	// Do runs op for the caller in env and returns the value its JSON output is (nil when
	// it prints nothing) and its failure, whose ExitCode method gives the exit code.
	Do(ctx context.Context, op Operation, env RunEnv) (any, error)
}

// ExecRequest is the body of POST /v1/exec: one command of vgpu-host's tree, typed. There is
// no command line: the agent decides who may run it on these values, and runs exactly them.
//
//	{"command": "mdev create", "flags": {"parent": "0000:01:00.0", "type": "nvidia-1", "count": 2, "dry-run": true}}
type ExecRequest struct {
	// Command is the command's full name below the root ("apply", "mdev create").
	Command string `json:"command"`
	// Flags maps a flag's long name (no dashes) to its value, typed as the flag is: a JSON
	// boolean, integer, string, duration string ("2m") or array of strings.
	Flags map[string]json.RawMessage `json:"flags,omitempty"`
	// Operands are the command's operands, never read as flags.
	Operands []string `json:"operands,omitempty"`
	// Files maps an operand or flag value that names a file the command reads (a spec, a
	// --config) to the file's content: the CLI reads it as the caller, and the operation
	// reads this content, named by the caller's path. The agent opens no path a caller names
	// and writes no copy of these files.
	Files map[string]string `json:"files,omitempty"`
	// KeyFiles maps the paths of public key files the specs name (spec.cloudInit.
	// sshAuthorizedKeys) to their content, read by the CLI as the caller.
	KeyFiles map[string]string `json:"key_files,omitempty"`
}

// Bool returns the boolean value of flag name in r, and whether r sets it as a boolean.
func (r ExecRequest) Bool(name string) (v, ok bool) {
	raw, set := r.Flags[name]
	if !set {
		return false, false
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return false, false
	}
	return v, true
}

// ExecResult is the answer of POST /v1/exec: what the command printed and its exit code.
type ExecResult struct {
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	ExitCode int    `json:"exit_code"`
}

// NDJSON is the media type of a streamed answer: a caller that sends Accept: NDJSON to
// POST /v1/exec or a typed endpoint gets one StreamLine per line (docs/agent.md).
const NDJSON = "application/x-ndjson"

// StreamLine is one line of a streamed answer: an operation's progress event as it happens,
// then one last line with the result: Result for POST /v1/exec, Done for a typed endpoint.
type StreamLine struct {
	// Event is one progress event: {"kind", "op", "subject", "message", "partial", "at"}.
	Event json.RawMessage `json:"event,omitempty"`
	// Result ends the stream of POST /v1/exec: what the command printed (its stderr without
	// the events streamed before) and its exit code.
	Result *ExecResult `json:"result,omitempty"`
	// Done ends the stream of a typed endpoint.
	Done *OperationDone `json:"done,omitempty"`
}

// OperationDone is the last line of a typed endpoint's stream: the exit code, the error's
// words (none on success) and the operation's JSON output (the body the endpoint answers
// without streaming), if it printed one.
type OperationDone struct {
	ExitCode int             `json:"exit_code"`
	Error    string          `json:"error,omitempty"`
	Output   json.RawMessage `json:"output,omitempty"`
}

// ErrorBody is the JSON of every error answer.
type ErrorBody struct {
	Error    string `json:"error"`
	ExitCode int    `json:"exit_code"`
}
