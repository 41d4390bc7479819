package main

import "time"

// flagValues is what a command's typed request is built from: urfave/cli's parsed command in the CLI
// (cliFlags), an agent request's typed values in the agent (execFlags). Unset flags give their default.
type flagValues interface {
	Bool(name string) bool
	String(name string) string
	Int(name string) int
	Duration(name string) time.Duration
	StringSlice(name string) []string
	IsSet(name string) bool
	// Operands are the command's operands.
	Operands() []string
}
