package main

import "github.com/urfave/cli/v3"

// PLACEHOLDER: replaced by the issue that builds 'render'.
func renderCommand() *cli.Command {
	return &cli.Command{Name: "render", Usage: "(not built yet)", Action: notYet("render")}
}
