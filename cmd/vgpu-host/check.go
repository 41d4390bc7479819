package main

import "github.com/urfave/cli/v3"

// PLACEHOLDER: replaced by the issue that builds 'check'.
func checkCommand() *cli.Command {
	return &cli.Command{Name: "check", Usage: "(not built yet)", Action: notYet("check")}
}
