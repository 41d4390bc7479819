// Package clitree is vgpu-host's command tree: what cmd/vgpu-host and cmd/vgpu-host-agent run
// (Main) with what their builds add.
//
// This package is CLI wiring only: flags, output formats and exit codes. The work happens in
// the host, vfio, mdev and domains packages.
package clitree

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/internal/buildinfo"
	"github.com/vgpu-host/vgpu-host/internal/termsafe"
)

// topCommand is a top-level command: the name it is run by and its constructor.
type topCommand struct {
	name  string
	build func() *cli.Command
}

// topCommands are the top-level commands, in the order help lists them (TestTopCommandNames
// checks each name against what its constructor builds). A function, not a variable: man's
// constructor builds the tree.
func topCommands() []topCommand {
	return []topCommand{
		{"inspect", inspectCommand},
		{"check", checkCommand},
		{"bind", bindCommand},
		{"unbind", unbindCommand},
		{"vf", vfCommand},
		{"mdev", mdevCommand},
		{"mig", migCommand},
		{"host", hostCommand},
		{"render", renderCommand},
		{"plan", planCommand},
		{"apply", applyCommand},
		{"destroy", destroyCommand},
		{"migrate", migrateCommand},
		{"migrate-target", migrateTargetCommand},
		{"attach", attachCommand},
		{"detach", detachCommand},
		{"status", statusCommand},
		{"verify", verifyCommand},
		{"image", imageCommand},
		{"kubevirt", kubevirtCommand},
		{"device-plugin", devicePluginCommand},
		{"dra-plugin", draPluginCommand},
		{"version", versionCommand},
		{"__man", manCommand},
		{"agent", agentCommand},
	}
}

// newApp returns the whole command tree with env (tests, man pages, the agent's runs).
func newApp(env *Env) *cli.Command {
	return newAppOf(env, func(string) bool { return true })
}

// newAppFor returns the command tree main runs args with: built whole when args may print the
// root's help, complete or suggest a command (all need every command's name and usage), else
// with only the commands named in args built, the others left a bare name. A command can run
// only if its name is in args, so the one that runs is always whole; building the other
// twenty cost every start about 5% of its CPU (#19). pruneUnnamed then cuts the tree as before.
func newAppFor(env *Env, args []string) *cli.Command {
	named := make(map[string]bool, len(args))
	for _, a := range args {
		named[a] = true
	}
	whole := named["help"] || named["h"] || named["--help"] || named["-h"] || named["completion"] || named["--generate-shell-completion"]
	runs := named["--version"] || named["-v"]
	for _, c := range topCommands() {
		runs = runs || named[c.name]
	}
	// No command named: the root runs, whose action is its help, or an unknown command gets
	// its did-you-mean.
	whole = whole || !runs
	app := newAppOf(env, func(name string) bool { return whole || named[name] })
	pruneUnnamed(app, args)
	return app
}

// printVersion is the cli's --version: buildinfo's line (main answers a bare --version itself:
// onlyVersion). Set where the tree is built, not in an init: main's package initialiser would
// run at every start.
func printVersion(cmd *cli.Command) {
	fmt.Fprintln(cmd.Root().Writer, buildinfo.Get().Line(cmd.Root().Name))
}

// setVersionPrinter sets the cli's printer once: the agent builds trees concurrently.
var setVersionPrinter sync.Once

// newAppOf builds the root, with env, and the top-level commands build says to build; the
// others are a bare name, which pruneUnnamed would cut them down to anyway but for their usage.
func newAppOf(env *Env, build func(name string) bool) *cli.Command {
	setVersionPrinter.Do(func() { cli.VersionPrinter = printVersion })
	top := topCommands()
	cmds := make([]*cli.Command, len(top))
	for i, c := range top {
		if build(c.name) {
			cmds[i] = c.build()
		} else {
			cmds[i] = &cli.Command{Name: c.name, HideHelp: true}
		}
	}
	app := &cli.Command{
		Name:    appName,
		Usage:   "inspect, prepare and attach GPUs on libvirt/KVM hosts",
		Version: buildinfo.Version(),
		Flags:   globalFlags(),
		// `vgpu-host completion bash|zsh|fish` prints a script that asks the binary itself
		// (--generate-shell-completion), so completions follow the command tree.
		EnableShellCompletion: true,
		Commands:              cmds,
		// Errors are printed once, by main, with the exit code exitCode chooses.
		ExitErrHandler: func(context.Context, *cli.Command, error) {},
	}
	setEnv(app, env)
	wireAgent(app)
	return app
}

// Main runs the command line argv (os.Args: the program's name first) with what env adds, and
// returns the exit code.
func Main(env Env, argv []string) int {
	args := argv[1:]
	if onlyVersion(args) {
		// The line the cli's --version prints (TestOnlyVersionSameAsCLI), without building
		// the tree and running the cli: bench/start.sh measured 1.72-1.74x a bare Go binary's
		// CPU time before, 1.51-1.53 after (#19).
		os.Stdout.WriteString(buildinfo.Get().Line(appName) + "\n")
		return 0
	}
	if onlyRootHelp(args) {
		// The root's help as the cli renders it, kept in roothelp.txt (TestRootHelpFile):
		// rendering it built all twenty commands and ran the cli (#19).
		os.Stdout.WriteString(rootHelp())
		return 0
	}
	stackSink = growStack(len(args))
	app := newAppFor(&env, args)
	return execute(app, argv, os.Stderr)
}

// stackSink keeps growStack's result, so that its frame is not optimised away.
//
//lint:ignore U1000 written, never read: the write is what keeps growStack's frame
var stackSink byte

// growStack grows the goroutine's stack in one step to what a command's call chain needs (the
// cli's tree, the typed operation, encoding/json's reflection): a new goroutine starts with
// 2 KiB, and grown through 4, 8, 16 and 32 KiB each size took its first stack from a span of
// its own, each page touched once (a page fault each, which is what a start costs on the
// project's machines: README, Start-up). One 24 KiB frame, once, before the tree is built:
// median minor faults of 15 runs, inspect -o json on the small generated host 471 → 444,
// a usage error (mdev create) 387 → 377; --version and --help return before it (#32).
//
//go:noinline
func growStack(n int) byte {
	var frame [24 << 10]byte
	frame[n%len(frame)] = 1
	return frame[(n+1)%len(frame)]
}

// appName is the root command's name.
const appName = "vgpu-host"

// onlyVersion reports whether args are `--version` or `-v` and nothing else: scripts ask for
// the version often, and the answer needs no command tree.
func onlyVersion(args []string) bool {
	return len(args) == 1 && (args[0] == "--version" || args[0] == "-v")
}

// rootHelpFile is the root's help (`vgpu-host --help`), as the cli renders it from the whole
// tree, with versionMark where the version goes. TestRootHelpFile fails when the tree's help
// changes and it was not brought along: go test ./cmd/vgpu-host -run TestRootHelpFile
// -update-root-help rewrites it.
//
//go:embed roothelp.txt
var rootHelpFile string

// versionMark stands for the version in rootHelpFile.
const versionMark = "@VERSION@"

// rootHelp is the root's help for this build.
func rootHelp() string {
	return strings.Replace(rootHelpFile, versionMark, buildinfo.Version(), 1)
}

// onlyRootHelp reports whether args ask for the root's help and nothing else: none, --help,
// -h or help (all four print it and exit 0, whatever the environment).
func onlyRootHelp(args []string) bool {
	if len(args) == 0 {
		return true
	}
	return len(args) == 1 && (args[0] == "--help" || args[0] == "-h" || args[0] == "help")
}

// execute runs app and returns the exit code. Errors are printed once, here. A panic is a bug:
// it is recovered, reported in one line and exits 1 (never Go's 2, which means a usage error).
func execute(app *cli.Command, args []string, stderr io.Writer) (code int) {
	ctx := context.Background()
	defer func() {
		if r := recover(); r != nil {
			io.WriteString(stderr, internalErrorLine(r, panicSite()))
			code = exitFailure
		}
	}()
	var notFound error
	setUsageHandlers(app, &notFound)
	if app.EnableShellCompletion {
		// The completion command is made by the cli as it sets up: a mistyped shell gets the
		// same one line as a mistyped command (the cli said "No help topic for 'X'").
		app.ConfigureShellCompletionCommand = func(c *cli.Command) { setUsageHandlers(c, &notFound) }
	}
	err := app.Run(ctx, args)
	if err == nil {
		err = notFound
	}
	var forwarded agentExit
	if err != nil && !errors.As(err, &forwarded) {
		fmt.Fprintf(stderr, "vgpu-host: %s\n", termsafe.String(err.Error())) // errors quote names read from the host
	}
	return exitCode(err)
}

// panicSite returns the function and line that panicked: the first frame below the runtime's.
func panicSite() string {
	pcs := make([]uintptr, 32)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(3, pcs)])
	for {
		f, more := frames.Next()
		if !strings.HasPrefix(f.Function, "runtime.") {
			return fmt.Sprintf("%s (%s:%d)", f.Function, filepath.Base(f.File), f.Line)
		}
		if !more {
			return "unknown"
		}
	}
}

// pruneUnnamed cuts every top-level command whose name or alias is not among args down to its
// name, aliases and usage: all that root help, root completion and "no such command" read,
// and sets up shell completion only for a command line that uses it. Below a command that is
// named, it cuts that command's unnamed subcommands the same way, level by level: what the
// named command's own help and "no such command" read of them (`mdev create` sets up one
// of mdev's seven subcommands in full, not seven: 1,469 allocations instead of 1,746, #32).
// The cli walks the whole tree before it runs anything (setting up help for each
// subcommand), and that walk, not main's work, was most of what `vgpu-host --help` cost over
// a bare Go binary. A command can run only if its name is on the command line, so the one that
// runs is always whole.
func pruneUnnamed(app *cli.Command, args []string) {
	named := make(map[string]bool, len(args))
	for _, a := range args {
		named[a] = true
	}
	var prune func(cmds []*cli.Command)
	prune = func(cmds []*cli.Command) {
		for _, c := range cmds {
			keep := named[c.Name]
			for _, a := range c.Aliases {
				keep = keep || named[a]
			}
			if !keep {
				// HideHelp: no help flag and help subcommand set up for a command that will not run.
				c.Commands, c.Flags, c.Description, c.HideHelp = nil, nil, "", true
			} else {
				prune(c.Commands)
			}
		}
	}
	prune(app.Commands)
	// The completion command (and its four shells) is set up only when asked for.
	app.EnableShellCompletion = named["completion"] || named["--generate-shell-completion"]
}
