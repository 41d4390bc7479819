// Package remote runs vgpu-host's NVML backend (mig/nvmlmig) in its helper process,
// vgpu-host-nvml, and speaks to it over the helper's stdin and stdout with the same JSON-lines
// wire as the libvirt helper (virt/remote). go-nvml is cgo and dlopens libnvidia-ml.so.1;
// keeping it in a helper keeps vgpu-host static and cgo-free, and a host without the NVIDIA
// driver pays nothing until a command asks about MIG.
package remote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/mig"
	vremote "github.com/vgpu-host/vgpu-host/virt/remote"
)

// HelperName is the NVML helper's file name, looked for beside vgpu-host, then in PATH.
const HelperName = "vgpu-host-nvml"

// The NVML helper's environment variables: where it is, read by vgpu-host; what it answers
// from, read by the helper (cmd/vgpu-host-nvml) and by vgpu-host to know whether NVML
// describes a fake --host-root.
const (
	// EnvHelper overrides where the helper is (a path to the binary).
	EnvHelper = "VGPU_HOST_NVML_HELPER"
	// EnvFacts names a capture of a real machine's NVML answers the helper replays.
	EnvFacts = "VGPU_HOST_NVML_FACTS"
	// EnvMock=dgxa100 makes the helper's test build (tag nvmlmock) serve go-nvml's mock.
	EnvMock = "VGPU_HOST_NVML_MOCK"
	// EnvMockState names the file the mock's or the replay's MIG state is kept in between
	// helper processes.
	EnvMockState = "VGPU_HOST_NVML_MOCK_STATE"
)

// EnvVars are the NVML helper's environment variables.
var EnvVars = []string{EnvHelper, EnvFacts, EnvMock, EnvMockState}

// Env is the environment the NVML helper is found and started with. The zero Env is this
// process's, as vgpu-host reads it: the helper's path from EnvHelper, and the helper inheriting
// every variable. Vars, when not nil, stand in for the process's values of the variables they
// name (EnvVars): looked up there instead, and given to the helper in place of the process's
// (an empty value unsets the variable), so that a caller (a test) gives its own helper its own
// capture or mock without changing the process's environment.
type Env struct {
	Vars map[string]string
	// Gate is the host.NVIDIAGate the helper registers with (tests); nil: host.NVIDIANodes
	// for a helper on the real driver, none for a replay or a mock.
	Gate *host.NVIDIAGate
	// Shared, when set, is the one client every Open gives (the agent's, share.go): its
	// helper is started once and kept, and the client's Close leaves it running.
	Shared *Shared
}

// Getenv returns the variable name as e gives it.
func (e Env) Getenv(name string) string {
	if v, ok := e.Vars[name]; ok {
		return v
	}
	return os.Getenv(name)
}

// Environ is the helper's environment (os/exec's Cmd.Env): nil, this process's, when e has no
// Vars; otherwise the process's with Vars in place of what they name.
func (e Env) Environ() []string {
	if e.Vars == nil {
		return nil
	}
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := e.Vars[k]; !ok {
			env = append(env, kv)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(e.Vars)) {
		if v := e.Vars[k]; v != "" {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// FindHelper finds the helper as vremote.FindHelper does, with EnvHelper as e gives it;
// purpose names what needs it in the error.
func (e Env) FindHelper(purpose string) (string, error) {
	return vremote.FindHelperEnv(e.Getenv, HelperName, EnvHelper, purpose, ErrNoHelper)
}

// OpenHelper finds the helper (FindHelper) and opens it (vremote.OpenFound): run it with its
// Command, so the file that runs is the one checked. The caller closes it.
func (e Env) OpenHelper(purpose string) (*vremote.Helper, error) {
	path, err := e.FindHelper(purpose)
	if err != nil {
		return nil, err
	}
	return vremote.OpenFound(path)
}

// ErrNoHelper is returned (wrapped in host.ErrUnsupported) when the helper cannot be found.
var ErrNoHelper = errors.New(HelperName + " not found")

// Client is mig.Backend on a server (the helper) at the other end of a pipe.
//
// A client of a helper on the real driver is a user of host.NVIDIANodes (Env.gate): when a bind
// or unbind of an nvidia function pauses it, the client stops its helper (after the call in
// progress, if any), and its next call waits for the pause to end and starts a new one. What
// NVML knows lives in the driver, so nothing is lost but the helper's start (~35 ms on a real
// H200), and the new helper sees the GPUs that are on nvidia then.
type Client struct {
	start func() (io.ReadWriteCloser, func() error, error) // nil: the pipe Dial was given, not restartable
	gate  *host.NVIDIAGate
	user  *host.NVIDIAUser

	mu     sync.Mutex // held for each call, each start and each stop of the helper
	rpc    *vremote.RPC
	wait   func() error
	starts int // helpers started (tests)

	closeOnce sync.Once
	closed    bool // under mu
	closeErr  error

	shared bool // Shared's: Close leaves it running (Shared.Close stops it)
}

var _ mig.Backend = (*Client)(nil)

// Open starts the helper and checks that NVML loads there. Without the helper or without NVML
// the error wraps host.ErrUnsupported (and ErrNoHelper or mig.ErrNoNVML).
func Open() (*Client, error) { return Env{}.Open() }

// Open is Open with the helper found and started as e says; with e.Shared, the shared
// client (Shared.open).
func (e Env) Open() (*Client, error) {
	if e.Shared != nil {
		return e.Shared.open(e)
	}
	return e.open()
}

// open starts a client of its own.
func (e Env) open() (*Client, error) {
	path, err := e.FindHelper("MIG support (NVML)")
	if err != nil {
		return nil, err
	}
	environ := e.Environ()
	c := &Client{start: func() (io.ReadWriteCloser, func() error, error) { return vremote.StartHelperEnv(path, environ) }, gate: e.gate()}
	c.user = c.gate.Register(c.suspend)
	if err := c.ready(context.Background()); err != nil {
		c.user.Unregister()
		return nil, err
	}
	c.mu.Unlock()
	return c, nil
}

// gate is the host.NVIDIAGate the helper registers with: e.Gate when set, else
// host.NVIDIANodes when the helper talks to the real driver, none when it replays a capture or
// serves a mock (they open no device node).
func (e Env) gate() *host.NVIDIAGate {
	switch {
	case e.Gate != nil:
		return e.Gate
	case e.Getenv(EnvFacts) != "" || e.Getenv(EnvMock) != "":
		return nil
	}
	return host.NVIDIANodes
}

// ready returns with c.mu held and c's helper running, starting it when it is not: after any
// pause of c's gate (ctx ends the wait with its error, c.mu not held).
func (c *Client) ready(ctx context.Context) error {
	for {
		if err := c.gate.Wait(ctx); err != nil {
			return err
		}
		c.mu.Lock()
		switch {
		case c.rpc != nil:
			return nil
		case c.closed || c.start == nil:
			c.mu.Unlock()
			return fmt.Errorf("NVML helper %s: %w", HelperName, os.ErrClosed)
		case c.gate.Paused(): // a pause began since Wait: it may not have seen c
			c.mu.Unlock()
			continue
		}
		rwc, wait, err := c.start()
		if err != nil {
			c.mu.Unlock()
			return err
		}
		c.starts++
		rpc := vremote.NewRPC(rwc)
		if err := rpc.Call(ctx, "Init", Empty{}, &Empty{}); err != nil {
			rpc.Close()
			_ = wait()
			c.mu.Unlock()
			return wireError(ctx, err)
		}
		c.rpc, c.wait = rpc, wait
		return nil
	}
}

// Dial initialises NVML on the server at the other end of rwc. Open uses it on the helper's
// pipes; tests use it on an in-process pipe.
func Dial(rwc io.ReadWriteCloser) (*Client, error) {
	c := &Client{rpc: vremote.NewRPC(rwc)}
	if err := c.call(context.Background(), "Init", Empty{}, &Empty{}); err != nil {
		c.rpc.Close()
		return nil, err
	}
	return c, nil
}

// suspend stops c's helper once the call in progress, if any, has returned (its gate's
// pause): the helper has exited, its device nodes closed, when it returns. The next call
// starts another.
func (c *Client) suspend() {
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.stop()
}

// stop closes c's pipe and waits for its helper to exit; c.mu is held.
func (c *Client) stop() error {
	if c.rpc == nil {
		return nil
	}
	_ = c.rpc.Close()
	c.rpc = nil
	if c.wait != nil {
		err := c.wait()
		c.wait = nil
		if err != nil {
			return fmt.Errorf("%s: %w", HelperName, err)
		}
	}
	return nil
}

// Close stops the helper; a shared client's (Env.Shared) is left running for the next Open.
func (c *Client) Close() error {
	if c.shared {
		return nil
	}
	return c.close()
}

func (c *Client) close() error {
	c.closeOnce.Do(func() {
		c.user.Unregister()
		c.mu.Lock()
		defer c.mu.Unlock()
		c.closed = true
		c.closeErr = c.stop()
	})
	return c.closeErr
}

func (c *Client) call(ctx context.Context, method string, args, reply any) error {
	return c.callPausing(ctx, false, method, args, reply)
}

// callPausing is call that, with others set, keeps the other users of c's gate stopped while
// the call runs (host.NVIDIAGate.PauseExcept).
func (c *Client) callPausing(ctx context.Context, others bool, method string, args, reply any) error {
	if c.start == nil { // Dial's pipe: one helper, never suspended, on no gate
		return wireError(ctx, c.rpc.Call(ctx, method, args, reply))
	}
	if err := c.ready(ctx); err != nil {
		return err
	}
	defer c.mu.Unlock()
	if others {
		defer c.gate.PauseExcept(c.user)()
	}
	err := c.rpc.Call(ctx, method, args, reply)
	if _, answered := errors.AsType[*vremote.ServerError](err); err != nil && !answered && ctx.Err() == nil {
		// The helper died or closed its pipe (not an answer, not our deadline): let it go, so
		// that the next call starts another instead of failing on the dead pipe for good.
		_ = c.stop()
	}
	return wireError(ctx, err)
}

// wireError is a call's error as the caller sees it: the server's with its sentinels, or the
// pipe's.
func wireError(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	var se *vremote.ServerError
	if !errors.As(err, &se) {
		if ctx.Err() != nil {
			return err
		}
		return fmt.Errorf("NVML helper %s stopped answering: %w", HelperName, err)
	}
	return vremote.FromWire(kinds(), se.Msg)
}

// State implements mig.Backend.
func (c *Client) State(ctx context.Context) (mig.State, error) {
	var r mig.State
	return r, c.call(ctx, "State", Empty{}, &r)
}

// SetMode implements mig.Backend. The other helpers of c's gate (in the agent, the Xid watch's)
// are stopped while it runs: NVIDIA leaves a MIG mode change pending while another client
// holds the GPU.
func (c *Client) SetMode(ctx context.Context, address string, enabled bool) error {
	return c.callPausing(ctx, true, "SetMode", ModeArgs{Address: address, Enabled: enabled}, &Empty{})
}

// Create implements mig.Backend.
func (c *Client) Create(ctx context.Context, address, profile string, start int) (mig.Instance, error) {
	var r mig.Instance
	return r, c.call(ctx, "Create", CreateArgs{Address: address, Profile: profile, Start: start}, &r)
}

// Destroy implements mig.Backend.
func (c *Client) Destroy(ctx context.Context, address string, id int) error {
	return c.call(ctx, "Destroy", DestroyArgs{Address: address, ID: id}, &Empty{})
}

// XidSource is what a mig.Backend also offers when it can wait for NVIDIA Xid errors
// (mig/nvmlmig's Backend does).
type XidSource interface {
	WaitXid(ctx context.Context, timeout time.Duration) ([]host.XidEvent, error)
}

var _ XidSource = (*Client)(nil)

// WaitXid waits up to timeout for Xid errors on the helper's GPUs (nvmlEventSetWait) and
// returns those seen, none when the time ran out. The agent calls it in a loop on a helper of
// its own, so the events stream to it as they come; an error wrapping host.ErrUnsupported
// means no GPU there offers Xid events.
func (c *Client) WaitXid(ctx context.Context, timeout time.Duration) ([]host.XidEvent, error) {
	var r []host.XidEvent
	return r, c.call(ctx, "WaitXid", XidArgs{TimeoutMS: int(timeout.Milliseconds())}, &r)
}

// The wire's argument types.
type (
	// Empty is no arguments or no reply.
	Empty struct{}
	// ModeArgs are SetMode's arguments.
	ModeArgs struct {
		Address string
		Enabled bool
	}
	// CreateArgs are Create's arguments.
	CreateArgs struct {
		Address, Profile string
		Start            int
	}
	// XidArgs are WaitXid's arguments.
	XidArgs struct {
		TimeoutMS int
	}
	// DestroyArgs are Destroy's arguments.
	DestroyArgs struct {
		Address string
		ID      int
	}
)

// kinds are the error classes that keep their sentinels across the pipe (exit codes). A
// function: a package-level table of other packages' errors is filled in by the package's
// initialiser, at every start of every binary that links it.
func kinds() []vremote.ErrorKind {
	return []vremote.ErrorKind{
		{Name: "no-nvml", Errs: []error{mig.ErrNoNVML, host.ErrUnsupported}}, // before unsupported: it wraps it
		{Name: "unsupported", Errs: []error{host.ErrUnsupported}},
		{Name: "not-found", Errs: []error{host.ErrNotFound}},
		{Name: "mode-pending", Errs: []error{mig.ErrModePending, host.ErrBusy}}, // before busy: it wraps it
		{Name: "busy", Errs: []error{host.ErrBusy}},
		{Name: "invalid", Errs: []error{host.ErrInvalid}},
		{Name: "refused", Errs: []error{host.ErrRefused}},
		{Name: "canceled", Errs: []error{context.Canceled}},
		{Name: "deadline", Errs: []error{context.DeadlineExceeded}},
	}
}

func toWire(err error) error { return vremote.ToWire(kinds(), err) }

// Server is the helper's end: it answers the wire's calls on a mig.Backend that open makes at
// Init (so a missing NVML is an answer, not a dead helper).
type Server struct {
	open func() (mig.Backend, error)
	mu   sync.Mutex
	b    mig.Backend
}

// Serve answers requests on rwc until its input ends. open initialises NVML and returns the
// backend; its error (wrap mig.ErrNoNVML when the library is missing) is Init's answer.
func Serve(open func() (mig.Backend, error), rwc io.ReadWriter) {
	vremote.ServeRPC(&Server{open: open}, rwc)
}

func (s *Server) backend() (mig.Backend, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b != nil {
		return s.b, nil
	}
	b, err := s.open()
	if err != nil {
		return nil, err
	}
	s.b = b
	return b, nil
}

// Init loads NVML.
func (s *Server) Init(_ Empty, _ *Empty) error {
	_, err := s.backend()
	return toWire(err)
}

// State serves mig.Backend.State.
func (s *Server) State(_ Empty, r *mig.State) error {
	b, err := s.backend()
	if err != nil {
		return toWire(err)
	}
	st, err := b.State(context.Background())
	*r = st
	return toWire(err)
}

// SetMode serves mig.Backend.SetMode.
func (s *Server) SetMode(a ModeArgs, _ *Empty) error {
	b, err := s.backend()
	if err != nil {
		return toWire(err)
	}
	return toWire(b.SetMode(context.Background(), a.Address, a.Enabled))
}

// Create serves mig.Backend.Create.
func (s *Server) Create(a CreateArgs, r *mig.Instance) error {
	b, err := s.backend()
	if err != nil {
		return toWire(err)
	}
	in, err := b.Create(context.Background(), a.Address, a.Profile, a.Start)
	*r = in
	return toWire(err)
}

// Destroy serves mig.Backend.Destroy.
func (s *Server) Destroy(a DestroyArgs, _ *Empty) error {
	b, err := s.backend()
	if err != nil {
		return toWire(err)
	}
	return toWire(b.Destroy(context.Background(), a.Address, a.ID))
}

// maxXidWait bounds one WaitXid on the server, so a caller that went away frees the helper.
const maxXidWait = 10 * time.Second

// WaitXid serves Client.WaitXid.
func (s *Server) WaitXid(a XidArgs, r *[]host.XidEvent) error {
	b, err := s.backend()
	if err != nil {
		return toWire(err)
	}
	xs, ok := b.(XidSource)
	if !ok {
		return toWire(fmt.Errorf("the NVML backend delivers no Xid events: %w", host.ErrUnsupported))
	}
	timeout := min(max(time.Duration(a.TimeoutMS)*time.Millisecond, 0), maxXidWait)
	evs, err := xs.WaitXid(context.Background(), timeout)
	if evs == nil {
		evs = []host.XidEvent{}
	}
	*r = evs
	return toWire(err)
}
