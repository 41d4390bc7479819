// Package agentcmd is what vgpu-host-agent adds to the command tree (internal/clitree): the
// agent's server (net/http), Prometheus metrics, the boot reconcile, the drift watcher and the
// in-process ISO download. Only cmd/vgpu-host-agent imports it, so vgpu-host links none of
// them (clitree's TestMainBinaryHasNoNetHTTP).
package agentcmd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/agent"
	"github.com/vgpu-host/vgpu-host/agent/drift"
	"github.com/vgpu-host/vgpu-host/agent/metrics"
	"github.com/vgpu-host/vgpu-host/agent/reconcile"
	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/internal/clitree"
	"github.com/vgpu-host/vgpu-host/ledger"
	migremote "github.com/vgpu-host/vgpu-host/mig/remote"
	"github.com/vgpu-host/vgpu-host/vfio"
	"github.com/vgpu-host/vgpu-host/virt"
)

// Env is vgpu-host-agent's environment for the command tree: `vgpu-host agent` serves here,
// an ISO a spec names by URL is downloaded in this process, and the agent's requests share one
// NVML helper (migremote.Shared) instead of starting one each.
func Env() clitree.Env {
	nvml := &migremote.Shared{}
	return clitree.Env{
		Agent:    func(ctx context.Context, cmd *cli.Command) error { return runAgent(ctx, cmd, nvml) },
		FetchISO: fetchISO,
		NVML:     migremote.Env{Shared: nvml},
	}
}

// agentParts attaches what makes the server the host's agent: Prometheus metrics (on the
// socket's /metrics), the warm libvirt connection that reopens itself when libvirtd restarts,
// the boot reconcile before the first change (then READY=1 to systemd), and the drift watcher,
// whose releases go through the agent's queue. It returns the watcher, to run once the
// reconcile is done (ready is closed then).
func agentParts(cmd *cli.Command, srv *agent.Server) (watcher *drift.Watcher, ready chan struct{}, err error) {
	root, log := srv.Root, srv.Log
	m := metrics.New(metrics.HostSource{Root: root})
	srv.Metrics, srv.Observe = m.Handler(), m.ObserveOp
	if addr := cmd.String("metrics-listen"); addr != "" {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, nil, fmt.Errorf("--metrics-listen %s: %w", addr, err)
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", m.Handler())
		hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = hs.Serve(ln) }()
		log.Info("metrics over TCP", "addr", ln.Addr().String())
	}
	open := srv.OpenConn
	warm := drift.NewConn(srv.URI, func() (virt.Conn, error) { return open(srv.URI) }, log)
	srv.OpenConn = func(string) (virt.Conn, error) { return warm, nil }
	srv.Libvirt = warm.Status

	mgr, _, done, err := clitree.VGPUManager(cmd)
	if err != nil {
		return nil, nil, err
	}
	ready = make(chan struct{})
	w, mods := clitree.HostIO(cmd, root)
	rec := &reconcile.Reconciler{Mdev: mgr, Binder: &vfio.Binder{Root: root, W: w, Modules: mods, Timeout: mgr.Timeout}, Log: log,
		OpenMIG: clitree.MIGOpener(root)}
	srv.Ready = func(ctx context.Context) error {
		defer close(ready)
		defer done()
		// systemctl status shows this while the unit is "activating" (it may take a while:
		// MIG instances, VFs and a driver probe per function bound).
		if _, nerr := reconcile.NotifyStatus("boot reconcile: restoring the stored host layout, VFs, vGPU instances and vfio-pci bindings"); nerr != nil {
			log.Warn("sd_notify", "err", nerr)
		}
		res, err := rec.Run(ctx)
		m.Reconcile(res)
		if _, nerr := reconcile.NotifyResult(res); nerr != nil {
			log.Warn("sd_notify", "err", nerr)
		}
		_ = warm.Connect() // warm before the first request; a libvirtd not up yet is retried
		return err
	}
	watcher = &drift.Watcher{Conn: warm, Ledger: ledger.Open(root), Root: root, Metrics: m, Log: log,
		Release: func(ctx context.Context, d drift.Drift) error {
			_, err := srv.Internal(ctx, agent.ExecRequest{Command: "destroy", Operands: []string{d.VM}})
			return err
		}}
	srv.Drifts = func() []any {
		var out []any
		for _, d := range watcher.Drifts() {
			out = append(out, d)
		}
		return out
	}
	return watcher, ready, nil
}

// agentServer builds the agent for the invocation; runAgent listens and serves it. This is
// where optional parts (metrics, boot reconcile, drift) are attached to the Server.
func agentServer(cmd *cli.Command) (*agent.Server, error) {
	if cmd.Args().Len() > 0 {
		return nil, clitree.UsageErr("agent takes no arguments, got %q", cmd.Args().First())
	}
	root, err := clitree.RootOf(cmd)
	if err != nil {
		return nil, err
	}
	uri, err := clitree.ConnURI(cmd, root)
	if err != nil {
		return nil, err
	}
	log, err := agent.NewLogger(cmd.Root().ErrWriter, cmd.String("log-level"), clitree.IsTerminal(os.Stderr))
	if err != nil {
		return nil, clitree.UsageErr("--log-level: %v", err)
	}
	socket := clitree.AgentSocket(root)
	if cmd.IsSet("socket") {
		if socket, err = filepath.Abs(cmd.String("socket")); err != nil || cmd.String("socket") == "" {
			return nil, clitree.UsageErr("--socket %q: name the socket's path", cmd.String("socket"))
		}
	}
	gid, group := -1, cmd.String("group")
	if group != "" {
		g, err := user.LookupGroup(group)
		switch {
		case err == nil:
			gid, _ = strconv.Atoi(g.Gid)
		case cmd.IsSet("group"):
			return nil, clitree.UsageErr("--group %s: %v (create it with groupadd, or pass --group '' for root only)", group, err)
		default:
			group = ""
		}
	}
	procRoot, _ := host.NewRoot("/")
	return &agent.Server{
		Root:            root,
		Socket:          socket,
		GID:             gid,
		GroupName:       group,
		ProcRoot:        procRoot,
		Runner:          clitree.Runner(cmd, root, uri, log),
		Log:             log,
		RequestTimeout:  cmd.Duration("request-timeout"),
		ShutdownTimeout: cmd.Duration("shutdown-timeout"),
		URI:             uri,
		OpenConn:        clitree.OpenConnWait(cmd),
	}, nil
}

func runAgent(ctx context.Context, cmd *cli.Command, nvml *migremote.Shared) error {
	srv, err := agentServer(cmd)
	if err != nil {
		return err
	}
	// The shared NVML helper starts again when the functions on nvidia change past vgpu-host
	// (migremote.Shared), and stops when the agent does, as its Xid watch's does.
	nvml.Root = &srv.Root
	defer func() {
		if err := nvml.Close(); err != nil {
			srv.Log.Debug("shared NVML helper", "err", err)
		}
	}()
	if srv.RequestTimeout <= 0 || srv.ShutdownTimeout <= 0 {
		return clitree.UsageErr("--request-timeout and --shutdown-timeout must be positive")
	}
	if addr := cmd.String("metrics-listen"); addr != "" {
		if err := checkListenAddr(addr); err != nil {
			return clitree.UsageErr("--metrics-listen %q: %v (want host:port, e.g. 127.0.0.1:9400)", addr, err)
		}
	}
	if err := srv.Listen(); err != nil {
		if errors.Is(err, host.ErrBusy) {
			return err
		}
		return fmt.Errorf("agent: %w", err)
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	watcher, ready, err := agentParts(cmd, srv)
	if err != nil {
		if cerr := srv.Close(); cerr != nil {
			srv.Log.Warn("agent not started", "err", cerr)
		}
		return err
	}
	// The background work starts once the boot reconcile is done, and ends with ctx: the
	// agent waits for it before it exits, so that no NVML helper of its Xid watch outlives it
	// holding /dev/nvidia* (the next bind would find it).
	var bg sync.WaitGroup
	afterReady := func(f func()) {
		bg.Go(func() {
			select {
			case <-ready:
				f()
			case <-ctx.Done():
			}
		})
	}
	// At SIGTERM, systemd hears that the agent is stopping (STOPPING=1) while it finishes the
	// requests in flight, up to --shutdown-timeout.
	bg.Go(func() {
		<-ctx.Done()
		if _, err := reconcile.NotifyStopping("stopping: finishing the requests in flight"); err != nil {
			srv.Log.Warn("sd_notify", "err", err)
		}
	})
	afterReady(func() { _ = watcher.Run(ctx) })
	afterReady(func() { keepMIGCache(ctx, cmd, srv.Root, srv.Log) })
	afterReady(func() { keepCheckingHealth(ctx, srv.Root, srv.Log) })
	err = srv.Serve(ctx)
	stop()
	waitBackground(&bg, backgroundStop, srv.Log)
	return err
}

// backgroundStop bounds how long the agent waits at exit for its background work to end: the
// Xid watch's helper answers its current wait (xidWait) before it exits.
const backgroundStop = 5 * time.Second

// waitBackground waits up to limit for bg, and says so in the log when it did not end.
func waitBackground(bg *sync.WaitGroup, limit time.Duration, log *slog.Logger) {
	done := make(chan struct{})
	go func() {
		bg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(limit):
		log.Warn("agent stopped with background work still running", "waited", limit)
	}
}

// keepMIGCache reads NVML's MIG state into root's MIG state cache (clitree's migcache.go) every
// clitree.MIGCacheRefresh until ctx ends, so that inspect shows MIG without starting NVML and sees
// changes made past vgpu-host (nvidia-smi mig) within a minute; changes through vgpu-host
// refresh it at once. It stops for good when NVML does not describe root or cannot be had
// (no helper, no NVIDIA driver: nothing to cache).
func keepMIGCache(ctx context.Context, cmd *cli.Command, root host.Root, log *slog.Logger) {
	if !clitree.NVMLDescribes(root) {
		return
	}
	for {
		if err := clitree.RefreshMIGCache(ctx, cmd, root); err != nil {
			if errors.Is(err, host.ErrUnsupported) {
				log.Debug("MIG state cache: NVML not available; not refreshed", "err", err)
				return
			}
			log.Debug("MIG state cache: refresh failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(clitree.MIGCacheRefresh):
		}
	}
}

// keepCheckingHealth keeps the health files of the devices vgpu-host watches current
// (host.HealthWatch): a device that leaves the bus, changes driver or logs an AER error is in
// `host health`, /v1/health and /metrics within about a second of the change, and NVIDIA Xid
// errors from NVML (watchXid) within a second of the event; every device is checked in full
// every five minutes besides. It only records and logs: a device in a running guest is never
// reset or quarantined from here; the handback does that when the guest lets it go.
func keepCheckingHealth(ctx context.Context, root host.Root, log *slog.Logger) {
	w := host.NewHealthWatch(root)
	w.Checked = func(hs []host.DeviceHealth, err error) {
		if err != nil {
			log.Warn("device health check", "err", err)
		}
		for _, h := range hs {
			if !h.Healthy {
				log.Warn("device unhealthy", "device", h.Address.String(), "reason", h.Reason())
			}
		}
	}
	w.Xid = func(e host.XidEvent, err error) {
		if err != nil {
			log.Warn("NVIDIA Xid not recorded", "device", e.Address.String(), "xid", e.Xid, "err", err)
			return
		}
		log.Warn("NVIDIA Xid", "device", e.Address.String(), "xid", e.Xid, "fatal", host.XidFatal(e.Xid), "event", e.String())
	}
	var xid sync.WaitGroup
	defer xid.Wait() // its helper has exited when the health watch ends
	xid.Go(func() { watchXid(ctx, root, w.Xids(), log) })
	w.Run(ctx)
}

// xidWait is how long one WaitXid waits in the NVML helper: an event reaches the health
// files within about this, and a helper that died is noticed by then.
const xidWait = time.Second

// xidRetry is how long watchXid waits before it starts a helper again after one failed.
const xidRetry = time.Minute

// watchXid streams NVIDIA Xid errors from NVML (a helper of its own, vgpu-host-nvml, waiting in
// nvmlEventSetWait) into out until ctx ends. It stops for good where NVML does not describe
// root; where no GPU offers Xid events (no helper, no driver, no GPU on nvidia) it waits for a
// bind or unbind of an nvidia function (host.NVIDIANodes.Moved) and tries again; it starts the
// helper again a minute after it stopped answering. A bind or unbind of an nvidia function
// stops the helper for its duration (host.NVIDIANodes, mig/remote.Client): no Xid is seen
// then.
func watchXid(ctx context.Context, root host.Root, out chan<- host.XidEvent, log *slog.Logger) {
	if !clitree.NVMLDescribes(root) {
		return
	}
	for ctx.Err() == nil {
		moved := host.NVIDIANodes.Moved()
		err := streamXid(ctx, out)
		if errors.Is(err, host.ErrUnsupported) {
			// No helper, no driver, or no GPU on nvidia (each bound to vfio-pci, say): tried
			// again once a bind or unbind moves a function off or onto nvidia.
			log.Debug("NVIDIA Xid events: not available; watched again when a GPU moves", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-moved:
				continue
			}
		}
		if ctx.Err() != nil {
			return
		}
		log.Warn("NVIDIA Xid events: the NVML helper failed; starting it again in a minute", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(xidRetry):
		}
	}
}

// streamXid runs one helper and relays its Xid events until it fails or ctx ends.
func streamXid(ctx context.Context, out chan<- host.XidEvent) error {
	c, err := migremote.Open()
	if err != nil {
		return err
	}
	defer c.Close()
	for {
		evs, err := c.WaitXid(ctx, xidWait)
		for _, e := range evs {
			select {
			case out <- e:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if err != nil {
			return err
		}
	}
}

// checkListenAddr says what is wrong with a TCP address to listen on (host:port, the host
// optional), before the agent creates its socket: a usage error leaves nothing behind.
func checkListenAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return err
	}
	return nil
}
