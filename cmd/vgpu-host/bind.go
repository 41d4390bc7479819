package main

import "github.com/urfave/cli/v3"

// PLACEHOLDER: replaced by the issue that builds 'bind'.
func bindCommand() *cli.Command {
	return &cli.Command{Name: "bind", Usage: "(not built yet)", Action: notYet("bind")}
}
