// Package agentapi is what the vgpu-host CLI and the host agent (package agent) share: the
// JSON bodies of the agent's API, the contract between the agent and the command tree that
// runs its requests (Job, Runner), the agent's defaults, and the Client the CLI speaks to the
// agent's socket with. It imports neither net/http nor the server, so that vgpu-host links it
// without paying their package initialisation on every start (docs/architecture.md).
package agentapi

import (
	"context"
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

// Peer is the process at the other end of a connection, as the kernel saw it when it
// connected (SO_PEERCRED).
type Peer struct {
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
	PID int32  `json:"pid"`
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
