package main

import "github.com/urfave/cli/v3"

// PLACEHOLDER: replaced by the issue that builds 'host'.
func hostCommand() *cli.Command {
	return &cli.Command{Name: "host", Usage: "(not built yet)", Action: notYet("host")}
}
