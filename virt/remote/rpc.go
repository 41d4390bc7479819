package remote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
)

// RPC is the client end of this package's wire (wire.go: one JSON request or answer per line),
// for vgpu-host's other helpers (mig/remote and vgpu-host-nvml) so there is one framing.
type RPC struct{ c *rpcClient }

// NewRPC starts reading answers from rwc.
func NewRPC(rwc io.ReadWriteCloser) *RPC { return &RPC{c: newRPCClient(rwc)} }

// Call sends method(args) and decodes the answer into reply, returning when it answers or ctx
// ends. An error the server's method returned is a *ServerError; any other error means the
// connection broke.
func (r *RPC) Call(ctx context.Context, method string, args, reply any) error {
	call := r.c.Go(method, args, reply)
	select {
	case <-call.done:
		var se serverError
		if errors.As(call.err, &se) {
			return &ServerError{Msg: string(se)}
		}
		return call.err
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", method, ctx.Err())
	}
}

// Close closes the write side: the server sees the end of its input and stops.
func (r *RPC) Close() error { return r.c.Close() }

// ServerError is the text of an error the server's method returned.
type ServerError struct{ Msg string }

func (e *ServerError) Error() string { return e.Msg }

// StartHelper starts the helper binary at path with --serve (its stderr is ours) and returns
// the pipe to it (its stdout to read, its stdin to write; closing it ends the helper's input)
// and the function that waits for it to exit. path is opened once and that descriptor runs
// (Helper.Start); a path FindHelper took from the environment is checked again on it.
func StartHelper(path string) (io.ReadWriteCloser, func() error, error) {
	return StartHelperEnv(path, nil)
}

// StartHelperEnv is StartHelper with the helper's environment environ (os/exec's Cmd.Env: nil
// is this process's).
func StartHelperEnv(path string, environ []string) (io.ReadWriteCloser, func() error, error) {
	h, err := OpenFound(path)
	if err != nil {
		return nil, nil, fmt.Errorf("start %s: %w", path, err)
	}
	return h.StartEnv(environ)
}

// OpenFound opens the helper at path, which FindHelper or FindHelperEnv returned, for running
// with Helper.Command: a path taken from the helper's environment variable is checked again on
// the descriptor, which is what runs, never the path. The caller closes it.
func OpenFound(path string) (*Helper, error) {
	env, _ := fromEnv.Load(path)
	s, _ := env.(string)
	return openHelper(path, s)
}

// ErrorKind is one class of error that keeps its sentinels across the pipe (mig/remote's; the
// libvirt helper's kinds in server.go predate it and can move onto it): the server sends
// "NAME\x1fMESSAGE" for an error matching Errs[0], the client gives back an error that
// matches every one of Errs.
type ErrorKind struct {
	Name string
	Errs []error
}

// ToWire encodes err for the client: the first kind whose first sentinel it matches names it,
// "error" when none does.
func ToWire(kinds []ErrorKind, err error) error {
	if err == nil {
		return nil
	}
	for _, k := range kinds {
		if errors.Is(err, k.Errs[0]) {
			return errors.New(k.Name + sep + err.Error())
		}
	}
	return errors.New("error" + sep + err.Error())
}

// FromWire decodes a server's error message encoded by ToWire, restoring its sentinels.
func FromWire(kinds []ErrorKind, msg string) error {
	kind, text, ok := strings.Cut(msg, sep)
	if !ok {
		return errors.New(msg)
	}
	for _, k := range kinds {
		if k.Name == kind {
			return &WireError{Msg: text, Kinds: k.Errs}
		}
	}
	return &WireError{Msg: text}
}

// WireError is an error that came back from a helper, with its sentinels.
type WireError struct {
	Msg   string
	Kinds []error
}

func (e *WireError) Error() string   { return e.Msg }
func (e *WireError) Unwrap() []error { return e.Kinds }

// ServeRPC answers requests on rwc by calling rcvr's exported methods of the shape
// `func (T) Name(args A, reply *R) error` until the input ends.
func ServeRPC(rcvr any, rwc io.ReadWriter) { serveRPC(rcvr, rwc, nil) }
