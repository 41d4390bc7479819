package clitree

import "github.com/urfave/cli/v3"

// cliFlags is a parsed command line as flagValues: what a command's request builder reads in
// the CLI. Its flag methods are the command's own (urfave/cli looks a name up through the
// command's ancestors, so global flags read as they always have).
type cliFlags struct{ *cli.Command }

// Operands are the command's operands.
func (f cliFlags) Operands() []string { return f.Args().Slice() }
