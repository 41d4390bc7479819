package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/agent/agentapi"
	"github.com/vgpu-host/vgpu-host/host"
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
}

const runEnvKey = "vgpu-host-agent-run"

// runEnvOf returns the agent's environment of this run, or nil outside the agent.
func runEnvOf(cmd *cli.Command) *runEnv {
	rv, _ := cmd.Root().Metadata[runEnvKey].(*runEnv)
	return rv
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
	open := func(uri string) (virt.Conn, error) {
		if cmd.Name == "apply" {
			return openConn(uri, remote.OpenOptions{})
		}
		return opened(openConn(uri, remote.OpenOptions{}))
	}
	rv := runEnvOf(cmd)
	if rv == nil {
		return open(uri)
	}
	if cmd.IsSet("connect") && cmd.String("connect") != rv.uri {
		return nil, usageErr("--connect %s: this agent uses %s; run the command with --agent never to use another libvirt", cmd.String("connect"), rv.uri)
	}
	if rv.conn == nil {
		return open(rv.uri)
	}
	c, err := rv.conn()
	if err != nil {
		return nil, err
	}
	return borrowedConn{c}, nil
}

// hostIOFor is hostIO for the invocation; in the agent every sysfs write is also logged
// with its device, path, old and new value, and the caller.
func hostIOFor(cmd *cli.Command, root host.Root) (host.Writer, host.ModuleLoader) {
	w, m := hostIO(root)
	if rv := runEnvOf(cmd); rv != nil && rv.log != nil {
		l := rv.log.With("op", cmd.FullName(), "uid", rv.peer.UID, "pid", rv.peer.PID)
		w = host.LogWriter{W: w, Log: func(c host.Change) {
			attrs := []any{"device", c.Device, "path", c.Path, "old", c.Old, "new", c.New}
			if c.Err != nil {
				l.Warn("host change failed", append(attrs, "err", c.Err)...)
				return
			}
			l.Info("host change", attrs...)
		}}
	}
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

// cliRunner is the agent's Runner: the command tree, in-process.
type cliRunner struct {
	root host.Root
	uri  string
	log  *slog.Logger
}

// Prepare classifies a command line (see agentRules).
func (r *cliRunner) Prepare(args []string, env map[string]string) (agentapi.Job, error) {
	return prepareJob(args)
}

// Run runs the job on a fresh command tree whose output is captured.
func (r *cliRunner) Run(ctx context.Context, job agentapi.Job, env agentapi.RunEnv) agentapi.ExecResult {
	app := newApp()
	pruneUnnamed(app, job.Args)
	var out, errw bytes.Buffer
	app.Writer, app.ErrWriter, app.Reader = &out, &errw, bytes.NewReader(env.Stdin)
	app.Metadata = map[string]any{runEnvKey: &runEnv{root: r.root, uri: r.uri, conn: env.Conn, log: r.log, peer: env.Peer}}
	e := env.Env
	if e == nil {
		e = map[string]string{}
	}
	useEnv(app, e)
	ctx, cancel := withoutValues(ctx)
	defer cancel()
	code := executeCtx(ctx, app, append([]string{app.Name}, job.Args...), &errw)
	return agentapi.ExecResult{Stdout: out.String(), Stderr: errw.String(), ExitCode: code}
}

// agentRootOf is rootOf in the agent: the agent's root, and --host-root (or VGPU_HOST_ROOT
// in the caller's environment) must name that same directory.
func agentRootOf(cmd *cli.Command, rv *runEnv) (host.Root, error) {
	if cmd.IsSet("host-root") {
		v := cmd.String("host-root")
		if !filepath.IsAbs(v) || filepath.Clean(v) != rv.root.Dir() {
			return host.Root{}, usageErr("--host-root %s: this agent serves %s; give its absolute path, talk to that root's agent (--agent-socket), or run with --agent never", v, rv.root.Dir())
		}
	}
	return rv.root, nil
}

// agentConnURI is connURI in the agent: its own URI, and --connect may only repeat it.
func agentConnURI(cmd *cli.Command, rv *runEnv) (string, error) {
	if cmd.IsSet("connect") && cmd.String("connect") != rv.uri {
		return "", usageErr("--connect %s: this agent uses %s; run the command with --agent never to use another libvirt", cmd.String("connect"), rv.uri)
	}
	return rv.uri, nil
}

// parsedArgs is a command line looked at without running it.
type parsedArgs struct {
	path       []*cli.Command // root first
	positional []int          // indexes of operands
	flags      map[string]valueRef
	help       bool // -h, --help, help, --version: always answered in-process
	unknown    bool // a flag the tree does not know: the run reports it
}

// valueRef is where a flag's value is: args[index] is prefix+value.
type valueRef struct {
	index  int
	prefix string
	set    bool // a bool flag given (no value)
}

// name is the command's full name below the root ("mdev create").
func (p parsedArgs) name() string {
	var n []string
	for _, c := range p.path[1:] {
		n = append(n, c.Name)
	}
	return strings.Join(n, " ")
}

func (p parsedArgs) value(args []string, flag string) (string, bool) {
	v, ok := p.flags[flag]
	if !ok {
		return "", false
	}
	if v.set {
		return "true", true
	}
	return strings.TrimPrefix(args[v.index], v.prefix), true
}

// parseArgv walks a command line as the command tree would parse it: subcommands, flags
// (of the command and its parents) with or without a value, operands.
func parseArgv(app *cli.Command, args []string) parsedArgs {
	p := parsedArgs{path: []*cli.Command{app}, flags: map[string]valueRef{}}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			for j := i + 1; j < len(args); j++ {
				p.positional = append(p.positional, j)
			}
			break
		}
		if strings.HasPrefix(a, "-") && a != "-" {
			name, _, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
			if name == "h" || name == "help" || (len(p.path) == 1 && (name == "v" || name == "version")) {
				p.help = true
				continue
			}
			f := lookupFlag(p.path, name)
			if f == nil {
				p.unknown = true
				continue
			}
			canon := f.Names()[0]
			_, isBool := f.(*cli.BoolFlag)
			switch {
			case hasVal:
				p.flags[canon] = valueRef{index: i, prefix: a[:strings.Index(a, "=")+1]}
			case isBool:
				p.flags[canon] = valueRef{index: i, set: true}
			case i+1 < len(args):
				p.flags[canon] = valueRef{index: i + 1}
				i++
			}
			continue
		}
		cur := p.path[len(p.path)-1]
		if len(p.positional) == 0 {
			if a == "help" && len(cur.Commands) > 0 {
				p.help = true
				continue
			}
			if sub := cur.Command(a); sub != nil {
				p.path = append(p.path, sub)
				continue
			}
		}
		p.positional = append(p.positional, i)
	}
	return p
}

// lookupFlag finds a flag by name on the command or its parents.
func lookupFlag(path []*cli.Command, name string) cli.Flag {
	for i := len(path) - 1; i >= 0; i-- {
		for _, f := range path[i].Flags {
			if slices.Contains(f.Names(), name) {
				return f
			}
		}
	}
	return nil
}

// agentRule says how a command runs in the agent.
type agentRule struct {
	class agentapi.Class
	// files lists the arguments naming files the command reads (the CLI sends their content).
	files func(p parsedArgs, args []string) []agentapi.FileRef
	// absFlags are flags naming paths the command writes or runs: the CLI makes them
	// absolute, as the agent does not share its working directory.
	absFlags []string
}

// operandFiles: every operand is a file (SPEC...).
func operandFiles(p parsedArgs, args []string) []agentapi.FileRef {
	var out []agentapi.FileRef
	for _, i := range p.positional {
		out = append(out, agentapi.FileRef{Index: i})
	}
	return out
}

// specOperands: operands that destroy reads as spec files (vmName's rule: a .yaml/.yml name).
func specOperands(p parsedArgs, args []string) []agentapi.FileRef {
	var out []agentapi.FileRef
	for _, i := range p.positional {
		if strings.HasSuffix(args[i], ".yaml") || strings.HasSuffix(args[i], ".yml") {
			out = append(out, agentapi.FileRef{Index: i})
		}
	}
	return out
}

// configFile: --config FILE of the Kubernetes commands.
func configFile(p parsedArgs, args []string) []agentapi.FileRef {
	if v, ok := p.flags["config"]; ok && !v.set {
		return []agentapi.FileRef{{Index: v.index, Prefix: v.prefix}}
	}
	return nil
}

func both(a, b func(parsedArgs, []string) []agentapi.FileRef) func(parsedArgs, []string) []agentapi.FileRef {
	return func(p parsedArgs, args []string) []agentapi.FileRef { return append(a(p, args), b(p, args)...) }
}

// agentRules lists every command the agent runs, how, and which arguments are files. A
// command not listed (agent, completion, the man page writer, device-plugin, dra-plugin)
// never runs in the agent; the CLI runs it itself.
var agentRules = map[string]agentRule{
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
	"render":            {class: agentapi.Read, files: operandFiles},
	"plan":              {class: agentapi.Read, files: operandFiles},
	"apply":             {class: agentapi.Mutation, files: operandFiles},
	"destroy":           {class: agentapi.Mutation, files: specOperands},
	"status":            {class: agentapi.Read},
	"verify":            {class: agentapi.Read},
	"image export":      {class: agentapi.RootMutation, absFlags: []string{"to"}},
	"kubevirt config":   {class: agentapi.Read, files: configFile},
	"kubevirt vm":       {class: agentapi.Read, files: both(operandFiles, configFile)},
	"kubevirt labels":   {class: agentapi.Read, files: configFile},
	"mig show":          {class: agentapi.Read},
	"mig plan":          {class: agentapi.Read},
	"mig apply":         {class: agentapi.Mutation},
	"host layout plan":  {class: agentapi.Read, files: operandFiles},
	"host layout apply": {class: agentapi.Mutation, files: operandFiles},
	"host layout show":  {class: agentapi.Read},
}

// prepareJob looks at a command line for the agent: its rule, class and file arguments. Help
// and an unknown command are reads (running them prints what the CLI would); a command line
// with a flag this parser does not know is a change (the run then prints the usage error).
func prepareJob(args []string) (agentapi.Job, error) {
	app := newApp()
	pruneUnnamed(app, args)
	return jobOf(parseArgv(app, args), args)
}

// jobOf is prepareJob of a parsed command line.
func jobOf(p parsedArgs, args []string) (agentapi.Job, error) {
	job := agentapi.Job{Args: slices.Clone(args), Op: p.name(), Class: agentapi.Read}
	if job.Op == "" {
		job.Op = "vgpu-host"
	}
	if len(p.path) == 1 && len(p.positional) > 0 && args[p.positional[0]] == "completion" {
		return job, fmt.Errorf("completion cannot run through the agent: run it with --agent never")
	}
	rule, ok := agentRules[p.name()]
	if p.help || len(p.path) == 1 || (!ok && len(p.path[len(p.path)-1].Commands) > 0) {
		return job, nil // help, unknown commands and command groups print the same as in the CLI
	}
	if p.unknown {
		// A flag this parser does not know: the run reports it as a usage error. Were the
		// tree to accept it after all, the command must not have run as a read.
		job.Class = agentapi.Mutation
		return job, nil
	}
	if !ok {
		return job, fmt.Errorf("%s cannot run through the agent: run it with --agent never", p.name())
	}
	job.Class = rule.class
	if v, _ := p.value(args, "dry-run"); v == "true" {
		job.Class = agentapi.Read
	}
	if v, _ := p.value(args, "write"); p.name() == "kubevirt labels" && v == "true" {
		job.Class = agentapi.Mutation
	}
	if rule.files != nil {
		job.Files = rule.files(p, args)
	}
	return job, nil
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
