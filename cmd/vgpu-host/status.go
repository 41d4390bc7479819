package main

import "github.com/urfave/cli/v3"

// PLACEHOLDER: replaced by the issue that builds 'status'.
func statusCommand() *cli.Command {
	return &cli.Command{Name: "status", Usage: "(not built yet)", Action: notYet("status")}
}
