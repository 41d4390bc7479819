package main

import "github.com/urfave/cli/v3"

// PLACEHOLDER: replaced by the issue that builds 'destroy'.
func destroyCommand() *cli.Command {
	return &cli.Command{Name: "destroy", Usage: "(not built yet)", Action: notYet("destroy")}
}
