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
	"reflect"
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

// runEnv is what one command line run by the agent gets instead of the process's globals:
// the agent's host root and libvirt, its one connection, the caller's environment and a log
// of host changes. It lives in the run's root command's Metadata, so that concurrent runs
// never share mutable state. A command run from a shell has none.
type runEnv struct {
	root host.Root
	uri  string
	conn func() (virt.Conn, error) // nil: open one per run
	log  *slog.Logger
	peer agentapi.Peer
	// keys are the contents of the key files the caller's specs name, read by the CLI.
	keys map[string]string
}

const runEnvKey = "vgpu-host-agent-run"

// runEnvOf returns the agent's environment of this run, or nil outside the agent.
func runEnvOf(cmd *cli.Command) *runEnv {
	rv, _ := cmd.Root().Metadata[runEnvKey].(*runEnv)
	return rv
}

// readKey is lifecycle's ReadKey in the agent: the key files the caller's CLI read and sent,
// and no other (the agent opens no path a caller names).
func (rv *runEnv) readKey(path string, limit int64) ([]byte, error) {
	k, ok := rv.keys[path]
	if !ok {
		return nil, fmt.Errorf("the agent opens no file a caller names and %s was not sent with the request: run the command with the vgpu-host CLI, which sends the key files it can read, or give the key itself (ssh-ed25519 AAAA…): %w", path, host.ErrInvalid)
	}
	if int64(len(k)) > limit {
		return nil, fmt.Errorf("%s: larger than %d bytes: %w", path, limit, host.ErrTooLarge)
	}
	return []byte(k), nil
}

// borrowedConn is the agent's connection lent to one command: the command's Close is a no-op.
type borrowedConn struct{ virt.Conn }

// Close leaves the agent's connection open.
func (borrowedConn) Close() error { return nil }

// openConnFor opens the invocation's libvirt connection: openConn from a shell, the agent's
// own connection (never another URI) in the agent.
//
// Only apply goes on while the helper connects: it asks libvirt whether the domain exists
// before it claims or changes anything, so an unreachable libvirtd is still its first error.
// Every other command waits for the connection here and fails on it first, as before (status
// would otherwise list the ledger's VMs as "unknown" and exit 0).
func openConnFor(cmd *cli.Command, uri string) (virt.Conn, error) {
	rv := runEnvOf(cmd)
	if rv == nil {
		return openFor(envOf(cmd), cmd.Name, uri)
	}
	if _, err := agentConnURI(cmd, rv); err != nil {
		return nil, err
	}
	return lendConn(envOf(cmd), rv.conn, rv.uri, cmd.Name)
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

// hostIOFor is hostIO for the invocation; in the agent every sysfs write is also logged
// with its device, path, old and new value, and the caller.
func hostIOFor(cmd *cli.Command, root host.Root) (host.Writer, host.ModuleLoader) {
	if rv := runEnvOf(cmd); rv != nil && rv.log != nil {
		return loggedHostIO(envOf(cmd), root, rv.log, cmd.FullName(), rv.peer)
	}
	return envOf(cmd).hostIO(root)
}

// loggedHostIO is hostIO whose every sysfs write is also logged to log with its device, path,
// old and new value, the operation op and the caller peer.
func loggedHostIO(e *Env, root host.Root, log *slog.Logger, op string, peer agentapi.Peer) (host.Writer, host.ModuleLoader) {
	w, m := e.hostIO(root)
	l := log.With("op", op, "uid", peer.UID, "pid", peer.PID)
	w = host.LogWriter{W: w, Log: func(c host.LoggedWrite) {
		attrs := []any{"device", c.Device, "path", c.Path, "old", c.Old, "new", c.New}
		if c.Err != nil {
			l.Warn("host change failed", append(attrs, "err", c.Err)...)
			return
		}
		l.Info("host change", attrs...)
	}}
	return w, m
}

// stderrIsTerminal reports whether progress lines are for a human on a terminal. In the
// agent stderr is a buffer, returned when the command ends: no progress.
func stderrIsTerminal(cmd *cli.Command) bool {
	return runEnvOf(cmd) == nil && isTerminal(os.Stderr)
}

// mapEnvSource is a flag's environment variable read from the caller's environment (sent with
// the request) instead of the agent's.
type mapEnvSource struct {
	key string
	env map[string]string
}

func (m mapEnvSource) Lookup() (string, bool) { v, ok := m.env[m.key]; return v, ok }
func (m mapEnvSource) String() string         { return fmt.Sprintf("environment variable %q", m.key) }
func (m mapEnvSource) GoString() string       { return fmt.Sprintf("&mapEnvSource{Key:%q}", m.key) }
func (m mapEnvSource) IsFromEnv() bool        { return true }
func (m mapEnvSource) Key() string            { return m.key }

// flagSources returns the value sources of f (every flag type of urfave/cli has a Sources
// field; reflection reaches them all).
func flagSources(f cli.Flag) *cli.ValueSourceChain {
	v := reflect.ValueOf(f)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return nil
	}
	s := v.Elem().FieldByName("Sources")
	if !s.IsValid() || !s.CanAddr() {
		return nil
	}
	c, _ := s.Addr().Interface().(*cli.ValueSourceChain)
	return c
}

// useEnv makes every flag of the tree read its environment variables from env.
func useEnv(c *cli.Command, env map[string]string) {
	for _, f := range c.Flags {
		if src := flagSources(f); src != nil {
			for i, s := range src.Chain {
				if e, ok := s.(cli.EnvValueSource); ok && e.IsFromEnv() {
					src.Chain[i] = mapEnvSource{key: e.Key(), env: env}
				}
			}
		}
	}
	for _, sub := range c.Commands {
		useEnv(sub, env)
	}
}

// cliRunner is the agent's Runner: the operations, and for the commands without one yet the
// command tree, in-process.
type cliRunner struct {
	root host.Root
	uri  string
	log  *slog.Logger
	env  *Env // the trees' (nil: the light CLI's)
	// commandLines counts the requests run as a command line (runCommandLine): the tests
	// check that a command with an operation never is.
	commandLines atomic.Int64
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

// Run runs the job: a command backed by an operation as that operation, with no command line
// (runOperation); the others on a command tree (runCommandLine).
func (r *cliRunner) Run(ctx context.Context, job agentapi.Job, env agentapi.RunEnv) agentapi.ExecResult {
	app := newApp(r.env)
	pruneUnnamed(app, strings.Fields(job.Op))
	_, cl, err := prepareRequest(app, job.Request)
	if err != nil {
		return agentapi.ExecResult{Stderr: "vgpu-host: " + err.Error() + "\n", ExitCode: exitUsage}
	}
	if oc, f, ok := operationOf(cl, job.Request); ok {
		return r.runOperation(ctx, job, env, oc, f)
	}
	return r.runCommandLine(ctx, job, env)
}

// runCommandLine is how the commands without an operation yet still run in the agent (the
// shrinking exception of issue 28; TestCommandLineCommands lists them): on a fresh command
// tree whose output is captured, given the job's typed values as its canonical command line
// (every flag --NAME=VALUE, every operand after --). Before the command's action runs, the
// command the tree parsed and its class from the parsed typed values must be the job's: what
// runs is what was authorized.
func (r *cliRunner) runCommandLine(ctx context.Context, job agentapi.Job, env agentapi.RunEnv) agentapi.ExecResult {
	r.commandLines.Add(1)
	app := newApp(r.env)
	pruneUnnamed(app, strings.Fields(job.Op))
	var out, errw bytes.Buffer
	app.Writer, app.ErrWriter, app.Reader = &out, &errw, bytes.NewReader(nil)
	app.Metadata[runEnvKey] = &runEnv{root: r.root, uri: r.uri, conn: env.Conn, log: r.log, peer: env.Peer, keys: job.Request.KeyFiles}
	// Flags read no environment in the agent: the caller's values came typed in the request.
	useEnv(app, map[string]string{})
	fail := func(err error) agentapi.ExecResult {
		return agentapi.ExecResult{Stderr: "vgpu-host: " + err.Error() + "\n", ExitCode: exitUsage}
	}
	_, cl, err := prepareRequest(app, job.Request)
	if err != nil {
		return fail(err)
	}
	args, err := cl.argv(env.Paths)
	if err != nil {
		return fail(err)
	}
	leaf := cl.path[len(cl.path)-1]
	action := leaf.Action
	leaf.Action = func(ctx context.Context, cmd *cli.Command) error {
		if op := opName(cmd); op != job.Op || classOf(op, cmd.Bool, cmd.IsSet) != job.Class {
			return fmt.Errorf("internal error: the agent authorized %s as a %s and the command tree parsed %s as a %s: not run (a bug in vgpu-host, please report it)",
				job.Op, job.Class, op, classOf(op, cmd.Bool, cmd.IsSet))
		}
		return action(ctx, cmd)
	}
	ctx, cancel := withoutValues(ctx)
	defer cancel()
	code := executeCtx(ctx, app, append([]string{app.Name}, args...), &errw)
	return agentapi.ExecResult{Stdout: out.String(), Stderr: errw.String(), ExitCode: code}
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
		ReadKey:  (&runEnv{keys: keys}).readKey,
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

// agentRootOf is rootOf in the agent: the agent's root, and --host-root (or VGPU_HOST_ROOT
// in the caller's environment) must name that same directory.
func agentRootOf(cmd *cli.Command, rv *runEnv) (host.Root, error) {
	return agentRoot(cliFlags{cmd}, rv.root)
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

// agentConnURI is connURI in the agent: its own URI, and --connect may only repeat it.
func agentConnURI(cmd *cli.Command, rv *runEnv) (string, error) {
	return agentURI(cliFlags{cmd}, rv.uri)
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
		"host install-unit": {class: agentapi.RootMutation, absFlags: []string{"exec"}},
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
// request's, or the parsed command's when the agent checks what it is about to run). One
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

// typedFlag is one checked flag of a request: its canonical name and its value as the flag's
// own command-line text(s).
type typedFlag struct {
	name   string
	values []string
	b      bool // a boolean flag's value
	v      any  // the value, typed as the flag is: bool, int, string, time.Duration or []string
}

// commandLine is a checked request as the tree takes it.
type commandLine struct {
	path     []*cli.Command // root first
	flags    []typedFlag
	operands []string
	rule     agentRule
	// defs are the flags of the command and of the commands above it, by long name.
	defs map[string]cli.Flag
}

// argv is the canonical command line of a checked request: the command's path, each flag as
// --NAME=VALUE, then "--" and the operands (never read as flags). Files named by the request
// are replaced by the private copies in paths.
func (c commandLine) argv(paths map[string]string) ([]string, error) {
	var args []string
	for _, p := range c.path[1:] {
		args = append(args, p.Name)
	}
	sub := func(v string) (string, error) {
		p, ok := paths[v]
		if !ok {
			return "", fmt.Errorf("%s reads %s: send its content in the request's files (the agent opens no file a caller names)", opName(c.path[len(c.path)-1]), v)
		}
		return p, nil
	}
	for _, f := range c.flags {
		for _, v := range f.values {
			if slices.Contains(c.rule.fileFlags, f.name) {
				var err error
				if v, err = sub(v); err != nil {
					return nil, err
				}
			}
			args = append(args, "--"+f.name+"="+v)
		}
	}
	if len(c.operands) > 0 {
		ops := slices.Clone(c.operands)
		if c.rule.fileOperands != nil {
			for _, i := range c.rule.fileOperands(ops) {
				var err error
				if ops[i], err = sub(ops[i]); err != nil {
					return nil, err
				}
			}
		}
		args = append(append(args, "--"), ops...)
	}
	return args, nil
}

// prepareRequest checks a typed request against the command tree app: the command is one
// the agent runs, every flag is a flag of it (or of a command above it) named by its long
// name, with a value of the flag's type, and no value holds a NUL. From those typed values it
// decides the job's class (classOf) and which values name files. Nothing in a request is
// ever parsed as a command line: there is no text for a flag to hide in.
func prepareRequest(app *cli.Command, req agentapi.ExecRequest) (agentapi.Job, commandLine, error) {
	job := agentapi.Job{Request: req, Op: req.Command}
	var cl commandLine
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

// withoutValues returns a context with ctx's deadline and cancellation but none of its values.
// urfave/cli's Run makes a command it finds in its context the parent of the one it runs: a
// request's command tree run under the `agent` command's context (the drift watcher's
// releases, the boot reconcile) would take the agent's command as its root and lose the run
// environment, so it would act as a plain CLI on the real root.
func withoutValues(ctx context.Context) (context.Context, context.CancelFunc) {
	c, cancelDeadline := context.Background(), context.CancelFunc(func() {})
	if d, ok := ctx.Deadline(); ok {
		c, cancelDeadline = context.WithDeadline(c, d)
	}
	c, cancel := context.WithCancel(c)
	stop := context.AfterFunc(ctx, cancel)
	return c, func() { stop(); cancel(); cancelDeadline() }
}

// envOrLight is the runner's Env, or the light CLI's when it was given none.
func (r *cliRunner) envOrLight() *Env {
	if r.env == nil {
		return &Env{}
	}
	return r.env
}
