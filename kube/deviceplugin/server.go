package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/kube"
	"github.com/vgpu-host/vgpu-host/ops"
)

// DefaultKubeletDir is the kubelet's device-plugins directory (kubelet.sock and the plugins'
// sockets).
const DefaultKubeletDir = pluginapi.DevicePluginPath

// DefaultInterval is how often the host is re-scanned and kubelet.sock checked.
const DefaultInterval = 2 * time.Second

// Options configure Run.
type Options struct {
	// Root is the host the inventory is read from.
	Root host.Root
	// Config overrides resource names.
	Config kube.Config
	// KubeletDir holds kubelet.sock and the plugin sockets (DefaultKubeletDir).
	KubeletDir string
	// Interval between scans (DefaultInterval).
	Interval time.Duration
	// Logf reports registrations and health changes (nil: silent).
	Logf func(format string, a ...any)
	// OnScan is called after every scan with its inventory and catalog (the NFD writer).
	OnScan func(*host.Inventory, *kube.Catalog)
	// Now is the clock of registration back-offs (time.Now).
	Now func() time.Time
}

// Server runs one plugin per resource of the host's catalog.
type Server struct {
	opts    Options
	plugins map[string]*plugin
}

// New returns a Server; Run starts it.
func New(opts Options) *Server {
	if opts.KubeletDir == "" {
		opts.KubeletDir = DefaultKubeletDir
	}
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	return &Server{opts: opts, plugins: map[string]*plugin{}}
}

// Run scans the host, serves and registers every resource, and then every Interval re-scans
// (sending health changes, adding plugins for new resources) and re-registers after a kubelet
// restart, until ctx ends. It returns nil when ctx ends, or the first scan's error (a failed
// registration is logged and tried again).
func (s *Server) Run(ctx context.Context) error {
	if err := s.Sync(ctx); errors.Is(err, errScan) {
		return err
	} else if err != nil {
		// A kubelet that is not ready (or answers EOF while it starts) is tried again at the
		// next turn, as after a kubelet restart.
		s.opts.Logf("%v", err)
	}
	defer s.stopAll()
	t := time.NewTicker(s.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := s.Sync(ctx); err != nil {
				s.opts.Logf("%v", err)
			}
		}
	}
}

// errScan marks a Sync that could not read the host at all.
var errScan = errors.New("cannot scan the host")

// Sync is one turn of Run's loop: read the inventory through the typed operation the CLI's
// inspect and the agent's GET /v1/inventory run (ops.Inventory, the host alone: the catalog
// reads health and quarantine records itself), update every plugin, start plugins for new resources,
// and register with the kubelet whatever is not registered with the kubelet now running.
func (s *Server) Sync(ctx context.Context) error {
	res, err := ops.Inventory(ctx, ops.Env{Root: s.opts.Root}, ops.InventoryRequest{HostOnly: true})
	if err != nil {
		return fmt.Errorf("device plugin: %w: %w", errScan, err)
	}
	inv := res.Inventory.Inventory
	cfg, err := s.opts.Config.WithRecorded(s.opts.Root)
	if err != nil {
		s.opts.Logf("%v", err)
	}
	cat := kube.Build(inv, cfg)
	if err := cat.RecordNames(s.opts.Root, cfg); err != nil {
		s.opts.Logf("%v", err)
	}
	cat.MarkDeviceNodes(s.opts.Root)
	if err := cat.MarkHeldFromLedger(s.opts.Root); err != nil {
		s.opts.Logf("%v", err)
	}
	if s.opts.OnScan != nil {
		s.opts.OnScan(inv, cat)
	}
	seen := map[string]bool{}
	for _, r := range cat.Resources {
		seen[r.Name] = true
		if p, ok := s.plugins[r.Name]; ok {
			if p.update(r) {
				s.opts.Logf("%s: %d of %d devices healthy", r.Name, healthy(p), len(p.res.Devices))
			}
			continue
		}
		s.plugins[r.Name] = newPlugin(s.opts.Root, s.opts.KubeletDir, r)
	}
	for name, p := range s.plugins {
		if !seen[name] {
			// Every device of the resource is gone: keep the plugin so they are reported
			// unhealthy (a pod may still hold one).
			if p.update(kube.Resource{Name: p.res.Name, Kind: p.res.Kind, Selector: p.res.Selector}) {
				s.opts.Logf("%s: no device left on the host", name)
			}
		}
	}
	return s.register(ctx)
}

func healthy(p *plugin) int {
	r, _ := p.snapshot()
	return r.Healthy()
}

// MaxRetry is the longest wait before a refused registration is tried again.
const MaxRetry = 5 * time.Minute

// register serves and registers plugins as needed, each on its own: a kubelet.sock that is not
// the one a plugin registered with means the kubelet restarted (and deleted every plugin
// socket), so the plugin is served again and registered; so is a plugin whose socket is gone.
// A plugin the kubelet refused is tried again after a back-off that doubles from Interval to
// MaxRetry (a new kubelet is tried at once), and touches no other plugin: re-serving a
// registered plugin would cut its ListAndWatch stream, and a real kubelet marks a resource's
// devices unhealthy when its stream ends, so one refused name would flap every GPU of the node.
func (s *Server) register(ctx context.Context) error {
	kpath := filepath.Join(s.opts.KubeletDir, "kubelet.sock")
	fi, err := os.Stat(kpath)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil // no kubelet yet: the next turn registers
		}
		return fmt.Errorf("device plugin: %w", err)
	}
	names := make([]string, 0, len(s.plugins))
	for n := range s.plugins {
		names = append(names, n)
	}
	sort.Strings(names)
	now := s.opts.Now()
	var errs []error
	for _, n := range names {
		p := s.plugins[n]
		reg := &p.reg
		if reg.kubelet != nil && os.SameFile(reg.kubelet, fi) && p.serving() {
			continue // registered with this kubelet, and serving
		}
		if reg.refusedBy != nil && os.SameFile(reg.refusedBy, fi) && now.Before(reg.retryAt) {
			continue // refused by this kubelet: wait out the back-off
		}
		reg.kubelet = nil
		err := p.serve()
		if err == nil {
			err = Register(ctx, kpath, p.name, filepath.Base(p.socket))
			if err != nil {
				p.stopServer()
			}
		}
		if err != nil {
			if reg.refusedBy == nil || !os.SameFile(reg.refusedBy, fi) {
				reg.refusedBy, reg.wait = fi, 0
			}
			reg.wait = min(max(2*reg.wait, s.opts.Interval), MaxRetry)
			reg.retryAt = now.Add(reg.wait)
			errs = append(errs, fmt.Errorf("%w (next try in %s)", err, reg.wait))
			continue
		}
		p.reg = regState{kubelet: fi}
		s.opts.Logf("registered %s (%s)", p.name, filepath.Base(p.socket))
	}
	return errors.Join(errs...)
}

// Register tells the kubelet at kubeletSocket that resource is served on endpoint (a socket
// file name in the same directory).
func Register(ctx context.Context, kubeletSocket, resource, endpoint string) error {
	conn, err := grpc.NewClient("unix://"+kubeletSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("register %s with the kubelet at %s: %w", resource, kubeletSocket, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     endpoint,
		ResourceName: resource,
		Options:      &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true},
	})
	if err != nil {
		return fmt.Errorf("register %s with the kubelet at %s: %w", resource, kubeletSocket, err)
	}
	return nil
}

func (s *Server) stopAll() {
	for _, p := range s.plugins {
		p.stop()
	}
}
