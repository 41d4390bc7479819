// Command vgpu-host inspects, prepares and attaches GPUs on libvirt/KVM hosts.
//
// This package is CLI wiring only: flags, output formats and exit codes. The work happens in
// the host, vfio, mdev and domains packages.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"

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
	os.Exit(execute(newApp(), os.Args, os.Stderr))
}

// execute runs app and returns the exit code. Errors are printed once, here. A panic is a bug:
// it is recovered, reported in one line and exits 1 (never Go's 2, which means a usage error).
func execute(app *cli.Command, args []string, stderr io.Writer) (code int) {
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(stderr, "vgpu-host: internal error (a bug in vgpu-host %s, please report it with the command line; docs/security.md says how): %v at %s\n",
				version, r, panicSite())
			code = exitFailure
		}
	}()
	var notFound error
	setUsageHandlers(app, &notFound)
	err := app.Run(context.Background(), args)
	if err == nil {
		err = notFound
	}
	if err != nil {
		fmt.Fprintf(stderr, "vgpu-host: %v\n", err)
	}
	return exitCode(err)
}

// panicSite returns the function and line that panicked: the first frame below the runtime's.
func panicSite() string {
	pcs := make([]uintptr, 32)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(3, pcs)])
	for {
		f, more := frames.Next()
		if !strings.HasPrefix(f.Function, "runtime.") {
			return fmt.Sprintf("%s (%s:%d)", f.Function, filepath.Base(f.File), f.Line)
		}
		if !more {
			return "unknown"
		}
	}
}
