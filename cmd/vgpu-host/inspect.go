package main

import "github.com/urfave/cli/v3"

// PLACEHOLDER: replaced by the issue that builds 'inspect'.
func inspectCommand() *cli.Command {
	return &cli.Command{Name: "inspect", Usage: "(not built yet)", Action: notYet("inspect")}
}
