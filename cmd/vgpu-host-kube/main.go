// Command vgpu-host-kube is vgpu-host's kubelet device plugin (docs/kubevirt.md): one resource
// per passthrough GPU model and per vGPU type, served over the device plugin API v1beta1 and
// registered with the kubelet, with health from the live inventory; optionally it keeps Node
// Feature Discovery's feature file in step with the host.
//
// It is a helper of vgpu-host, started by `vgpu-host device-plugin` (which finds it beside
// itself, in PATH or at $VGPU_HOST_KUBE_HELPER): it links gRPC and the kubelet API, whose
// package init vgpu-host's own start-up must not pay.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/urfave/cli/v3"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/kube"
	"github.com/vgpu-host/vgpu-host/kube/deviceplugin"
	"github.com/vgpu-host/vgpu-host/kube/dra"
	vremote "github.com/vgpu-host/vgpu-host/virt/remote"
)

// init names the process (it is started through /proc/self/fd/N): see remote.NameProcess.
func init() { vremote.NameProcess() }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := command().Run(ctx, os.Args)
	if err != nil {
		fmt.Fprintf(os.Stderr, "vgpu-host-kube: %v\n", err)
		os.Exit(1)
	}
}

func command() *cli.Command {
	var root, kubeletDir, config string
	var interval time.Duration
	var nfd bool
	return &cli.Command{
		Name:  "vgpu-host-kube",
		Usage: "kubelet device plugin for the GPUs and vGPUs of this host (started by `vgpu-host device-plugin`)",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "host-root", Value: "/", Usage: "read the host under `DIR`", Destination: &root, Sources: cli.EnvVars("VGPU_HOST_ROOT")},
			&cli.StringFlag{Name: "kubelet-dir", Value: deviceplugin.DefaultKubeletDir, Usage: "the kubelet's device-plugins `DIR` (kubelet.sock)", Destination: &kubeletDir},
			&cli.StringFlag{Name: "config", Usage: "resource-name overrides (`FILE`; default etc/vgpu-host/kubernetes.yaml under the host root, if present)", Destination: &config},
			&cli.DurationFlag{Name: "interval", Value: deviceplugin.DefaultInterval, Usage: "re-scan the host and check kubelet.sock every `DURATION`", Destination: &interval},
			&cli.BoolFlag{Name: "nfd", Usage: "keep Node Feature Discovery's feature file (etc/" + kube.FeaturesFile + ") in step with the host", Destination: &nfd},
		},
		Commands: []*cli.Command{draCommand(&root, &config, &interval)},
		Action: func(ctx context.Context, _ *cli.Command) error {
			r, err := host.NewRoot(root)
			if err != nil {
				return err
			}
			cfgPath, required := config, true
			if cfgPath == "" {
				cfgPath, required = r.Path(kube.DefaultConfigPath), false
			}
			cfg, err := kube.LoadConfig(cfgPath, required)
			if err != nil {
				return err
			}
			logger := log.New(os.Stderr, "vgpu-host-kube: ", log.LstdFlags)
			opts := deviceplugin.Options{Root: r, Config: cfg, KubeletDir: kubeletDir, Interval: interval, Logf: logger.Printf}
			if nfd {
				w := &featureWriter{root: r, every: interval, logf: logger.Printf}
				opts.OnScan = w.update
				defer w.remove()
			}
			logger.Printf("serving %s, kubelet at %s", r.Dir(), kubeletDir)
			return deviceplugin.New(opts).Run(ctx)
		},
	}
}

// featureWriter rewrites NFD's feature file when the labels change, and before its expiry.
type featureWriter struct {
	root    host.Root
	every   time.Duration
	logf    func(string, ...any)
	last    string
	expires time.Time
}

// expiry is how long NFD keeps the labels of a file nobody rewrites.
const expiry = 10 * time.Minute

func (w *featureWriter) update(inv *host.Inventory, cat *kube.Catalog) {
	labels, skipped := kube.Labels(inv, cat)
	text := kube.FeaturesText(labels, time.Time{})
	now := time.Now()
	if text == w.last && now.Add(expiry/2).Before(w.expires) {
		return
	}
	for _, s := range skipped {
		w.logf("%s", s)
	}
	w.expires = now.Add(expiry)
	p, err := kube.WriteFeatures(w.root, labels, w.expires)
	if err != nil {
		w.logf("%v", err)
		return
	}
	if text != w.last {
		w.logf("wrote %d labels to %s", len(labels), p)
	}
	w.last = text
}

func (w *featureWriter) remove() {
	if err := kube.RemoveFeatures(w.root); err != nil {
		w.logf("%v", err)
	}
}

// draCommand runs the Dynamic Resource Allocation kubelet plugin (kube/dra) instead of the
// device plugin: it publishes this node's devices as ResourceSlices through the API server
// (in-cluster credentials) and prepares claims with CDI specs.
func draCommand(root, config *string, interval *time.Duration) *cli.Command {
	var node, cdiDir, pluginDir, registrarDir string
	return &cli.Command{
		Name:  "dra",
		Usage: "run the DRA kubelet plugin (driver " + dra.DriverName + ") for this node",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "node-name", Usage: "this node's `NAME` (the pool and the slices' owner)", Sources: cli.EnvVars("NODE_NAME"), Destination: &node, Required: true},
			&cli.StringFlag{Name: "cdi-dir", Value: kubeletplugin.DefaultCDIDir, Usage: "where claim CDI specs are written (`DIR`)", Destination: &cdiDir},
			&cli.StringFlag{Name: "plugin-dir", Value: kubeletplugin.KubeletPluginsDir + "/" + dra.DriverName, Usage: "the plugin's socket `DIR`", Destination: &pluginDir},
			&cli.StringFlag{Name: "registrar-dir", Value: kubeletplugin.KubeletRegistryDir, Usage: "the kubelet's plugin registration `DIR`", Destination: &registrarDir},
		},
		Action: func(ctx context.Context, _ *cli.Command) error {
			r, err := host.NewRoot(*root)
			if err != nil {
				return err
			}
			cfgPath, required := *config, true
			if cfgPath == "" {
				cfgPath, required = r.Path(kube.DefaultConfigPath), false
			}
			cfg, err := kube.LoadConfig(cfgPath, required)
			if err != nil {
				return err
			}
			rc, err := rest.InClusterConfig()
			if err != nil {
				return fmt.Errorf("dra: the plugin runs in a pod with the API server's credentials: %w", err)
			}
			client, err := kubernetes.NewForConfig(rc)
			if err != nil {
				return fmt.Errorf("dra: %w", err)
			}
			drv := &dra.Driver{Root: r, Config: cfg, CDIDir: cdiDir}
			helper, err := kubeletplugin.Start(ctx, drv,
				kubeletplugin.DriverName(dra.DriverName),
				kubeletplugin.KubeClient(client),
				kubeletplugin.NodeName(node),
				kubeletplugin.PluginDataDirectoryPath(pluginDir),
				kubeletplugin.RegistrarDirectoryPath(registrarDir),
				kubeletplugin.HealthService(false),
			)
			if err != nil {
				return fmt.Errorf("dra: %w", err)
			}
			defer helper.Stop()
			log.Printf("vgpu-host-kube: dra driver %s serving %s for node %s", dra.DriverName, r.Dir(), node)
			return drv.Run(ctx, helper, node, *interval)
		},
	}
}
