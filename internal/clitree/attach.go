package clitree

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/lifecycle"
	"github.com/vgpu-host/vgpu-host/ops"
	"github.com/vgpu-host/vgpu-host/step"
)

func attachCommand() *cli.Command {
	return &cli.Command{
		Name:      "attach",
		Usage:     "hotplug a GPU, a vGPU or a virtio-gpu into a VM apply made, running or stopped (docs/hotplug.md)",
		ArgsUsage: "VM",
		Description: "Gives the VM one more device, as apply would have: --gpu ADDR passes a GPU through with its\n" +
			"companions (its IOMMU group bound to vfio-pci), --profile NAME creates a vGPU instance of that\n" +
			"type, --virtio adds a virtio-gpu. The device is resolved, checked (every safety check of apply;\n" +
			"--force=CHECK goes past one) and claimed in the ledger, the host prepared, then libvirt attaches\n" +
			"it to the running guest and its definition (the definition only when the VM is stopped, or with\n" +
			"--config). A running q35 guest needs a free PCIe root port per function: spec.hotplugSlots\n" +
			"reserves them. Every step is journalled: an attach killed half-way is undone by the next attach,\n" +
			"detach or destroy of the VM; a failed one is rolled back. Attaching what the VM has says so.\n" +
			"--dry-run prints the steps and the device XML and changes nothing. Exit codes: 0 attached (or\n" +
			"attached already), 1 failed (rolled back), 2 usage, 4 refused by a safety check (quarantined,\n" +
			"boot VGA...), 5 busy (the device is another VM's, or no free root port), 6 not found (no such\n" +
			"VM in the ledger, no such device), 7 unsupported (a video device into a running guest, machine pc).",
		Flags: []cli.Flag{
			connectFlag(),
			forceFlag(),
			&cli.StringFlag{Name: "gpu", Usage: "pass through the GPU at PCI `ADDR` (and its companions)"},
			&cli.StringFlag{Name: "profile", Usage: "create and attach a vGPU instance of type `NAME` (mdev or vendor-VFIO)"},
			&cli.BoolFlag{Name: "virtio", Usage: "attach a virtio-gpu (libvirt cannot hotplug one: with --config or to a stopped VM)"},
			&cli.BoolFlag{Name: "config", Usage: "change the VM's definition only (its next boot), even when it runs"},
			&cli.BoolFlag{Name: "dry-run", Usage: "print the steps and the device XML and change nothing"},
		},
		Action: opAction("attach"),
	}
}

// attachRequest is attach's request: its one operand, the VM (or a spec file naming it),
// --gpu, --profile or --virtio, --config, --dry-run and --force.
func attachRequest(f flagValues) (ops.AttachRequest, error) {
	if len(f.Operands()) != 1 {
		return ops.AttachRequest{}, usageErr("attach needs one VM name")
	}
	name, err := vmName(f.Operands()[0])
	if err != nil {
		return ops.AttachRequest{}, err
	}
	req := ops.AttachRequest{VM: name, GPU: f.String("gpu"), Profile: f.String("profile"), Virtio: f.Bool("virtio"),
		Config: f.Bool("config"), DryRun: f.Bool("dry-run"), Force: f.StringSlice("force")}
	return req, req.Check()
}

// renderAttach prints attach's result in output format output.
func renderAttach(w io.Writer, output string, res *ops.HotplugResult) error {
	return emitTo(w, output, res, func(w io.Writer) error { return hotplugTable(w, res, "attached") })
}

// hotplugTable prints an attach's or detach's result for people.
func hotplugTable(w io.Writer, r *lifecycle.HotplugResult, verb string) error {
	if len(r.Converged) > 0 {
		fmt.Fprintf(w, "%s: undid an interrupted attach first: %s\n", r.VM, strings.Join(r.Converged, "; "))
	}
	if r.Note != "" {
		fmt.Fprintf(w, "%s: %s %s\n", r.VM, r.Device, r.Note)
		return nil
	}
	var devs []string
	for _, c := range r.Claims {
		devs = append(devs, string(c.Kind)+" "+c.ID)
	}
	if len(devs) == 0 {
		devs = []string{"no host devices"}
	}
	if r.DryRun {
		fmt.Fprintf(w, "# dry run: attach %s to %s (%s, %s) would take these steps (nothing was changed)\n", r.Device, r.VM, r.Scope, strings.Join(devs, ", "))
		for _, p := range r.Planned {
			fmt.Fprintf(w, "%s\n", p.Text())
			if p.Action() != step.ActAttachDevice {
				for _, k := range sortedParamKeys(p.Params()) {
					fmt.Fprintf(w, "    %s: %s\n", k, p.Params()[k])
				}
			}
		}
		for _, x := range r.DeviceXML {
			fmt.Fprintf(w, "%s\n", x)
		}
		return nil
	}
	scope := ""
	if r.Scope != "" {
		scope = " (" + r.Scope + ")"
	}
	fmt.Fprintf(w, "%s: %s %s%s, %s (%s)\n", r.VM, verb, r.Device, scope, r.State, strings.Join(devs, ", "))
	return nil
}

func sortedParamKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
