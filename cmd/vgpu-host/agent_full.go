//go:build agent

package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/agent"
	"github.com/vgpu-host/vgpu-host/agent/drift"
	"github.com/vgpu-host/vgpu-host/agent/metrics"
	"github.com/vgpu-host/vgpu-host/agent/reconcile"
	"github.com/vgpu-host/vgpu-host/ledger"
	"github.com/vgpu-host/vgpu-host/vfio"
	"github.com/vgpu-host/vgpu-host/virt"
)

// agentBuiltIn: this is vgpu-host-agent (make build: the command tree built with -tags agent),
// which runs the agent itself, Prometheus client and all.
const agentBuiltIn = true

// execAgent is not needed here: this binary is the agent.
func execAgent() error { return nil }

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

	mgr, _, done, err := vgpuManager(cmd)
	if err != nil {
		return nil, nil, err
	}
	ready = make(chan struct{})
	w, mods := hostIO(root)
	rec := &reconcile.Reconciler{Mdev: mgr, Binder: &vfio.Binder{Root: root, W: w, Modules: mods, Timeout: mgr.Timeout}, Log: log,
		OpenMIG: migOpener(root)}
	srv.Ready = func(ctx context.Context) error {
		defer close(ready)
		defer done()
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
			_, err := srv.Internal(ctx, "destroy", d.VM)
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
