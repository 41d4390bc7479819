package clitree

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/domains"
	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/lifecycle"
	"github.com/vgpu-host/vgpu-host/ops"
)

func destroyCommand() *cli.Command {
	return &cli.Command{
		Name:      "destroy",
		Usage:     "stop and undefine VMs, delete the volumes and seed apply created and release their devices",
		ArgsUsage: "NAME|SPEC...",
		Description: "Undoes, newest first, every step apply journalled for the VM: only what vgpu-host created.\n" +
			"Also finishes an interrupted apply or destroy. Exit codes: 0 destroyed, 1 failed, 6 not in the ledger.",
		Flags:  []cli.Flag{connectFlag(), resetFlag()},
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
	// A VM name is a file name in the ledger and a domain name: "../../etc" is a malformed
	// name (exit 2), not a VM that does not exist (exit 6).
	if err := host.CheckComponent("VM name", arg); err != nil {
		return "", err
	}
	return arg, nil
}

func runDestroy(ctx context.Context, cmd *cli.Command) error {
	if cmd.Args().Len() == 0 {
		return usageErr("destroy needs at least one VM name or spec file")
	}
	// Every name first: a malformed one is a usage error and nothing is destroyed.
	var names []string
	for _, a := range cmd.Args().Slice() {
		name, err := vmName(a)
		if err != nil {
			return err
		}
		names = append(names, name)
	}
	root, err := rootOf(cmd)
	if err != nil {
		return err
	}
	if _, err := outputOf(cmd); err != nil {
		return err
	}
	uri, err := connURI(cmd, root)
	if err != nil {
		return err
	}
	results, err := ops.Destroy(ctx, opsEnv(cmd, root, uri), ops.DestroyRequest{Names: names, Reset: cmd.Bool("reset")})
	if results == nil {
		return err
	}
	firstErr := err
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

// releasedBy are the PCI functions a destroy gave back (ops.ReleasedBy).
func releasedBy(r *lifecycle.DestroyResult) []host.Released { return ops.ReleasedBy(r) }
