package main

import "github.com/urfave/cli/v3"

// PLACEHOLDER: replaced by the issue that builds 'vf'.
func vfCommand() *cli.Command {
	return &cli.Command{Name: "vf", Usage: "(not built yet)", Action: notYet("vf")}
}
