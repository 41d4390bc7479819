package main

import "github.com/urfave/cli/v3"

// PLACEHOLDER: replaced by the issue that builds 'plan'.
func planCommand() *cli.Command {
	return &cli.Command{Name: "plan", Usage: "(not built yet)", Action: notYet("plan")}
}
