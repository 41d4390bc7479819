package main

import "github.com/urfave/cli/v3"

// PLACEHOLDER: replaced by the issue that builds 'mdev'.
func mdevCommand() *cli.Command {
	return &cli.Command{Name: "mdev", Usage: "(not built yet)", Action: notYet("mdev")}
}
