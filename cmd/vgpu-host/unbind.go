package main

import "github.com/urfave/cli/v3"

// PLACEHOLDER: replaced by the issue that builds 'unbind'.
func unbindCommand() *cli.Command {
	return &cli.Command{Name: "unbind", Usage: "(not built yet)", Action: notYet("unbind")}
}
