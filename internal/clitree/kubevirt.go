package clitree

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/kube"
	"github.com/vgpu-host/vgpu-host/ops"
	"github.com/vgpu-host/vgpu-host/virt/remote"
)

// Kubernetes helper lookup: vgpu-host-kube holds gRPC and the kubelet API (heavy package
// init), found like vgpu-host-libvirt.
const (
	kubeHelperName = "vgpu-host-kube"
	kubeHelperEnv  = "VGPU_HOST_KUBE_HELPER"
)

var errNoKubeHelper = errors.New(kubeHelperName + " not found")

// kubeConfigFlag is --config of the Kubernetes commands.
func kubeConfigFlag() cli.Flag {
	return &cli.StringFlag{Name: "config", Usage: "resource-name overrides (`FILE`; default " + kube.DefaultConfigPath + " under --host-root, if present)"}
}

// kubeConfigOf is the --config of Kubernetes command op's request: the file read by the CLI,
// the content the caller's CLI sent in the agent (its content travels, so the operation opens
// no file a caller names), or none for the default file under the host root.
func kubeConfigOf(f flagValues, op string) (ops.KubeConfig, error) {
	p := f.String("config")
	if p == "" {
		return ops.KubeConfig{}, nil
	}
	b, sent, err := sentContent(f, op, p)
	if err == nil && !sent {
		b, err = kube.ReadConfig(p)
	}
	if err != nil {
		return ops.KubeConfig{}, err
	}
	return ops.KubeConfig{Config: p, ConfigData: b}, nil
}

// renderManifest prints a manifest in output format output: JSON for json, YAML otherwise (a
// table of a manifest is the manifest).
func renderManifest(w io.Writer, output string, v any) error {
	if output != "json" {
		output = "yaml"
	}
	return encodeAs(w, output, v)
}

func devicePluginCommand() *cli.Command {
	return &cli.Command{
		Name:  "device-plugin",
		Usage: "run the kubelet device plugin for this host's GPUs and vGPUs (starts " + kubeHelperName + ")",
		Description: "Serves one Kubernetes resource per passthrough GPU model and per vGPU type to the\n" +
			"kubelet (device plugin API v1beta1), with health from the live host, and re-registers\n" +
			"when the kubelet restarts. --nfd keeps Node Feature Discovery's feature file in step.\n" +
			"The plugin is the helper " + kubeHelperName + " (beside vgpu-host, in PATH, or $" + kubeHelperEnv + ").\n" +
			"See docs/kubevirt.md.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "kubelet-dir", Value: "/var/lib/kubelet/device-plugins", Usage: "the kubelet's device-plugins `DIR` (kubelet.sock)"},
			kubeConfigFlag(),
			&cli.DurationFlag{Name: "interval", Usage: "re-scan the host every `DURATION` (default 2s)"},
			&cli.BoolFlag{Name: "nfd", Usage: "write Node Feature Discovery's feature file (etc/" + kube.FeaturesFile + ")"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.NArg() != 0 {
				return usageErr("device-plugin takes no arguments")
			}
			args := []string{"--kubelet-dir", cmd.String("kubelet-dir")}
			if cmd.Bool("nfd") {
				args = append(args, "--nfd")
			}
			return execKubeHelper(cmd, nil, args)
		},
	}
}

// execKubeHelper replaces this process with vgpu-host-kube [sub] and the common flags
// (--host-root, --config, --interval) plus args, so the kubelet's and the DaemonSet's signals
// go to the plugin.
func execKubeHelper(cmd *cli.Command, sub []string, args []string) error {
	helper, err := remote.OpenHelper(kubeHelperName, kubeHelperEnv, "kubelet plugins", errNoKubeHelper)
	if err != nil {
		return err
	}
	defer helper.Close()
	argv := []string{helper.Path, "--host-root", cmd.String("host-root")}
	if c := cmd.String("config"); c != "" {
		argv = append(argv, "--config", c)
	}
	if d := cmd.Duration("interval"); d > 0 {
		argv = append(argv, "--interval", d.String())
	}
	argv = append(append(argv, sub...), args...)
	return helper.Exec(argv, os.Environ())
}

func draPluginCommand() *cli.Command {
	return &cli.Command{
		Name:  "dra-plugin",
		Usage: "run the Dynamic Resource Allocation kubelet plugin for this node (starts " + kubeHelperName + " dra)",
		Description: "Publishes this node's GPUs and vGPUs as ResourceSlices of the driver gpu.vgpu-host.io\n" +
			"(attributes: model, NUMA node, PCI address, vGPU type, resource name) and prepares\n" +
			"allocated claims with CDI specs. Runs in a pod: it uses the in-cluster API credentials.\n" +
			"See docs/kubevirt.md, \"Dynamic Resource Allocation\".",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "node-name", Usage: "this node's `NAME` (default $NODE_NAME)"},
			kubeConfigFlag(),
			&cli.DurationFlag{Name: "interval", Usage: "re-scan the host every `DURATION` (default 2s)"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.NArg() != 0 {
				return usageErr("dra-plugin takes no arguments")
			}
			var args []string
			if n := cmd.String("node-name"); n != "" {
				args = append(args, "--node-name", n)
			}
			return execKubeHelper(cmd, []string{"dra"}, args)
		},
	}
}

func kubevirtCommand() *cli.Command {
	return &cli.Command{
		Name:  "kubevirt",
		Usage: "KubeVirt: the permittedHostDevices patch, VirtualMachine manifests, node labels",
		Commands: []*cli.Command{
			{
				Name:  "config",
				Usage: "print the KubeVirt CR patch that permits this host's GPU and vGPU resources",
				Description: "Prints spec.configuration.permittedHostDevices for the KubeVirt CR from the host's\n" +
					"inventory: pciHostDevices (pciVendorSelector) for passthrough GPUs and vendor-VFIO VFs,\n" +
					"mediatedDevices (mdevNameSelector) for mdev types, all externalResourceProvider: true.\n" +
					"KubeVirt's mediatedDevicesConfiguration is left out: vgpu-host owns the vGPU layout.\n" +
					"Apply: kubectl patch kubevirt kubevirt -n kubevirt --type merge --patch-file FILE",
				Flags:  []cli.Flag{kubeConfigFlag()},
				Action: opAction("kubevirt config"),
			},
			{
				Name:      "vm",
				Usage:     "translate a VM spec into a KubeVirt VirtualMachine manifest",
				ArgsUsage: "SPEC.yaml",
				Description: "Translates SPEC.yaml (docs/spec.md) into a kubevirt.io/v1 VirtualMachine: CPU, memory,\n" +
					"hugepages, NUMA passthrough, firmware, GPUs as gpus[] with the device plugin's resource\n" +
					"names (matched on this host, --host-root), cloud-init as cloudInitNoCloud, disks as\n" +
					"DataVolumes to upload or containerDisks (--container-disk). Every field KubeVirt cannot\n" +
					"express is printed on stderr and kept in the annotation " + kube.AnnotationUnsupported + ";\n" +
					"--strict makes them an error (exit 7).",
				Flags: []cli.Flag{
					kubeConfigFlag(),
					&cli.StringSliceFlag{Name: "container-disk", Usage: "make disk `NAME=IMAGE` a containerDisk (repeatable)"},
					&cli.BoolFlag{Name: "strict", Usage: "fail (exit 7) when a field cannot be expressed"},
				},
				Action: opAction("kubevirt vm"),
			},
			{
				Name:  "labels",
				Usage: "print (or --write) the Node Feature Discovery labels of this host's state",
				Description: "Labels (feature.node.kubernetes.io/vgpu-host.*) for GPU models, modes, vGPU types and\n" +
					"free capacity, from the host's state now. --write replaces NFD's feature file\n" +
					"etc/" + kube.FeaturesFile + " under --host-root (the device plugin's --nfd\n" +
					"keeps it current).",
				Flags:  []cli.Flag{kubeConfigFlag(), &cli.BoolFlag{Name: "write", Usage: "write the NFD feature file"}},
				Action: opAction("kubevirt labels"),
			},
		},
	}
}

// kubeVirtConfigRequest is kubevirt config's request: no operand, --config.
func kubeVirtConfigRequest(f flagValues) (ops.KubeVirtConfigRequest, error) {
	if len(f.Operands()) != 0 {
		return ops.KubeVirtConfigRequest{}, usageErr("kubevirt config takes no arguments")
	}
	k, err := kubeConfigOf(f, "kubevirt config")
	return ops.KubeVirtConfigRequest{KubeConfig: k}, err
}

// kubeVirtLabelsRequest is kubevirt labels' request: no operand, --config and --write.
func kubeVirtLabelsRequest(f flagValues) (ops.KubeVirtLabelsRequest, error) {
	if len(f.Operands()) != 0 {
		return ops.KubeVirtLabelsRequest{}, usageErr("kubevirt labels takes no arguments")
	}
	k, err := kubeConfigOf(f, "kubevirt labels")
	return ops.KubeVirtLabelsRequest{KubeConfig: k, Write: f.Bool("write")}, err
}

// renderLabelsWritten prints kubevirt labels' result: with table output "wrote FILE" on
// stderr first (before the labels reach stdout, as always), then renderKubeVirtLabels's.
func renderLabelsWritten(o opOutput, res *ops.KubeVirtLabelsResult) error {
	if o.format == "table" && res.Written != "" {
		fmt.Fprintf(o.errw, "wrote %s\n", res.Written)
	}
	return renderKubeVirtLabels(o.w, o.format, res)
}

// renderKubeVirtLabels prints kubevirt labels' labels in output format output.
func renderKubeVirtLabels(w io.Writer, output string, res *ops.KubeVirtLabelsResult) error {
	return emitTo(w, output, res, func(w io.Writer) error {
		for _, l := range res.Labels {
			fmt.Fprintf(w, "%s%s=%s\n", kube.LabelPrefix, l.Name, l.Value)
		}
		return nil
	})
}

// kubeVirtVMSpecRequest is kubevirt vm's request in the order the command always took its
// steps: the disks, the spec (read by the CLI, the content the caller sent in the agent) and
// its disks checked; kubeVirtVMConfig adds --config after the root.
func kubeVirtVMSpecRequest(f flagValues) (ops.KubeVirtVMRequest, error) {
	disks, err := containerDisks(f)
	if err != nil {
		return ops.KubeVirtVMRequest{}, err
	}
	specs, err := specsOf(f, "kubevirt vm")
	if err != nil {
		return ops.KubeVirtVMRequest{}, err
	}
	if err := ops.CheckContainerDisks(specs[0].VM, disks); err != nil {
		return ops.KubeVirtVMRequest{}, err
	}
	return ops.KubeVirtVMRequest{Spec: specs[0], ContainerDisks: disks, Strict: f.Bool("strict")}, nil
}

// kubeVirtVMConfig completes kubevirt vm's request with --config, its error naming the VM.
func kubeVirtVMConfig(f flagValues, req ops.Request, _ opSite) (ops.Request, error) {
	r, _ := req.(ops.KubeVirtVMRequest)
	k, err := kubeConfigOf(f, "kubevirt vm")
	if err != nil {
		return nil, fmt.Errorf("kubevirt vm %s: %w", kubeVMName(r), err)
	}
	r.KubeConfig = k
	return r, nil
}

// kubeVMName is the name of kubevirt vm's VM (its spec is loaded by the request builder).
func kubeVMName(r ops.KubeVirtVMRequest) string {
	if r.Spec.VM == nil {
		return ""
	}
	return r.Spec.VM.Metadata.Name
}

// containerDisks reads --container-disk NAME=IMAGE.
func containerDisks(f flagValues) (map[string]string, error) {
	disks := map[string]string{}
	for _, cd := range f.StringSlice("container-disk") {
		name, image, ok := strings.Cut(cd, "=")
		if !ok || name == "" || image == "" {
			return nil, usageErr("--container-disk %q: want NAME=IMAGE, e.g. root=quay.io/containerdisks/debian:12", cd)
		}
		disks[name] = image
	}
	return disks, nil
}
