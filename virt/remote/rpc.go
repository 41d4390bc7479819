package remote

import (
	"context"
	"errors"
	"fmt"
	"io"
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

// ServeRPC answers requests on rwc by calling rcvr's exported methods of the shape
// `func (T) Name(args A, reply *R) error` until the input ends.
func ServeRPC(rcvr any, rwc io.ReadWriter) { serveRPC(rcvr, rwc) }
