package main

import "github.com/urfave/cli/v3"

// PLACEHOLDER: replaced by the issue that builds 'apply'.
func applyCommand() *cli.Command {
	return &cli.Command{Name: "apply", Usage: "(not built yet)", Action: notYet("apply")}
}
