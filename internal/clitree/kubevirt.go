package clitree

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/domains"
	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/kube"
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

// kubeConfig loads --config, or the default file under the host root when it exists.
func kubeConfig(cmd *cli.Command, root host.Root) (kube.Config, error) {
	if p := cmd.String("config"); p != "" {
		return kube.LoadConfig(p, true)
	}
	return kube.LoadConfig(root.Path(kube.DefaultConfigPath), false)
}

// scanKube reads the host and its catalog.
func scanKube(cmd *cli.Command, offered bool) (host.Root, *host.Inventory, *kube.Catalog, error) {
	root, err := rootOf(cmd)
	if err != nil {
		return root, nil, nil, err
	}
	cfg, err := kubeConfig(cmd, root)
	if err != nil {
		return root, nil, nil, err
	}
	inv, err := host.Scan(root)
	if err != nil {
		return root, nil, nil, err
	}
	if cfg, err = cfg.WithRecorded(root); err != nil {
		return root, nil, nil, err
	}
	cat := kube.Build(inv, cfg)
	if offered {
		cat = kube.Offered(inv, cfg)
	}
	// Recording is best-effort here: a user without write access to the state directory still
	// gets the names, and the device plugin records the same ones from the same host.
	_ = cat.RecordNames(root, cfg)
	if offered {
		return root, inv, cat, nil
	}
	cat.MarkDeviceNodes(root)
	return root, inv, cat, cat.MarkHeldFromLedger(root)
}

// manifestFormat is --output for manifests: JSON for json, YAML otherwise (a table of a
// manifest is the manifest).
func manifestFormat(cmd *cli.Command) (string, error) {
	o, err := outputOf(cmd)
	if err != nil || o == "json" {
		return o, err
	}
	return "yaml", nil
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
				Flags: []cli.Flag{kubeConfigFlag()},
				Action: func(ctx context.Context, cmd *cli.Command) error {
					if cmd.NArg() != 0 {
						return usageErr("kubevirt config takes no arguments")
					}
					o, err := manifestFormat(cmd)
					if err != nil {
						return err
					}
					_, _, cat, err := scanKube(cmd, true)
					if err != nil {
						return err
					}
					if len(cat.Resources) == 0 {
						fmt.Fprintln(cmd.Root().ErrWriter, "vgpu-host: warning: this host has no GPU or vGPU resource; the patch permits nothing")
					}
					return encodeAs(cmd.Root().Writer, o, kube.Permitted(cat))
				},
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
				Action: kubevirtVM,
			},
			{
				Name:  "labels",
				Usage: "print (or --write) the Node Feature Discovery labels of this host's state",
				Description: "Labels (feature.node.kubernetes.io/vgpu-host.*) for GPU models, modes, vGPU types and\n" +
					"free capacity, from the host's state now. --write replaces NFD's feature file\n" +
					"etc/" + kube.FeaturesFile + " under --host-root (the device plugin's --nfd\n" +
					"keeps it current).",
				Flags: []cli.Flag{kubeConfigFlag(), &cli.BoolFlag{Name: "write", Usage: "write the NFD feature file"}},
				Action: func(ctx context.Context, cmd *cli.Command) error {
					if cmd.NArg() != 0 {
						return usageErr("kubevirt labels takes no arguments")
					}
					if _, err := outputOf(cmd); err != nil {
						return err
					}
					root, inv, cat, err := scanKube(cmd, false)
					if err != nil {
						return err
					}
					labels, skipped := kube.Labels(inv, cat)
					for _, s := range skipped {
						fmt.Fprintf(cmd.Root().ErrWriter, "vgpu-host: warning: %s\n", s)
					}
					written := ""
					if cmd.Bool("write") {
						if written, err = kube.WriteFeatures(root, labels, time.Time{}); err != nil {
							return err
						}
					}
					return emit(cmd, map[string]any{"labels": labels, "written": written}, func(w io.Writer) error {
						for _, l := range labels {
							fmt.Fprintf(w, "%s%s=%s\n", kube.LabelPrefix, l.Name, l.Value)
						}
						if written != "" {
							fmt.Fprintf(cmd.Root().ErrWriter, "wrote %s\n", written)
						}
						return nil
					})
				},
			},
		},
	}
}

func kubevirtVM(ctx context.Context, cmd *cli.Command) error {
	if cmd.NArg() != 1 {
		return usageErr("kubevirt vm takes one SPEC.yaml, got %d arguments", cmd.NArg())
	}
	o, err := manifestFormat(cmd)
	if err != nil {
		return err
	}
	disks := map[string]string{}
	for _, cd := range cmd.StringSlice("container-disk") {
		name, image, ok := strings.Cut(cd, "=")
		if !ok || name == "" || image == "" {
			return usageErr("--container-disk %q: want NAME=IMAGE, e.g. root=quay.io/containerdisks/debian:12", cd)
		}
		disks[name] = image
	}
	vm, err := domains.Load(cmd.Args().First())
	if err != nil {
		return err
	}
	for name := range disks {
		found := false
		for i, d := range vm.Spec.Disks {
			found = found || d.Name == name || d.Name == "" && name == fmt.Sprintf("disk%d", i)
		}
		if !found {
			return usageErr("--container-disk %s: the spec has no disk of that name", name)
		}
	}
	_, inv, cat, err := scanKube(cmd, true)
	if err != nil {
		return fmt.Errorf("kubevirt vm %s: %w", vm.Metadata.Name, err)
	}
	tr, err := kube.TranslateVM(vm, inv, cat, kube.TranslateOptions{ContainerDisks: disks})
	if err != nil {
		return err
	}
	for _, f := range tr.Findings {
		fmt.Fprintf(cmd.Root().ErrWriter, "vgpu-host: not in the KubeVirt manifest: %s\n", f)
	}
	if cmd.Bool("strict") && len(tr.Findings) > 0 {
		return fmt.Errorf("kubevirt vm %s: %d fields KubeVirt cannot express (listed above): %w", vm.Metadata.Name, len(tr.Findings), host.ErrUnsupported)
	}
	return encodeAs(cmd.Root().Writer, o, tr.VM)
}
