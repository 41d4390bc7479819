package main

import "github.com/urfave/cli/v3"

// PLACEHOLDER: replaced by the issue that builds 'verify'.
func verifyCommand() *cli.Command {
	return &cli.Command{Name: "verify", Usage: "(not built yet)", Action: notYet("verify")}
}
