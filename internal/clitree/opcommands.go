package clitree

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"reflect"
	"syscall"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/lifecycle"
	"github.com/vgpu-host/vgpu-host/ops"
	"github.com/vgpu-host/vgpu-host/vfio"
	"github.com/vgpu-host/vgpu-host/virt"
	"github.com/vgpu-host/vgpu-host/virt/remote"
)

// The commands backed by an operation of package ops run as flags → request → operation →
// render, in the CLI and in the agent's POST /v1/exec alike (issue 28): the CLI builds the
// typed request from what urfave/cli parsed (cliFlags), the agent from the request's checked
// typed values (execFlags), both with the command's one request builder; both print the
// result with the command's one renderer. The agent builds and parses no command line for
// them (agentops.go).

// sentFile: the CLI reads its files itself (cliFlags is in cliflags.go).
func (cliFlags) sentFile(string) (string, bool, bool) { return "", false, false }

// execFlags is flagValues of an agent request (agentapi.ExecRequest) that prepareRequest
// checked: each flag it sets with its typed value, every other flag of the command its
// definition's default (the agent's flags read no environment: the caller's values come
// typed), and the content of the files the caller's CLI read and sent.
type execFlags struct {
	set      map[string]any      // by long name: bool, int, string, time.Duration or []string
	defs     map[string]cli.Flag // the command's flags and its parents', by long name
	operands []string
	files    map[string]string
}

// value is the typed value of flag name: the request's, else the flag's default.
func (f execFlags) value(name string) any {
	if v, ok := f.set[name]; ok {
		return v
	}
	switch d := f.defs[name].(type) {
	case *cli.BoolFlag:
		return d.Value
	case *cli.IntFlag:
		return d.Value
	case *cli.StringFlag:
		return d.Value
	case *cli.DurationFlag:
		return d.Value
	case *cli.StringSliceFlag:
		return d.Value
	}
	return nil
}

func (f execFlags) Bool(name string) bool     { v, _ := f.value(name).(bool); return v }
func (f execFlags) String(name string) string { v, _ := f.value(name).(string); return v }
func (f execFlags) Int(name string) int       { v, _ := f.value(name).(int); return v }
func (f execFlags) Duration(name string) time.Duration {
	v, _ := f.value(name).(time.Duration)
	return v
}
func (f execFlags) StringSlice(name string) []string { v, _ := f.value(name).([]string); return v }
func (f execFlags) Operands() []string               { return f.operands }

// IsSet reports whether the request sets flag name.
func (f execFlags) IsSet(name string) bool { _, ok := f.set[name]; return ok }

// sentFile is the content the caller sent for the file it names name; sent false when the
// request carries files and not this one (the agent opens no file a caller names).
func (f execFlags) sentFile(name string) (content string, ok, sent bool) {
	c, ok := f.files[name]
	return c, ok, true
}

// fileSource is how a request builder gets the content of a file operand: the CLI reads it
// (sent false), the agent has what the caller sent.
type fileSource interface {
	sentFile(name string) (content string, ok, sent bool)
}

// sentContent is the content of the file path that command op reads, as the caller's CLI
// sent it to the agent: sent false in the CLI, which reads the file itself; an error when the
// agent runs the command and the request lacks the file (the agent opens no file a caller
// names).
func sentContent(f flagValues, op, path string) (data []byte, sent bool, err error) {
	src, ok := f.(fileSource)
	if !ok {
		return nil, false, nil
	}
	c, ok, sent := src.sentFile(path)
	if !sent {
		return nil, false, nil
	}
	if !ok {
		return nil, true, fmt.Errorf("%s reads %s: send its content in the request's files (the agent opens no file a caller names)", op, path)
	}
	return []byte(c), true, nil
}

// specsOf loads the SPEC operands of command op (apply, plan): read as the caller by the CLI,
// the content the caller sent in the agent, named by the caller's path either way.
func specsOf(f flagValues, op string) ([]ops.Spec, error) {
	var specs []ops.Spec
	for _, p := range f.Operands() {
		s := ops.Spec{Path: p}
		c, sent, err := sentContent(f, op, p)
		if err != nil {
			return nil, err
		}
		if sent {
			s.Data = c
		}
		specs = append(specs, s)
	}
	vms, err := ops.LoadSpecs(op, specs)
	if err != nil {
		return nil, err
	}
	for i := range specs {
		specs[i].VM = vms[i]
	}
	return specs, nil
}

// connKind is where an operation's libvirt connection comes from.
type connKind int

const (
	// connNone: none of the command's choosing (inspect, check, bind, unbind).
	//
	//lint:ignore U1000 the zero value, which the commands without a connection leave as is
	connNone connKind = iota
	// connLocal: this machine's libvirt (mdev remove's in-use check; the agent's own in the agent).
	connLocal
	// connFlag: --connect, checked before the operation runs (status, destroy).
	connFlag
	// connFlagLazy: --connect, checked when the operation opens it, after the specs, the
	// virt type and the forced checks (apply, plan).
	connFlagLazy
	// connFlagRaw: --connect as given, opened when the operation needs it (image export);
	// in the agent, its own, which --connect may only repeat.
	connFlagRaw
	// connFlagOrLocal: --connect when set, else this machine's libvirt (host layout); the
	// agent's own in the agent, which --connect may only repeat.
	connFlagOrLocal
)

// shown prints an operation's result as the invocation's output asks.
type shown func(out opOutput) error

// opOutput is where and how a result is printed: stdout, the --output format, the host root
// (inspect and status list its quarantined devices) and the command's full name.
type opOutput struct {
	w      io.Writer
	errw   io.Writer // stderr: render's notes, kubevirt labels' "wrote FILE"
	format string
	root   host.Root
	name   string // "vgpu-host mdev create"
}

// emit writes v as JSON or YAML, or calls table for the human format (emit's).
func (o opOutput) emit(v any, table func(w io.Writer) error) error {
	return emitTo(o.w, o.format, v, table)
}

// opCommand is a command backed by an operation: its request builder and the operation with
// its renderer, and the order the command has always reported mistakes in.
type opCommand struct {
	// request builds the typed request from the command's flags and operands, checking them.
	request func(f flagValues) (ops.Request, error)
	// run runs the request on env and returns its result to print (nil: nothing printed)
	// and the operation's error.
	run func(ctx context.Context, env ops.Env, req ops.Request) (shown, error)
	// requestFirst: the request is checked before the host root and --output.
	requestFirst bool
	conn         connKind
	// pre, when set, checks the flags and operands before anything else (the operand count).
	pre func(f flagValues) error
	// outputFirst: --output is checked before the request and the root (render, kubevirt).
	outputFirst bool
	// outputLast: --output is checked after the operation ran (mig: as it always was).
	outputLast bool
	// needsRoot, when set, says whether the request needs the host root at all (render
	// --offline does not); only with requestFirst.
	needsRoot func(req ops.Request) bool
	// anyRoot: in the CLI, a --host-root that cannot be used is / (mig); the agent serves
	// its own root only.
	anyRoot bool
	// rootErr, when set, is the error a root that cannot be used fails with (kubevirt vm's
	// names the VM); only with requestFirst.
	rootErr func(req ops.Request, err error) error
	// finish, when set, completes the built request at site after the root and --output,
	// before the libvirt URI (attach's --force checked, kubevirt vm's --config read, image
	// export's progress asked for).
	finish func(f flagValues, req ops.Request, site opSite) (ops.Request, error)
	// interruptible: in the CLI, SIGINT and SIGTERM cancel the operation (image export kills
	// its helpers and removes FILE.partial); the agent's request has its own cancellation.
	interruptible bool
	// variant, when set, is the command this invocation runs instead, when it is another
	// (plan --migrate: the migration's plan).
	variant func(f flagValues) (opCommand, bool)
	// vet, when set, checks the request built first at site before the root (migrate:
	// --target-cmd refused in the agent, the way to the target).
	vet func(req ops.Request, site opSite) error
	// oneShot is what a one-shot CLI process does before the operation runs (never the
	// agent, which lives on).
	oneShot func(req ops.Request)
}

// opCmd is the opCommand of an operation run with request type Q and result R: build makes
// Q, run is the operation (ops.Bind, ...), render prints R. With partial, a result that comes
// with an error is printed before the error is returned (check's, plan's refusals, a damaged
// ledger's intact entries); without, an error alone is returned.
func opCmd[Q ops.Request, R any](build func(flagValues) (Q, error), run func(context.Context, ops.Env, Q) (R, error), render func(opOutput, R) error, partial bool) opCommand {
	return opCommand{
		request: func(f flagValues) (ops.Request, error) {
			q, err := build(f)
			if err != nil {
				return nil, err
			}
			return q, nil
		},
		run: func(ctx context.Context, env ops.Env, req ops.Request) (shown, error) {
			q, ok := req.(Q)
			if !ok {
				return nil, fmt.Errorf("internal error: %T is not a %T (a bug in vgpu-host, please report it)", req, q)
			}
			res, err := run(ctx, env, q)
			if isNil(res) || (err != nil && !partial) {
				return nil, err
			}
			return func(o opOutput) error { return render(o, res) }, err
		},
	}
}

// plain is the renderer opCmd takes of a renderer that prints R in an output format on w
// (renderMdevTypes, ...).
func plain[R any](render func(w io.Writer, output string, res R) error) func(opOutput, R) error {
	return func(o opOutput, r R) error { return render(o.w, o.format, r) }
}

// manifestOf prints a Kubernetes manifest R as renderManifest does.
func manifestOf[R any](o opOutput, r R) error { return renderManifest(o.w, o.format, r) }

// infallible is the request builder opCmd takes of one that refuses nothing.
func infallible[Q any](build func(flagValues) Q) func(flagValues) (Q, error) {
	return func(f flagValues) (Q, error) { return build(f), nil }
}

// checked is the request builder opCmd takes of one whose request checks itself (Check).
func checked[Q interface{ Check() error }](build func(flagValues) Q) func(flagValues) (Q, error) {
	return func(f flagValues) (Q, error) {
		q := build(f)
		return q, q.Check()
	}
}

// isNil reports whether v is nil: a nil pointer, slice or map result is no result.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Map, reflect.Interface:
		return rv.IsNil()
	}
	return false
}

// opCommandNames are the full names of the commands backed by an operation, in the order
// help lists them. opCommandNamed builds each one's entry (TestOpCommandNames: the two agree).
var opCommandNames = [...]string{
	"inspect", "check", "status", "destroy", "apply", "plan", "bind", "unbind",
	"mdev create", "mdev remove", "vf enable", "vf disable", "host restore",
	"mdev types", "mdev list", "mdev place", "mdev define", "mdev undefine", "vf list",
	"host install-unit", "host release-quarantine", "host health", "verify", "attach", "detach",
	"mig show", "mig plan", "mig apply",
	"render", "image export", "migrate", "migrate-target", "kubevirt config", "kubevirt labels", "kubevirt vm",
	"host layout show", "host layout plan", "host layout apply",
}

// opCommandNamed builds the entry of the operation-backed command name; ok is false when name
// has none. Only the named entry is built: a process runs one command, and building all of
// them (each an instantiation of opCmd) cost every first call about 45 page faults (issue 32).
func opCommandNamed(name string) (opCommand, bool) {
	var c opCommand
	switch name {
	case "inspect":
		c = opCmd(inspectRequest, ops.Inventory, renderInventory, false)
		c.oneShot = func(req ops.Request) {
			if r, ok := req.(ops.InventoryRequest); ok && r.Target == "" {
				inspectGC()
			}
		}
	case "check":
		c = opCmd(func(flagValues) (ops.CheckRequest, error) { return ops.CheckRequest{}, nil }, ops.Check, renderCheck, true)
	case "status":
		c = opCmd(statusRequest, ops.Status, renderStatus, true)
		c.conn = connFlag
	case "destroy":
		c = connOf(opCmd(destroyRequest, ops.Destroy, renderDestroy, true), connFlag)
	case "apply":
		c = connOf(opCmd(applyRequest, ops.Apply, renderApply, true), connFlagLazy)
	case "plan":
		c = connOf(opCmd(planRequest, ops.Plan, renderPlan, true), connFlagLazy)
		c.variant = func(f flagValues) (opCommand, bool) {
			if !f.IsSet("migrate") {
				return opCommand{}, false
			}
			// plan --migrate: the migration's plan.
			pm := connOf(opCmd(planMigrateRequestOf, planMigrateOp, plain(renderMigrate), true), connFlag)
			pm.pre, pm.vet = planMigrateUsage, vetMigrate
			return pm, true
		}
	case "bind":
		c = opCmd(bindRequest, ops.Bind, renderBindResult, false)
	case "unbind":
		c = opCmd(unbindRequest, ops.Unbind, renderBindResult, false)
	case "mdev create":
		c = local(opCmd(mdevCreateRequest, ops.MdevCreate, renderMdevCreate, false), true)
	case "mdev remove":
		c = local(opCmd(mdevRemoveRequest, ops.MdevRemove, renderMdevRemove, false), true)
	case "vf enable":
		c = local(opCmd(vfEnableRequest, ops.VFEnable, renderVFEnable, false), true)
	case "vf disable":
		c = local(opCmd(vfDisableRequest, ops.VFDisable, renderVFDisable, false), true)
	case "host restore":
		c = local(opCmd(restoreRequest, ops.Restore, renderRestore, true), false)
	case "mdev types":
		c = local(opCmd(infallible(mdevTypesRequest), ops.MdevTypes, plain(renderMdevTypes), false), false)
	case "mdev list":
		c = local(opCmd(infallible(mdevListRequest), ops.MdevList, plain(renderMdevList), false), false)
	case "mdev place":
		c = local(opCmd(mdevPlaceRequest, ops.MdevPlace, plain(renderMdevPlace), false), false)
	case "mdev define":
		c = local(opCmd(checked(mdevDefineRequest), ops.MdevDefine, plain(renderMdevDefine), false), true)
	case "mdev undefine":
		c = local(opCmd(checked(mdevUndefineRequest), ops.MdevUndefine, plain(renderMdevUndefine), false), true)
	case "vf list":
		c = local(opCmd(vfListRequest, ops.VFList, plain(renderVFList), false), false)
	case "host install-unit":
		c = local(opCmd(installUnitRequest, ops.InstallUnit, plain(renderInstallUnit), false), false)
	case "host release-quarantine":
		c = opCmd(releaseQuarantineRequest, ops.ReleaseQuarantine, plain(renderReleaseQuarantine), false)
	case "host health":
		c = local(opCmd(healthRequest, ops.Health, plain(renderHealth), false), false)
	case "verify":
		c = connOf(opCmd(verifyRequest, ops.Verify, plain(renderVerify), true), connFlag)
	case "attach":
		c = connOf(opCmd(attachRequest, ops.Attach, plain(renderAttach), false), connFlag)
		c.finish = func(_ flagValues, req ops.Request, _ opSite) (ops.Request, error) {
			r, _ := req.(ops.AttachRequest)
			_, err := ops.CheckForce(r.Force, vfio.ForceableChecks)
			return req, err
		}
	case "detach":
		c = connOf(opCmd(detachRequest, ops.Detach, plain(renderDetach), false), connFlag)
	// mig: the request, the root (/ when --host-root cannot be used), the operation, and only
	// then --output, as these commands always did.
	case "mig show":
		c = migCmd(opCmd(infallible(migShowRequest), ops.MIGShow, plain(renderMIGShow), false), false)
	case "mig plan":
		c = migCmd(opCmd(migPlanRequest, ops.MIGPlan, plain(renderMIGPlan), false), true)
	case "mig apply":
		c = migCmd(opCmd(migApplyRequest, ops.MIGApply, plain(renderMIGApply), false), true)
	case "render":
		// render: the operand and --virt-type, --output, the spec, then the root (unread with
		// --offline), as it always did.
		c = opCmd(renderSpecRequest, ops.Render, renderNoted, false)
		c.pre = func(f flagValues) error { _, err := renderRequest(f); return err }
		c.outputFirst, c.requestFirst = true, true
		c.needsRoot = func(req ops.Request) bool { r, _ := req.(ops.RenderRequest); return !r.Offline }
	case "image export":
		// image export: the operand count, --output (a path there is a mistake of its own), the
		// request, the root, then the helpers' progress asked for only when it can be shown.
		c = opCmd(exportRequest, ops.Export, plain(renderExport), false)
		c.pre = exportUsage
		c.outputFirst, c.requestFirst, c.conn, c.interruptible = true, true, connFlagRaw, true
		c.finish = func(f flagValues, req ops.Request, site opSite) (ops.Request, error) {
			r, _ := req.(ops.ExportRequest)
			r.Progress = f.String("output") == "table" && site.liveProgress()
			return r, nil
		}
	case "migrate":
		// migrate: the request, the way to the target, the root, --output, --connect; its
		// result printed with the error when it fails half-way.
		c = connOf(opCmd(migrateRequest, ops.Migrate, plain(renderMigrate), true), connFlag)
		c.vet = vetMigrate
	case "migrate-target":
		c = connOf(opCmd(migrateTargetRequest, ops.MigrateTarget, renderMigrateTarget, false), connFlag)
	// kubevirt: the operand count, --output, the root, the request (kubevirt vm: its disks
	// and spec before the root, --config after it, both errors naming the VM).
	case "kubevirt config":
		c = manifest(opCmd(kubeVirtConfigRequest, ops.KubeVirtConfig, manifestOf[*ops.KubeVirtConfigResult], false), 0, name)
	case "kubevirt labels":
		c = manifest(opCmd(kubeVirtLabelsRequest, ops.KubeVirtLabels, renderLabelsWritten, false), 0, name)
	case "kubevirt vm":
		c = manifest(opCmd(kubeVirtVMSpecRequest, ops.KubeVirtVM, manifestOf[*ops.KubeVirtVMResult], false), 1, name)
		c.requestFirst, c.finish = true, kubeVirtVMConfig
		c.rootErr = func(req ops.Request, err error) error {
			r, _ := req.(ops.KubeVirtVMRequest)
			return fmt.Errorf("kubevirt vm %s: %w", kubeVMName(r), err)
		}
	case "host layout show":
		c = opCmd(infallible(layoutShowRequest), ops.LayoutShow, plain(renderLayoutShow), false)
		c.conn = connFlagOrLocal
	case "host layout plan":
		c = connOf(opCmd(layoutPlanRequest, ops.LayoutPlan, plain(renderLayoutPlan), true), connFlagOrLocal)
	case "host layout apply":
		c = connOf(opCmd(layoutApplyRequest, ops.LayoutApply, plain(renderLayoutApply), true), connFlagOrLocal)
	default:
		return opCommand{}, false
	}
	return c, true
}

// local is c run on this machine's libvirt (connLocal), its request checked first or not.
func local(c opCommand, requestFirst bool) opCommand {
	c.conn, c.requestFirst = connLocal, requestFirst
	return c
}

// connOf is c with its request checked first and its libvirt connection of kind.
func connOf(c opCommand, kind connKind) opCommand {
	c.requestFirst, c.conn = true, kind
	return c
}

// migCmd is a mig command: its request checked first or not, any root in the CLI, --output
// checked last.
func migCmd(c opCommand, requestFirst bool) opCommand {
	c.requestFirst, c.anyRoot, c.outputLast = requestFirst, true, true
	return c
}

// manifest is a kubevirt command taking n operands (name in its usage error), --output
// checked first.
func manifest(c opCommand, n int, name string) opCommand {
	c.pre = func(f flagValues) error {
		switch got := len(f.Operands()); {
		case got == n:
			return nil
		case n == 0:
			return usageErr("%s takes no arguments", name)
		default:
			return usageErr("%s takes one SPEC.yaml, got %d arguments", name, got)
		}
	}
	c.outputFirst = true
	return c
}

// opSite is where an operation-backed command runs: the CLI's process (cliSite) or the agent
// (agentSite, agentops.go). It resolves the host root and libvirt URI the flags name and
// gives the operation its environment.
type opSite interface {
	root(f flagValues) (host.Root, error)
	connURI(f flagValues, root host.Root) (string, error)
	env(f flagValues, kind connKind, root host.Root, uri string) ops.Env
	// oneShot reports whether this is a one-shot process (the CLI).
	oneShot() bool
	// liveProgress reports whether progress redrawn in place can reach a person: the CLI's
	// stderr is a terminal, or the agent's caller streams events (its CLI draws them only on
	// a terminal).
	liveProgress() bool
}

// runOpCommand runs the operation-backed command name at site: the request built from f
// (before or after the root and --output are checked, as the command always did), the
// operation, its result printed on stdout (and what a command says beside it, on stderr).
// The error is what the command fails with (printed "vgpu-host: ERR" with exitCode's code);
// pre, when not nil, is the request Prepare built already.
func runOpCommand(ctx context.Context, name string, oc opCommand, f flagValues, site opSite, stdout, stderr io.Writer, pre ops.Request) error {
	if oc.pre != nil {
		if err := oc.pre(f); err != nil {
			return err
		}
	}
	req := pre
	build := func() (err error) {
		if req == nil {
			req, err = oc.request(f)
		}
		return err
	}
	var o string
	output := func() (err error) {
		o, err = outputFormat(f.String("output"))
		return err
	}
	if oc.outputFirst {
		if err := output(); err != nil {
			return err
		}
	}
	if oc.requestFirst {
		if err := build(); err != nil {
			return err
		}
		if oc.vet != nil {
			if err := oc.vet(req, site); err != nil {
				return err
			}
		}
	}
	var root host.Root
	if oc.needsRoot == nil || oc.needsRoot(req) {
		var err error
		if root, err = site.root(f); err != nil {
			switch {
			case oc.anyRoot && site.oneShot():
				if root, err = host.NewRoot("/"); err != nil {
					return err
				}
			case oc.rootErr != nil:
				return oc.rootErr(req, err)
			default:
				return err
			}
		}
	}
	if !oc.outputFirst && !oc.outputLast {
		if err := output(); err != nil {
			return err
		}
	}
	if err := build(); err != nil {
		return err
	}
	if oc.finish != nil {
		var err error
		if req, err = oc.finish(f, req, site); err != nil {
			return err
		}
	}
	var uri string
	switch oc.conn {
	case connFlag:
		var err error
		if uri, err = site.connURI(f, root); err != nil {
			return err
		}
	case connFlagRaw:
		uri = f.String("connect")
	}
	if oc.oneShot != nil && site.oneShot() {
		oc.oneShot(req)
	}
	if oc.interruptible && site.oneShot() {
		var stop context.CancelFunc
		ctx, stop = signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
		defer stop()
	}
	env := site.env(f, oc.conn, root, uri)
	if env.MigrationTarget == nil {
		// migrate's way to the target's vgpu-host, its stderr the command's.
		env.MigrationTarget = func(words []string, ssh bool) lifecycle.MigrationTarget {
			return &execTarget{words: words, ssh: ssh, stderr: stderr}
		}
	}
	show, err := oc.run(ctx, env, req)
	if show == nil {
		return err
	}
	if oc.outputLast {
		if oerr := output(); oerr != nil {
			return oerr
		}
	}
	if perr := show(opOutput{w: stdout, errw: stderr, format: o, root: root, name: appName + " " + name}); perr != nil {
		return perr
	}
	return err
}

// opCommandOf is the operation-backed command that this invocation (f) of command name runs:
// its opCommandNamed entry, or the entry's variant (plan --migrate).
func opCommandOf(name string, f flagValues) opCommand {
	oc, _ := opCommandNamed(name)
	if oc.variant != nil {
		if v, ok := oc.variant(f); ok {
			return v
		}
	}
	return oc
}

// opAction is the CLI's action of the operation-backed command name: flags → request →
// operation → render, in this process (wireAgent forwards it to the agent first when
// --agent says so).
func opAction(name string) cli.ActionFunc {
	return func(ctx context.Context, cmd *cli.Command) error {
		f := cliFlags{cmd}
		oc := opCommandOf(name, f)
		return runOpCommand(ctx, name, oc, f, cliSite{cmd}, cmd.Root().Writer, cmd.Root().ErrWriter, nil)
	}
}

// cliSite is the CLI's process: --host-root, --connect, this machine's libvirt, the
// invocation's stderr for progress.
type cliSite struct{ cmd *cli.Command }

func (s cliSite) root(flagValues) (host.Root, error) { return rootOf(s.cmd) }

func (s cliSite) connURI(_ flagValues, root host.Root) (string, error) { return connURI(s.cmd, root) }

func (s cliSite) oneShot() bool { return true }

func (s cliSite) liveProgress() bool { return stderrIsTerminal(s.cmd) }

func (s cliSite) env(_ flagValues, kind connKind, root host.Root, uri string) ops.Env {
	switch kind {
	case connLocal:
		return opsEnv(s.cmd, root, virt.DefaultURI)
	case connFlagOrLocal:
		env := opsEnv(s.cmd, root, virt.DefaultURI)
		if uri := s.cmd.String("connect"); uri != "" {
			env.OpenConn = func() (virt.Conn, error) { return envOf(s.cmd).openConn(uri, remote.OpenOptions{}) }
		}
		return env
	case connFlagLazy:
		env := opsEnv(s.cmd, root, "")
		env.OpenConn = func() (virt.Conn, error) {
			uri, err := connURI(s.cmd, root)
			if err != nil {
				return nil, err
			}
			return openConnFor(s.cmd, uri)
		}
		return env
	}
	return opsEnv(s.cmd, root, uri)
}
