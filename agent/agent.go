// Package agent is vgpu-host's long-running host agent: one process that owns the host and
// serves a versioned JSON API over a unix socket (docs/agent.md).
//
// The agent does not reimplement any operation. A typed endpoint (GET /v1/inventory, POST
// /v1/vms, POST /v1/bind, …) decodes its HTTP request into the typed request of an operation of
// package ops, classified on its typed values and run by the Runner's Operator side, which
// calls the same operation as the CLI's command. Every other request (POST /v1/exec, …) is a
// typed request for one command of vgpu-host's own command tree (agentapi.ExecRequest: the
// command, its flags with typed values, its operands), checked and classified on those values
// and run in-process by a Runner (internal/clitree provides it). Either way the CLI and the agent
// answer the same: one implementation of every operation, two transports. No caller sends a
// command line: the agent never decides on text that something else parses again. Mutations run one at a time, in arrival
// order, on one worker; reads run concurrently.
//
// What the CLI shares with the agent (the API's bodies, Job and Runner, the defaults, the
// Client) is package agentapi, which links no net/http; this package is the server, linked
// only into vgpu-host-agent. The names below are agentapi's, for the server's code.
package agent

import (
	"net/http"

	"github.com/vgpu-host/vgpu-host/agent/agentapi"
)

// The API's names, defined in agentapi.
const (
	APIVersion             = agentapi.APIVersion
	DefaultSocket          = agentapi.DefaultSocket
	DefaultGroup           = agentapi.DefaultGroup
	DefaultMaxBody         = agentapi.DefaultMaxBody
	DefaultRequestTimeout  = agentapi.DefaultRequestTimeout
	DefaultShutdownTimeout = agentapi.DefaultShutdownTimeout
	Read                   = agentapi.Read
	Mutation               = agentapi.Mutation
	RootMutation           = agentapi.RootMutation
)

// The API's types and errors, defined in agentapi.
type (
	Class         = agentapi.Class
	Job           = agentapi.Job
	Peer          = agentapi.Peer
	RunEnv        = agentapi.RunEnv
	Runner        = agentapi.Runner
	Operation     = agentapi.Operation
	Operator      = agentapi.Operator
	ExecRequest   = agentapi.ExecRequest
	ExecResult    = agentapi.ExecResult
	ErrorBody     = agentapi.ErrorBody
	StreamLine    = agentapi.StreamLine
	OperationDone = agentapi.OperationDone
	Client        = agentapi.Client
	StatusError   = agentapi.StatusError
)

// ErrUnreachable is agentapi.ErrUnreachable.
var ErrUnreachable = agentapi.ErrUnreachable

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
