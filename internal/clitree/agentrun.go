package clitree

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/agent/agentapi"
	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/internal/lazy"
	"github.com/vgpu-host/vgpu-host/ops"
	"github.com/vgpu-host/vgpu-host/virt"
	"github.com/vgpu-host/vgpu-host/virt/remote"
)

// sentKeys is lifecycle's ReadKey in the agent: the key files the caller's CLI read and sent
// (keys, by the path the spec names), and no other (the agent opens no path a caller names).
func sentKeys(keys map[string]string) func(path string, limit int64) ([]byte, error) {
	return func(path string, limit int64) ([]byte, error) {
		k, ok := keys[path]
		if !ok {
			return nil, fmt.Errorf("the agent opens no file a caller names and %s was not sent with the request: run the command with the vgpu-host CLI, which sends the key files it can read, or give the key itself (ssh-ed25519 AAAA…): %w", path, host.ErrInvalid)
		}
		if int64(len(k)) > limit {
			return nil, fmt.Errorf("%s: larger than %d bytes: %w", path, limit, host.ErrTooLarge)
		}
		return []byte(k), nil
	}
}

// borrowedConn is the agent's connection lent to one command: the command's Close is a no-op.
type borrowedConn struct{ virt.Conn }

// Close leaves the agent's connection open.
func (borrowedConn) Close() error { return nil }

// openConnFor opens the invocation's libvirt connection (the agent lends its own instead:
// cliRunner.opsEnv).
//
// Only apply goes on while the helper connects: it asks libvirt whether the domain exists
// before it claims or changes anything, so an unreachable libvirtd is still its first error.
// Every other command waits for the connection here and fails on it first, as before (status
// would otherwise list the ledger's VMs as "unknown" and exit 0).
func openConnFor(cmd *cli.Command, uri string) (virt.Conn, error) {
	return openFor(envOf(cmd), cmd.Name, uri)
}

// openFor opens a connection to uri for the command named name (see openConnFor).
func openFor(e *Env, name, uri string) (virt.Conn, error) {
	if name == "apply" {
		return e.openConn(uri, remote.OpenOptions{})
	}
	return opened(e.openConn(uri, remote.OpenOptions{}))
}

// lendConn is the agent's connection lent to the command named name, or, when the agent
// holds none (conn nil), one of the command's own to uri.
func lendConn(e *Env, conn func() (virt.Conn, error), uri, name string) (virt.Conn, error) {
	if conn == nil {
		return openFor(e, name, uri)
	}
	c, err := conn()
	if err != nil {
		return nil, err
	}
	return borrowedConn{c}, nil
}

// hostIOFor is hostIO for the invocation (the agent's logs every sysfs write: loggedHostIO).
func hostIOFor(cmd *cli.Command, root host.Root) (host.Writer, host.ModuleLoader) {
	return envOf(cmd).hostIO(root)
}

// loggedHostIO is hostIO whose every sysfs write is also logged to log with its device, path,
// old and new value, the operation op and the caller peer.
func loggedHostIO(e *Env, root host.Root, log *slog.Logger, op string, peer agentapi.Peer) (host.Writer, host.ModuleLoader) {
	w, m := e.hostIO(root)
	l := log.With("op", op, "uid", peer.UID, "pid", peer.PID)
	w = host.LogWriter{W: w, Root: root, Log: func(c host.LoggedWrite) {
		attrs := []any{"device", c.Device, "path", c.Path, "old", c.Old, "new", c.New}
		if c.Err != nil {
			l.Warn("host change failed", append(attrs, "err", c.Err)...)
			return
		}
		l.Info("host change", attrs...)
	}}
	return w, m
}

// stderrIsTerminal reports whether progress lines are for a human on a terminal (the CLI's
// stderr; the agent's runs print theirs into the result's stderr, or stream them as events).
func stderrIsTerminal(*cli.Command) bool {
	return isTerminal(os.Stderr)
}

// cliRunner is the agent's Runner: every command it runs is an operation of package ops,
// run in-process from the request's typed values; no command line is built or parsed.
type cliRunner struct {
	root host.Root
	uri  string
	log  *slog.Logger
	env  *Env // the trees' (nil: the light CLI's)
	// unserved counts the checked requests that named no operation (refused as a bug in
	// vgpu-host): the tests check that none does.
	unserved atomic.Int64
}

// Prepare checks a typed request against the command tree's flag definitions (see
// prepareRequest). For a command backed by an operation it builds the typed request too, with
// the command's request builder, and decides the class on it (a request the builder refuses
// is refused when it runs, after the permission check, as the command always reported it).
func (r *cliRunner) Prepare(req agentapi.ExecRequest) (agentapi.Job, error) {
	app := newApp(r.env)
	pruneUnnamed(app, strings.Fields(req.Command))
	j, cl, err := prepareRequest(app, req)
	if err != nil {
		return j, err
	}
	if oc, f, ok := operationOf(cl, req); ok {
		if op, err := oc.request(f); err == nil {
			j.Operation, j.Class = op, r.Class(op)
		}
	}
	return j, nil
}

// Run runs the job as its command's operation (runOperation), with no command line.
func (r *cliRunner) Run(ctx context.Context, job agentapi.Job, env agentapi.RunEnv) agentapi.ExecResult {
	app := newApp(r.env)
	pruneUnnamed(app, strings.Fields(job.Op))
	_, cl, err := prepareRequest(app, job.Request)
	if err != nil {
		return agentapi.ExecResult{Stderr: "vgpu-host: " + err.Error() + "\n", ExitCode: exitUsage}
	}
	oc, f, ok := operationOf(cl, job.Request)
	if !ok {
		// Every command the agent runs has an operation (TestCommandLineCommands).
		r.unserved.Add(1)
		return agentapi.ExecResult{Stderr: fmt.Sprintf("vgpu-host: internal error: %s has no operation in this vgpu-host (a bug in vgpu-host, please report it)\n", job.Op), ExitCode: exitFailure}
	}
	return r.runOperation(ctx, job, env, oc, f)
}

// Class is how a typed operation runs in the agent: classOf, the command's rule, on the
// operation's typed values.
func (r *cliRunner) Class(op agentapi.Operation) agentapi.Class {
	return classOf(op.Op(), op.Bool, op.IsSet)
}

// Do runs a typed operation (package ops) for the caller in env on the agent's root and
// libvirt, with its host writes logged: the command tree is neither built nor run.
func (r *cliRunner) Do(ctx context.Context, op agentapi.Operation, env agentapi.RunEnv) (any, error) {
	req, ok := op.(ops.Request)
	if !ok {
		return nil, &ops.Error{Code: exitUsage, Err: fmt.Errorf("%T is not an operation of this vgpu-host", op)}
	}
	// The agent opens no key file a caller names: a typed endpoint sends none.
	e := r.opsEnv(req.Op(), env, nil, env.Progress)
	return ops.Run(ctx, e, req)
}

// opsEnv is the environment of the operation name run for the caller in env: the agent's
// root, its libvirt connection lent, its host writes logged, the key files the caller sent
// (keys), and each progress event logged and given to progress (when not nil).
func (r *cliRunner) opsEnv(name string, env agentapi.RunEnv, keys map[string]string, progress func(any)) ops.Env {
	e := ops.Env{
		Root:     r.root,
		Peer:     env.Peer,
		ReadKey:  sentKeys(keys),
		OpenConn: func() (virt.Conn, error) { return lendConn(r.envOrLight(), env.Conn, r.uri, name) },
		HostIO: func() (host.Writer, host.ModuleLoader) {
			if r.log == nil {
				return r.envOrLight().hostIO(r.root)
			}
			return loggedHostIO(r.envOrLight(), r.root, r.log, name, env.Peer)
		},
	}
	var l *slog.Logger
	if r.log != nil {
		l = r.log.With("op", name, "uid", env.Peer.UID, "pid", env.Peer.PID)
	}
	if l != nil || progress != nil {
		e.Progress = func(ev ops.Event) {
			if l != nil {
				l.Info("progress", "subject", ev.Subject, "message", ev.Message)
			}
			if progress != nil {
				progress(ev)
			}
		}
	}
	withHostParts(r.envOrLight(), &e)
	return e
}

// agentRoot is the agent's root, which --host-root in f must name, if set.
func agentRoot(f flagValues, root host.Root) (host.Root, error) {
	if f.IsSet("host-root") {
		v := f.String("host-root")
		if !filepath.IsAbs(v) || filepath.Clean(v) != root.Dir() {
			return host.Root{}, usageErr("--host-root %s: this agent serves %s; give its absolute path, talk to that root's agent (--agent-socket), or run with --agent never", v, root.Dir())
		}
	}
	return root, nil
}

// agentURI is the agent's libvirt URI uri, which --connect in f may only repeat.
func agentURI(f flagValues, uri string) (string, error) {
	if f.IsSet("connect") && f.String("connect") != uri {
		return "", usageErr("--connect %s: this agent uses %s; run the command with --agent never to use another libvirt", f.String("connect"), uri)
	}
	return uri, nil
}

// agentRule says how a command runs in the agent.
type agentRule struct {
	class agentapi.Class
	// fileOperands picks the operands that name files the command reads (the CLI sends
	// their content); nil: none.
	fileOperands func(operands []string) []int
	// fileFlags are flags whose value names a file the command reads.
	fileFlags []string
	// specs: the file operands are VM specs, whose sshAuthorizedKeys files the CLI sends too.
	specs bool
	// absFlags are flags naming paths the command writes or runs: the CLI makes them
	// absolute, as the agent does not share its working directory.
	absFlags []string
}

// allOperands: every operand is a file (SPEC...).
func allOperands(operands []string) []int {
	out := make([]int, len(operands))
	for i := range operands {
		out[i] = i
	}
	return out
}

// specOperands: operands that destroy reads as spec files (vmName's rule: a .yaml/.yml name).
func specOperands(operands []string) []int {
	var out []int
	for i, o := range operands {
		if strings.HasSuffix(o, ".yaml") || strings.HasSuffix(o, ".yml") {
			out = append(out, i)
		}
	}
	return out
}

// agentRules lists every command the agent runs, how, and which arguments are files. A
// command not listed (agent, completion, the man page writer, device-plugin, dra-plugin)
// never runs in the agent; the CLI runs it itself. Built on first use (internal/lazy): not at
// every start of the CLI.
var agentRules = lazy.Value[map[string]agentRule]{New: func() map[string]agentRule {
	return map[string]agentRule{
		"inspect":           {class: agentapi.Read},
		"check":             {class: agentapi.Read},
		"bind":              {class: agentapi.Mutation},
		"unbind":            {class: agentapi.Mutation},
		"vf list":           {class: agentapi.Read},
		"vf enable":         {class: agentapi.Mutation},
		"vf disable":        {class: agentapi.Mutation},
		"mdev types":        {class: agentapi.Read},
		"mdev list":         {class: agentapi.Read},
		"mdev place":        {class: agentapi.Read},
		"mdev create":       {class: agentapi.Mutation},
		"mdev remove":       {class: agentapi.Mutation},
		"mdev define":       {class: agentapi.Mutation},
		"mdev undefine":     {class: agentapi.Mutation},
		"host restore":      {class: agentapi.Mutation},
		"host install-unit": {class: agentapi.RootMutation}, // --exec goes as typed: a relative one is refused there as here
		"render":            {class: agentapi.Read, fileOperands: allOperands, specs: true},
		"plan":              {class: agentapi.Read, fileOperands: allOperands, specs: true},
		"apply":             {class: agentapi.Mutation, fileOperands: allOperands, specs: true},
		"destroy":           {class: agentapi.Mutation, fileOperands: specOperands},
		// docs/migrate.md: both ends of a live migration change their host (--dry-run: a read).
		"migrate":           {class: agentapi.Mutation},
		"migrate-target":    {class: agentapi.Mutation},
		"attach":            {class: agentapi.Mutation}, // a read with --dry-run (classOf)
		"detach":            {class: agentapi.Mutation},
		"status":            {class: agentapi.Read},
		"verify":            {class: agentapi.Read},
		"image export":      {class: agentapi.RootMutation, absFlags: []string{"to"}},
		"kubevirt config":   {class: agentapi.Read, fileFlags: []string{"config"}},
		"kubevirt vm":       {class: agentapi.Read, fileOperands: allOperands, fileFlags: []string{"config"}},
		"kubevirt labels":   {class: agentapi.Read, fileFlags: []string{"config"}},
		"mig show":          {class: agentapi.Read},
		"mig plan":          {class: agentapi.Read},
		"mig apply":         {class: agentapi.Mutation},
		"host layout plan":  {class: agentapi.Read, fileOperands: allOperands},
		"host layout apply": {class: agentapi.Mutation, fileOperands: allOperands},
		"host layout show":  {class: agentapi.Read},
		"host health":       {class: agentapi.Read},

		// docs/health.md: a clean check lifts a quarantine.
		"host release-quarantine": {class: agentapi.Mutation},
	}
}}

// cliOnlyFlag reports whether flag name never travels to the agent: how the CLI reaches it,
// and what the CLI answers itself.
func cliOnlyFlag(name string) bool {
	switch name {
	case "agent", "agent-socket", "help", "version":
		return true
	}
	return false
}

// classOf is how command op runs, decided on typed values: its rule's class, a read with
// --dry-run, a change with `kubevirt labels --write`. boolFlag is a boolean flag's value (the
// request's, or its typed request's when the agent decides on the operation it runs). One
// function for both, so the class the agent authorizes is the class of what runs.
func classOf(op string, boolFlag, isSet func(name string) bool) agentapi.Class {
	c := agentRules.Get()[op].class
	if op == "kubevirt labels" && boolFlag("write") {
		c = agentapi.Mutation
	}
	if boolFlag("dry-run") {
		c = agentapi.Read
	}
	// A migration's plan, dry run or not, has the agent reach another host (ssh as the
	// agent's user, to a host the caller names): a change's right, not a reader's.
	if op == "migrate" || (op == "plan" && isSet("migrate")) {
		c = agentapi.Mutation
	}
	return c
}

// opName is a command's full name below the root ("mdev create").
func opName(cmd *cli.Command) string {
	p := cmd.Path()
	return strings.Join(p[1:], " ")
}

// typedFlag is one checked flag of a request: its canonical name, its value as the flag's own
// text(s) (the file names of a flag naming files, Job.Files) and its typed value.
type typedFlag struct {
	name   string
	values []string
	b      bool // a boolean flag's value
	v      any  // the value, typed as the flag is: bool, int, string, time.Duration or []string
}

// checkedRequest is a request checked against the command tree's flag definitions: the
// command's path, its typed flags and operands.
type checkedRequest struct {
	path     []*cli.Command // root first
	flags    []typedFlag
	operands []string
	rule     agentRule
	// defs are the flags of the command and of the commands above it, by long name.
	defs map[string]cli.Flag
}

// prepareRequest checks a typed request against the command tree app: the command is one
// the agent runs, every flag is a flag of it (or of a command above it) named by its long
// name, with a value of the flag's type, and no value holds a NUL. From those typed values it
// decides the job's class (classOf) and which values name files. Nothing in a request is
// ever parsed as a command line: there is no text for a flag to hide in.
func prepareRequest(app *cli.Command, req agentapi.ExecRequest) (agentapi.Job, checkedRequest, error) {
	job := agentapi.Job{Request: req, Op: req.Command}
	var cl checkedRequest
	if req.Command == "completion" || req.Command == "agent" {
		return job, cl, fmt.Errorf("%s cannot run through the agent: run it with --agent never", req.Command)
	}
	rule, ok := agentRules.Get()[req.Command]
	if !ok {
		return job, cl, fmt.Errorf("%q is not a command the agent runs (%s): run it with --agent never", req.Command, "docs/agent.md lists them")
	}
	cl.rule = rule
	cl.path = []*cli.Command{app}
	for _, name := range strings.Fields(req.Command) {
		sub := cl.path[len(cl.path)-1].Command(name)
		if sub == nil {
			return job, cl, fmt.Errorf("%q is not a command of this vgpu-host", req.Command)
		}
		cl.path = append(cl.path, sub)
	}
	known := map[string]cli.Flag{}
	for _, c := range cl.path {
		for _, f := range c.Flags {
			if n := f.Names()[0]; !cliOnlyFlag(n) {
				known[n] = f
			}
		}
	}
	bools := map[string]bool{}
	for _, name := range slices.Sorted(maps.Keys(req.Flags)) {
		f, ok := known[name]
		if !ok {
			return job, cl, fmt.Errorf("flag %q: %s has no such flag (flags are named by their long name, without dashes: %s)", name, req.Command, strings.Join(slices.Sorted(maps.Keys(known)), ", "))
		}
		tf, err := typedValue(f, name, req.Flags[name])
		if err != nil {
			return job, cl, err
		}
		cl.flags = append(cl.flags, tf)
		if _, isBool := f.(*cli.BoolFlag); isBool {
			bools[name] = tf.b
		}
	}
	for i, o := range req.Operands {
		if strings.ContainsRune(o, 0) {
			return job, cl, fmt.Errorf("operand %d: contains a NUL byte", i+1)
		}
	}
	cl.operands = req.Operands
	cl.defs = known
	boolFlag := func(name string) bool {
		if v, ok := bools[name]; ok {
			return v
		}
		if f, ok := known[name].(*cli.BoolFlag); ok {
			return f.Value // the flag's default: the agent's flags read no environment
		}
		return false
	}
	job.Class = classOf(req.Command, boolFlag, func(name string) bool { _, ok := req.Flags[name]; return ok })
	if rule.fileOperands != nil {
		for _, i := range rule.fileOperands(req.Operands) {
			job.Files = append(job.Files, req.Operands[i])
		}
	}
	for _, tf := range cl.flags {
		if slices.Contains(rule.fileFlags, tf.name) {
			job.Files = append(job.Files, tf.values...)
		}
	}
	return job, cl, nil
}

// typedValue checks a request's flag value against the flag's type and returns it as the
// text(s) the flag parses back to exactly that value.
func typedValue(f cli.Flag, name string, raw json.RawMessage) (typedFlag, error) {
	tf := typedFlag{name: name}
	bad := func(want string) (typedFlag, error) {
		return tf, fmt.Errorf("flag %q: %s is not %s", name, host.Clip(string(raw), 40), want)
	}
	dec := func(v any) bool {
		d := json.NewDecoder(bytes.NewReader(raw))
		return d.Decode(v) == nil && !d.More()
	}
	noNUL := func(s string) bool { return !strings.ContainsRune(s, 0) }
	switch f.(type) {
	case *cli.BoolFlag:
		if !dec(&tf.b) {
			return bad("a JSON boolean")
		}
		tf.values, tf.v = []string{strconv.FormatBool(tf.b)}, tf.b
	case *cli.IntFlag:
		var i int64
		if !dec(&i) {
			return bad("a JSON integer")
		}
		if int64(int(i)) != i {
			return bad("a JSON integer")
		}
		tf.values, tf.v = []string{strconv.FormatInt(i, 10)}, int(i)
	case *cli.StringFlag:
		var s string
		if !dec(&s) || !noNUL(s) {
			return bad("a JSON string")
		}
		tf.values, tf.v = []string{s}, s
	case *cli.DurationFlag:
		var s string
		if !dec(&s) {
			return bad(`a duration string ("90s")`)
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return bad(`a duration string ("90s")`)
		}
		tf.values, tf.v = []string{d.String()}, d
	case *cli.StringSliceFlag:
		var ss []string
		if !dec(&ss) {
			return bad("a JSON array of strings")
		}
		for _, s := range ss {
			// The flag splits its text at commas: a value holding one would come back as two.
			if !noNUL(s) || strings.Contains(s, ",") {
				return bad("an array of strings without commas")
			}
		}
		tf.values, tf.v = ss, ss
	default:
		return tf, fmt.Errorf("flag %q: a %T cannot be sent to the agent", name, f)
	}
	return tf, nil
}

// envOrLight is the runner's Env, or the light CLI's when it was given none.
func (r *cliRunner) envOrLight() *Env {
	if r.env == nil {
		return &Env{}
	}
	return r.env
}
