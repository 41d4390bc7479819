// Package agent is vgpu-host's long-running host agent: one process that owns the host and
// serves a versioned JSON API over a unix socket (docs/agent.md).
//
// The agent does not reimplement any operation. Every request, typed (POST /v1/vms) or not
// (POST /v1/exec), becomes a command line of vgpu-host's own command tree, run in-process by a
// Runner (cmd/vgpu-host provides it), so the CLI and the agent answer the same: one
// implementation of every operation, two transports. Mutations run one at a time, in arrival
// order, on one worker; reads run concurrently.
package agent

import (
	"context"
	"net/http"

	"github.com/vgpu-host/vgpu-host/virt"
)

// APIVersion is the path prefix of every endpoint.
const APIVersion = "v1"

// DefaultSocket is the agent's socket, resolved under the host root.
const DefaultSocket = "/run/vgpu-host/agent.sock"

// DefaultGroup is the group whose members may change the host through the agent, when it exists.
const DefaultGroup = "vgpu-host"

// Class says how a command line is run.
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

// FileRef names an argument that is a file the command reads: Args[Index] is Prefix+PATH
// (Prefix is "--config=" for a flag given with =, else "").
type FileRef struct {
	Index  int
	Prefix string
}

// Job is a command line the Runner has looked at, before it runs.
type Job struct {
	// Args is the command line after the program name.
	Args []string
	// Op names the command ("apply", "mdev create"), for logs and metrics.
	Op string
	// Class is how it runs.
	Class Class
	// Files are the arguments that name files the command reads.
	Files []FileRef
}

// RunEnv is what one run gets from the agent besides its command line.
type RunEnv struct {
	// Env holds the caller's values of the environment variables the command tree reads
	// (VGPU_HOST_OUTPUT, …); the agent's own environment is never consulted for them.
	Env map[string]string
	// Stdin is the caller's standard input.
	Stdin []byte
	// Peer is the caller.
	Peer Peer
	// Conn, when set, returns the agent's one libvirt connection: commands use it instead of
	// opening their own, and must not close it.
	Conn func() (virt.Conn, error)
}

// Runner runs vgpu-host's command tree in-process.
type Runner interface {
	// Prepare looks at a command line without running it: which command, its class, which
	// arguments name files. An error refuses the command line (commands that cannot run over
	// the agent, flags that would change the agent's host root or libvirt); it is reported
	// with exit code 2.
	Prepare(args []string, env map[string]string) (Job, error)
	// Run runs the job and returns what it printed and its exit code.
	Run(ctx context.Context, job Job, env RunEnv) ExecResult
}

// ExecRequest is the body of POST /v1/exec.
type ExecRequest struct {
	// Args is the command line after the program name.
	Args []string `json:"args"`
	// Files maps a file argument, exactly as it appears in Args, to the file's content: the
	// agent writes it to a private directory and runs the command on that copy, so that it
	// never reads a path as root on behalf of its caller.
	Files map[string]string `json:"files,omitempty"`
	// Env holds the caller's values of the environment variables the command tree reads.
	Env map[string]string `json:"env,omitempty"`
	// Stdin is the caller's standard input, if the command reads it.
	Stdin string `json:"stdin,omitempty"`
}

// ExecResult is the answer of POST /v1/exec: what the command printed and its exit code.
type ExecResult struct {
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	ExitCode int    `json:"exit_code"`
}

// ErrorBody is the JSON of every error answer.
type ErrorBody struct {
	Error    string `json:"error"`
	ExitCode int    `json:"exit_code"`
}

// StatusOf maps a vgpu-host exit code (README) to the HTTP status of a typed endpoint:
// 0 → 200, 1 → 500, 2 → 400, 3 → 409 (not ready), 4 → 409 (refused by a safety check:
// 403 is kept for the caller's own permission), 5 → 409 (busy), 6 → 404, 7 → 501.
func StatusOf(exitCode int) int {
	switch exitCode {
	case 0:
		return http.StatusOK
	case 2:
		return http.StatusBadRequest
	case 3, 4, 5:
		return http.StatusConflict
	case 6:
		return http.StatusNotFound
	case 7:
		return http.StatusNotImplemented
	}
	return http.StatusInternalServerError
}
