package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/lifecycle"
)

func imageCommand() *cli.Command {
	return &cli.Command{
		Name:  "image",
		Usage: "cloud-image pipeline: export a builder VM's disk as a standalone image",
		Commands: []*cli.Command{{
			Name:      "export",
			Usage:     "flatten a shut-off VM's overlay (and its base image) into a standalone qcow2",
			ArgsUsage: "NAME",
			Flags: []cli.Flag{
				connectFlag(),
				// --output names the image file here (as in the pipeline); the result line is
				// always plain text.
				&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Required: true, Usage: "write the image to `FILE.qcow2`"},
				&cli.BoolFlag{Name: "force", Usage: "overwrite FILE if it exists"},
			},
			Action: runImageExport,
		}},
	}
}

func runImageExport(ctx context.Context, cmd *cli.Command) error {
	if cmd.Args().Len() != 1 {
		return usageErr("image export needs one VM name")
	}
	name, dst := cmd.Args().First(), cmd.String("output")
	if _, err := os.Lstat(dst); err == nil && !cmd.Bool("force") {
		return fmt.Errorf("image export %s: %s exists: %w (pass --force to overwrite it, or choose another --output)", name, dst, host.ErrRefused)
	}
	root, err := rootOf(cmd)
	if err != nil {
		return err
	}
	conn, err := openConnFor(cmd, cmd.String("connect"))
	if err != nil {
		return err
	}
	defer conn.Close()
	lc := lifecycle.New(lifecycle.Options{Root: root, Conn: conn})
	var progress io.Writer
	if stderrIsTerminal(cmd) {
		progress = cmd.Root().ErrWriter
	}
	src, err := lc.Export(ctx, name, dst, progress)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(cmd.Root().Writer, "%s: exported %s to %s\n", name, src, dst)
	return err
}
