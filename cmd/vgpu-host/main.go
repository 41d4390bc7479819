// Command vgpu-host inspects, prepares and attaches GPUs on libvirt/KVM hosts.
//
// This package is CLI wiring only: flags, output formats and exit codes. The work happens in
// the host, vfio, mdev and domains packages.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/internal/buildinfo"
)

// newApp returns the whole command tree. Building it is cheap (literals); what costs at start
// is the cli walking every subcommand, which main avoids with pruneUnnamed.
func newApp() *cli.Command {
	return &cli.Command{
		Name:    "vgpu-host",
		Usage:   "inspect, prepare and attach GPUs on libvirt/KVM hosts",
		Version: buildinfo.Version(),
		Flags:   globalFlags(),
		// `vgpu-host completion bash|zsh|fish` prints a script that asks the binary itself
		// (--generate-shell-completion), so completions follow the command tree.
		EnableShellCompletion: true,
		Commands: []*cli.Command{
			inspectCommand(),
			checkCommand(),
			bindCommand(),
			unbindCommand(),
			vfCommand(),
			mdevCommand(),
			hostCommand(),
			renderCommand(),
			planCommand(),
			applyCommand(),
			destroyCommand(),
			statusCommand(),
			verifyCommand(),
			imageCommand(),
			versionCommand(),
			manCommand(),
		},
		// Errors are printed once, by main, with the exit code exitCode chooses.
		ExitErrHandler: func(context.Context, *cli.Command, error) {},
	}
}

func main() {
	cli.VersionPrinter = func(cmd *cli.Command) {
		fmt.Fprintln(cmd.Root().Writer, buildinfo.Get().Line(cmd.Root().Name))
	}
	app := newApp()
	pruneUnnamed(app, os.Args[1:])
	err := app.Run(context.Background(), os.Args)
	if err != nil {
		fmt.Fprintf(os.Stderr, "vgpu-host: %v\n", err)
	}
	os.Exit(exitCode(err))
}

// pruneUnnamed cuts every top-level command whose name or alias is not among args down to its
// name, aliases and usage: all that root help, root completion and "no such command" read,
// and sets up shell completion only for a command line that uses it.
// The cli walks the whole tree before it runs anything (setting up help for each
// subcommand), and that walk, not main's work, was most of what `vgpu-host --help` cost over
// a bare Go binary. A command can run only if its name is on the command line, so the one that
// runs is always whole.
func pruneUnnamed(app *cli.Command, args []string) {
	named := make(map[string]bool, len(args))
	for _, a := range args {
		named[a] = true
	}
	for _, c := range app.Commands {
		keep := named[c.Name]
		for _, a := range c.Aliases {
			keep = keep || named[a]
		}
		if !keep {
			// HideHelp: no help flag and help subcommand set up for a command that will not run.
			c.Commands, c.Flags, c.Description, c.HideHelp = nil, nil, "", true
		}
	}
	// The completion command (and its four shells) is set up only when asked for.
	app.EnableShellCompletion = named["completion"] || named["--generate-shell-completion"]
}
