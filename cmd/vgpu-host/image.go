package main

import "github.com/urfave/cli/v3"

// PLACEHOLDER: replaced by the issue that builds 'image'.
func imageCommand() *cli.Command {
	return &cli.Command{Name: "image", Usage: "(not built yet)", Action: notYet("image")}
}
