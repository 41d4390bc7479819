package clitree

import (
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
		Action: opAction("destroy"),
	}
}

// vmName returns the VM an argument names: a spec file's metadata.name, or the argument.
func vmName(arg string) (string, error) { return vmNameOf(cliFlags{}, arg) }

// vmNameOf is vmName with the spec files the agent's caller sent (src), read by the CLI.
func vmNameOf(src fileSource, arg string) (string, error) {
	if strings.HasSuffix(arg, ".yaml") || strings.HasSuffix(arg, ".yml") {
		if c, ok, sent := src.sentFile(arg); sent {
			if ok {
				vm, err := domains.LoadData(arg, []byte(c))
				if err != nil {
					return "", err
				}
				return vm.Metadata.Name, nil
			}
		} else if _, err := os.Stat(arg); err == nil {
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

// destroyRequest is destroy's request: the VMs named, each by its name or its spec file;
// every name is checked first, so that a malformed one is a usage error and nothing is
// destroyed.
func destroyRequest(f flagValues) (ops.DestroyRequest, error) {
	req := ops.DestroyRequest{Reset: f.Bool("reset")}
	if len(f.Operands()) == 0 {
		return req, usageErr("destroy needs at least one VM name or spec file")
	}
	src, _ := f.(fileSource)
	if src == nil {
		src = cliFlags{}
	}
	for _, a := range f.Operands() {
		name, err := vmNameOf(src, a)
		if err != nil {
			return req, err
		}
		req.Names = append(req.Names, name)
	}
	return req, nil
}

// renderDestroy prints one line per VM destroyed.
func renderDestroy(o opOutput, results []*lifecycle.DestroyResult) error {
	return o.emit(results, func(w io.Writer) error {
		for _, r := range results {
			fmt.Fprintf(w, "%s: destroyed (undid %d steps, released %d devices)\n", r.VM, len(r.Undone), len(r.Released))
		}
		return nil
	})
}
