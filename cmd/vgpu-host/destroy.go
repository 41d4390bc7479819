package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/domains"
	"github.com/vgpu-host/vgpu-host/lifecycle"
)

func destroyCommand() *cli.Command {
	return &cli.Command{
		Name:      "destroy",
		Usage:     "stop and undefine VMs, delete the volumes and seed apply created and release their devices",
		ArgsUsage: "NAME|SPEC...",
		Description: "Undoes, newest first, every step apply journalled for the VM: only what vgpu-host created.\n" +
			"Also finishes an interrupted apply or destroy. Exit codes: 0 destroyed, 1 failed, 6 not in the ledger.",
		Flags:  []cli.Flag{connectFlag()},
		Action: runDestroy,
	}
}

// vmName returns the VM an argument names: a spec file's metadata.name, or the argument.
func vmName(arg string) (string, error) {
	if strings.HasSuffix(arg, ".yaml") || strings.HasSuffix(arg, ".yml") {
		if _, err := os.Stat(arg); err == nil {
			vm, err := domains.Load(arg)
			if err != nil {
				return "", err
			}
			return vm.Metadata.Name, nil
		}
	}
	return arg, nil
}

func runDestroy(ctx context.Context, cmd *cli.Command) error {
	if cmd.Args().Len() == 0 {
		return usageErr("destroy needs at least one VM name or spec file")
	}
	lc, conn, err := lifecycleOf(cmd)
	if err != nil {
		return err
	}
	defer conn.Close()
	// A record for each VM destroyed; one that failed has none (its error goes to stderr and
	// decides the exit code), so a failed destroy is never reported as done.
	results := []*lifecycle.DestroyResult{}
	var firstErr error
	for _, a := range cmd.Args().Slice() {
		name, err := vmName(a)
		if err == nil {
			var r *lifecycle.DestroyResult
			if r, err = lc.Destroy(ctx, name); err == nil {
				results = append(results, r)
			}
		}
		if err != nil && firstErr == nil {
			firstErr = err
		}
	}
	if len(results) == 0 && firstErr != nil {
		return firstErr // nothing was destroyed: nothing on stdout
	}
	if err := emit(cmd, results, func(w io.Writer) error {
		for _, r := range results {
			fmt.Fprintf(w, "%s: destroyed (undid %d steps, released %d devices)\n", r.VM, len(r.Undone), len(r.Released))
		}
		return nil
	}); err != nil {
		return err
	}
	return firstErr
}
