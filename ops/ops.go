// Package ops is vgpu-host's typed operations: what a command does, apart from how it was
// asked for. Each operation takes a typed request and an Env (what it needs from outside:
// the host root, the libvirt connection, the host writer, the caller) and returns a typed
// result, the Go value `--output json` prints, and an error whose exit code ExitCode gives.
//
// The CLI is flags → request → operation → render; the agent's typed endpoints are HTTP
// request → request → operation → JSON of the result (docs/agent.md, "How a request flows").
// Neither builds nor parses a command line on the way. This package imports neither the
// command tree (urfave/cli, package main) nor the agent's server.
package ops

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/vgpu-host/vgpu-host/agent/agentapi"
	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/layout"
	"github.com/vgpu-host/vgpu-host/lifecycle"
	"github.com/vgpu-host/vgpu-host/mdev"
	"github.com/vgpu-host/vgpu-host/mig"
	"github.com/vgpu-host/vgpu-host/virt"
)

// Exit codes, documented in the README: the CLI exits with them and the agent answers them
// (agent.StatusOf maps each to its HTTP status).
const (
	ExitOK          = 0 // success (including "already in that state")
	ExitFailure     = 1 // the operation failed; the message says where and why
	ExitUsage       = 2 // bad command line or input (flag, address, spec)
	ExitNotReady    = 3 // check: nothing on this host can be assigned to a VM
	ExitRefused     = 4 // a safety check refused; re-run with --force if you mean it
	ExitBusy        = 5 // device or resource in use (held open, allocated elsewhere)
	ExitNotFound    = 6 // the named device, type, instance or VM does not exist
	ExitUnsupported = 7 // the host or driver cannot do it (no IOMMU, no SR-IOV, no mdev)
)

// ErrUsage marks a mistake in what the caller asked for (exit 2): a flag's value, an operand.
var ErrUsage = errors.New("usage")

// Usagef reports a mistake in the request (exit 2), worded as the CLI prints it.
func Usagef(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrUsage, fmt.Sprintf(format, a...))
}

// ExitCode maps an error to the documented exit code: an error that carries one (an *Error,
// or anything with an ExitCode method) gives its own; otherwise the sentinel it wraps decides.
func ExitCode(err error) int {
	var ec interface{ ExitCode() int }
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &ec):
		return ec.ExitCode()
	case errors.Is(err, lifecycle.ErrDamagedJournal): // wraps host.ErrInvalid too
		return ExitFailure
	case errors.Is(err, host.ErrInvalid), errors.Is(err, ErrUsage):
		return ExitUsage
	case errors.Is(err, host.ErrNotReady):
		return ExitNotReady
	case errors.Is(err, host.ErrRefused):
		return ExitRefused
	case errors.Is(err, host.ErrBusy):
		return ExitBusy
	case errors.Is(err, host.ErrNotFound):
		return ExitNotFound
	case errors.Is(err, host.ErrUnsupported):
		return ExitUnsupported
	}
	return ExitFailure
}

// Error is an operation's failure as its caller sees it: the exit code the CLI exits with
// (and so the agent's HTTP status) and the error, whose text is the words the CLI prints
// after "vgpu-host: ".
type Error struct {
	Code int
	Err  error
}

func (e *Error) Error() string { return e.Err.Error() }

// Unwrap returns the operation's error.
func (e *Error) Unwrap() error { return e.Err }

// ExitCode is the exit code the CLI gives this failure.
func (e *Error) ExitCode() int { return e.Code }

// Fail is err as an *Error with its exit code; nil stays nil.
func Fail(err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	return &Error{Code: ExitCode(err), Err: err}
}

// Event is one progress event of an operation (a step begun, a wait, a download): the CLI
// prints each as a progress line on a terminal, the agent logs them.
type Event struct {
	// Kind is what it is: a step taken (shown on a terminal, with table output), or a warning
	// (always shown).
	Kind EventKind `json:"kind"`
	// Op is the operation ("apply").
	Op string `json:"op"`
	// Subject is what it is about: a VM's name, a device's address.
	Subject string `json:"subject,omitempty"`
	// Message is the line the CLI prints on stderr, without its newline.
	Message string `json:"message"`
	// Partial says the line was not ended (the last output of a helper that printed no
	// newline): the CLI prints no newline after it.
	Partial bool `json:"partial,omitempty"`
	// At is when it happened.
	At time.Time `json:"at"`
}

// EventKind is the kind of an Event.
type EventKind string

// Event kinds.
const (
	// EventStep is a step of the operation as it is taken ("vm1: define domain vm1").
	EventStep EventKind = "step"
	// EventTick redraws the line of a wait in place ("vm1: waiting for the guest to power
	// off (12s)"); one with an empty Message ends the wait (a terminal goes to the next line).
	EventTick EventKind = "tick"
	// EventWarning is something the caller must know although the operation went on (a
	// device quarantined by its handback check).
	EventWarning EventKind = "warning"
)

// Env is what an operation gets from outside: the CLI fills it from its flags and the
// process, the agent from its own settings and the caller's connection.
type Env struct {
	// Root is the host root every host path is resolved under.
	Root host.Root
	// OpenConn opens the libvirt connection (in the agent it lends its own, whose Close does
	// nothing). The operation closes what it gets.
	OpenConn func() (virt.Conn, error)
	// HostIO is the host's writer and module loader (in the agent, a writer that logs every
	// sysfs write with its device, path, old and new value and the caller).
	HostIO func() (host.Writer, host.ModuleLoader)
	// Peer is the caller, in the agent; the zero Peer from a shell.
	Peer agentapi.Peer
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// ReadKey reads a public key file a spec names (lifecycle.Options.ReadKey): in the agent,
	// only the files the caller's CLI read and sent; nil: the file itself.
	ReadKey func(path string, limit int64) ([]byte, error)
	// Progress receives the operation's progress events (the CLI prints each Message as a
	// line on stderr, the agent logs them); nil: none.
	Progress func(Event)
	// MIG reads inspect's MIG section for inv (NVML, or the MIG state cache unless live):
	// nil, or a nil answer, means no section.
	MIG func(ctx context.Context, inv *host.Inventory, live bool) *MIGInventory
	// GPUNames are the product names of inv's GPUs by PCI address that are known without
	// starting anything (NVML's, from the MIG state cache), for check's GPU lines: nil, or an
	// empty answer, leaves pci.ids' names.
	GPUNames func(inv *host.Inventory) map[string]string
	// PlaceMIG reads the host's MIG state for mdev place when one of parents offers a
	// MIG-backed type (NVML through its helper): nil, or a nil answer, means placement uses
	// NVIDIA's documented geometry.
	PlaceMIG func(ctx context.Context, parents []mdev.Parent) *mig.State
	// NVML opens the MIG backend of mig show, plan and apply (NVML through its helper, its
	// answers kept in the root's MIG state cache); done saves what changed and lets it go. nil:
	// mig fails as unsupported (exit 7).
	NVML func() (b mig.Backend, done func(), err error)
	// LayoutMIG is the MIG backend and planner of the host layout commands, and how to let
	// them go: nil, or a nil backend, when NVML does not describe the root (a layout with a
	// mig entry is then refused, exit 7, and show lists no MIG).
	LayoutMIG func() (mig.Backend, layout.MIGPlanner, func())
	// MigrationTarget is the target's vgpu-host of a migration, run as the command words
	// (MigrationTarget's; ssh: the last word runs in a remote shell): nil, migrate is
	// unsupported here.
	MigrationTarget func(words []string, ssh bool) lifecycle.MigrationTarget
	// OpenMIG opens the MIG backend of host restore's MIG steps (reconcile.Reconciler.OpenMIG):
	// nil, none.
	OpenMIG func() (mig.Backend, func(), error)
	// Lifecycle, when set, amends the lifecycle options of an operation that uses one
	// (the CLI's ISO fetcher, the crash tests' hook).
	Lifecycle func(o *lifecycle.Options) error
}

// now is e's clock.
func (e Env) now() time.Time {
	if e.Now != nil {
		return e.Now()
	}
	return time.Now()
}

// warn sends one warning event to e's sink, if any.
func (e Env) warn(op, subject, format string, a ...any) {
	if e.Progress != nil {
		e.Progress(Event{Kind: EventWarning, Op: op, Subject: subject, Message: fmt.Sprintf(format, a...), At: e.now()})
	}
}

// tick sends one tick event to e's sink, if any.
func (e Env) tick(op, subject, format string, a ...any) {
	if e.Progress != nil {
		e.Progress(Event{Kind: EventTick, Op: op, Subject: subject, Message: fmt.Sprintf(format, a...), At: e.now()})
	}
}

// stepWriter turns the lines a lifecycle writes on its progress writer into step events.
type stepWriter struct {
	env Env
	op  string
	buf []byte
}

func (w *stepWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		w.env.Progress(Event{Kind: EventStep, Op: w.op, Message: string(w.buf[:i]), At: w.env.now()})
		w.buf = w.buf[i+1:]
	}
}

// flush sends what is left of an unended line.
func (w *stepWriter) flush() {
	if len(w.buf) > 0 {
		w.env.Progress(Event{Kind: EventStep, Op: w.op, Message: string(w.buf), Partial: true, At: w.env.now()})
		w.buf = nil
	}
}

// lifecycle builds the Lifecycle of operation op on e: o's own settings, e's root, its
// libvirt connection (opened here: its error comes first), host writer, key reader and its
// progress lines as step events. done closes the connection and sends the last progress.
func (e Env) lifecycle(op string, o lifecycle.Options) (lc *lifecycle.Lifecycle, done func(), err error) {
	conn, err := e.OpenConn()
	if err != nil {
		return nil, nil, err
	}
	w, m := e.HostIO()
	o.Root, o.Conn, o.Host = e.Root, conn, lifecycle.NewSysfsPrep(e.Root, w, m)
	if e.ReadKey != nil {
		o.ReadKey = e.ReadKey
	}
	sw := &stepWriter{env: e, op: op}
	if e.Progress != nil {
		o.Progress = sw
	}
	if e.Lifecycle != nil {
		if err := e.Lifecycle(&o); err != nil {
			conn.Close()
			return nil, nil, err
		}
	}
	return lifecycle.New(o), func() {
		conn.Close()
		if e.Progress != nil {
			sw.flush()
		}
	}, nil
}

// Request is a typed request of one operation. Op names it as the CLI's command ("inspect",
// "mdev create"); Bool and IsSet give its boolean settings by their flag's name, so that
// who may run it is decided on these typed values by the same rule as a command's (the
// agent's classOf).
type Request interface {
	Op() string
	Bool(name string) bool
	IsSet(name string) bool
}

// Run runs req on env and returns the value its JSON output is (nil when the command prints
// nothing) and its failure as an *Error.
func Run(ctx context.Context, env Env, req Request) (any, error) {
	switch r := req.(type) {
	case *InventoryRequest:
		res, err := Inventory(ctx, env, *r)
		if res == nil {
			return nil, Fail(err)
		}
		return res.Value(), Fail(err)
	case *CheckRequest:
		res, err := Check(ctx, env, *r)
		if res == nil {
			return nil, Fail(err)
		}
		return res, Fail(err)
	case *StatusRequest:
		res, err := Status(ctx, env, *r)
		if res == nil {
			return nil, Fail(err)
		}
		return res.VMs, Fail(err)
	case *ApplyRequest:
		res, err := Apply(ctx, env, *r)
		if res == nil {
			return nil, Fail(err)
		}
		return res, Fail(err)
	case *PlanRequest:
		res, err := Plan(ctx, env, *r)
		if res == nil {
			return nil, Fail(err)
		}
		return res.Plans, Fail(err)
	case *DestroyRequest:
		res, err := Destroy(ctx, env, *r)
		if res == nil {
			return nil, Fail(err)
		}
		return res, Fail(err)
	case *BindRequest:
		res, err := Bind(ctx, env, *r)
		if res == nil {
			return nil, Fail(err)
		}
		return res, Fail(err)
	case *UnbindRequest:
		res, err := Unbind(ctx, env, *r)
		if res == nil {
			return nil, Fail(err)
		}
		return res, Fail(err)
	case *MdevCreateRequest:
		res, err := MdevCreate(ctx, env, *r)
		if res == nil {
			return nil, Fail(err)
		}
		return res.Value(), Fail(err)
	case *MdevRemoveRequest:
		res, err := MdevRemove(ctx, env, *r)
		if res == nil {
			return nil, Fail(err)
		}
		return res.Value(), Fail(err)
	case *VFEnableRequest:
		res, err := VFEnable(ctx, env, *r)
		if res == nil {
			return nil, Fail(err)
		}
		return res.Value(), Fail(err)
	case *VFDisableRequest:
		res, err := VFDisable(ctx, env, *r)
		if res == nil {
			return nil, Fail(err)
		}
		return res.Value(), Fail(err)
	case *MdevTypesRequest:
		return result(MdevTypes(ctx, env, *r))
	case *MdevListRequest:
		return result(MdevList(ctx, env, *r))
	case *MdevPlaceRequest:
		return result(MdevPlace(ctx, env, *r))
	case *VFListRequest:
		return result(VFList(ctx, env, *r))
	case *VerifyRequest:
		return result(Verify(ctx, env, *r))
	case *HealthRequest:
		return result(Health(ctx, env, *r))
	case *MIGShowRequest:
		return result(MIGShow(ctx, env, *r))
	case *MIGPlanRequest:
		return result(MIGPlan(ctx, env, *r))
	case *MIGApplyRequest:
		return result(MIGApply(ctx, env, *r))
	case *LayoutShowRequest:
		res, err := LayoutShow(ctx, env, *r)
		if res == nil {
			return nil, Fail(err)
		}
		return res.Value(), Fail(err)
	case *LayoutPlanRequest:
		return result(LayoutPlan(ctx, env, *r))
	case *LayoutApplyRequest:
		res, err := LayoutApply(ctx, env, *r)
		if res == nil {
			return nil, Fail(err)
		}
		return res.Value(), Fail(err)
	case *AttachRequest:
		return result(Attach(ctx, env, *r))
	case *DetachRequest:
		return result(Detach(ctx, env, *r))
	case *MdevDefineRequest:
		res, err := MdevDefine(ctx, env, *r)
		if res == nil {
			return nil, Fail(err)
		}
		return res.Value(), Fail(err)
	case *MdevUndefineRequest:
		return result(MdevUndefine(ctx, env, *r))
	case *RenderRequest:
		return result(Render(ctx, env, *r))
	case *KubeVirtConfigRequest:
		return result(KubeVirtConfig(ctx, env, *r))
	case *KubeVirtLabelsRequest:
		return result(KubeVirtLabels(ctx, env, *r))
	case *KubeVirtVMRequest:
		return result(KubeVirtVM(ctx, env, *r))
	case *ExportRequest:
		return result(Export(ctx, env, *r))
	case *MigrateRequest:
		return result(Migrate(ctx, env, *r))
	case *MigrateTargetRequest:
		return result(MigrateTarget(ctx, env, *r))
	case *InstallUnitRequest:
		return result(InstallUnit(ctx, env, *r))
	case *RestoreRequest:
		res, err := Restore(ctx, env, *r)
		if res == nil {
			return nil, Fail(err)
		}
		return res.Value(), Fail(err)
	}
	return nil, &Error{Code: ExitUsage, Err: fmt.Errorf("%T is not an operation of this vgpu-host", req)}
}

// result is an operation's answer as Run gives it: the result, whose JSON is the command's
// --output json, or nil, and the failure as an *Error.
func result[T any](res *T, err error) (any, error) {
	if res == nil {
		return nil, Fail(err)
	}
	return res, Fail(err)
}
