// Command vgpu-host inspects, prepares and attaches GPUs on libvirt/KVM hosts.
//
// This package is CLI wiring only: flags, output formats and exit codes. The work happens in
// the host, vfio, mdev and domains packages.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/urfave/cli/v3"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func newApp() *cli.Command {
	return &cli.Command{
		Name:    "vgpu-host",
		Usage:   "inspect, prepare and attach GPUs on libvirt/KVM hosts",
		Version: version,
		Flags:   globalFlags(),
		Commands: []*cli.Command{
			inspectCommand(),
			checkCommand(),
			bindCommand(),
			unbindCommand(),
			vfCommand(),
			mdevCommand(),
			hostCommand(),
			renderCommand(),
			planCommand(),
			applyCommand(),
			destroyCommand(),
			statusCommand(),
			verifyCommand(),
			imageCommand(),
			kubevirtCommand(),
			devicePluginCommand(),
			draPluginCommand(),
		},
		// Errors are printed once, by main, with the exit code exitCode chooses.
		ExitErrHandler: func(context.Context, *cli.Command, error) {},
	}
}

func main() {
	err := newApp().Run(context.Background(), os.Args)
	if err != nil {
		fmt.Fprintf(os.Stderr, "vgpu-host: %v\n", err)
	}
	os.Exit(exitCode(err))
}
