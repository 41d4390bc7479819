package clitree

import (
	"context"
	"io"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/layout"
	"github.com/vgpu-host/vgpu-host/mig"
	migremote "github.com/vgpu-host/vgpu-host/mig/remote"
	"github.com/vgpu-host/vgpu-host/virt"
	"github.com/vgpu-host/vgpu-host/virt/remote"
)

// Env is what a main gives the command tree: the parts its binary links beyond the light CLI,
// and the tree's ways to the host, which tests replace with their own. A nil field is the
// light vgpu-host's: the zero Env is cmd/vgpu-host's, and cmd/vgpu-host-agent's fills in what
// it adds (internal/agentcmd). The tree keeps no such seam in a package variable: every
// command finds its Env in the root command that runs it (envOf), so trees built with
// different Envs (tests, the agent's runs) never share one.
type Env struct {
	// Agent runs `vgpu-host agent`: the server, in vgpu-host-agent. Nil replaces the process
	// with vgpu-host-agent and the same arguments (execAgent): vgpu-host links no server.
	Agent func(ctx context.Context, cmd *cli.Command) error
	// FetchISO downloads an ISO a spec names by URL (lifecycle.Options.Fetch) in this process:
	// vgpu-host-agent links net/http. Nil runs vgpu-host-agent --fetch-iso (fetchViaAgent).
	FetchISO func(ctx context.Context, url, checksum, dest string, progress io.Writer) error
	// HostIO returns the Writer and ModuleLoader for root. Nil: the real sysfs and modprobe
	// (kernelHostIO); tests give hosttest's kernel emulator.
	HostIO func(root host.Root) (host.Writer, host.ModuleLoader)
	// OpenConn opens a libvirt connection to uri. Nil: libvirtd's socket, the helper or the
	// file-backed fake, by URI (dialLibvirt); tests give an in-memory virt.Fake.
	OpenConn func(uri string, o remote.OpenOptions) (virt.Conn, error)
	// MIGFor returns the MIG backend and planner for root and how to let them go. Nil: the NVML
	// helper when NVML describes root (nvmlMIG).
	MIGFor func(root host.Root) (mig.Backend, layout.MIGPlanner, func())
	// NVML is the environment the NVML helper is found and started with, and that says
	// whether NVML describes a fake --host-root (a mock or a replayed capture). The zero value
	// is this process's environment (VGPU_HOST_NVML_HELPER, VGPU_HOST_NVML_FACTS, ...); tests
	// give each tree its own helper and capture here, so that they run in parallel.
	NVML migremote.Env
}

// envKey holds the tree's *Env in its root command's Metadata.
const envKey = "vgpu-host-env"

// envOf returns the Env of the tree cmd belongs to (the light CLI's when the tree was built
// without one).
func envOf(cmd *cli.Command) *Env {
	if e, ok := cmd.Root().Metadata[envKey].(*Env); ok {
		return e
	}
	return &Env{}
}

// setEnv records env in the root app's Metadata, keeping whatever else is there.
func setEnv(app *cli.Command, env *Env) {
	if env == nil {
		env = &Env{}
	}
	if app.Metadata == nil {
		app.Metadata = map[string]any{}
	}
	app.Metadata[envKey] = env
}

// runAgent is the agent command's action: env's server, or vgpu-host-agent in this process's
// place.
func (e *Env) runAgent(ctx context.Context, cmd *cli.Command) error {
	if e.Agent != nil {
		return e.Agent(ctx, cmd)
	}
	return execAgent()
}

// fetchISO downloads url to dest as env says (FetchISO).
func (e *Env) fetchISO(ctx context.Context, url, checksum, dest string, progress io.Writer) error {
	if e.FetchISO != nil {
		return e.FetchISO(ctx, url, checksum, dest, progress)
	}
	return fetchViaAgent(ctx, url, checksum, dest, progress)
}

// hostIO returns the Writer and ModuleLoader for root (HostIO).
func (e *Env) hostIO(root host.Root) (host.Writer, host.ModuleLoader) {
	if e.HostIO != nil {
		return e.HostIO(root)
	}
	return kernelHostIO(root)
}

// openConn opens a libvirt connection to uri (OpenConn).
func (e *Env) openConn(uri string, o remote.OpenOptions) (virt.Conn, error) {
	if e.OpenConn != nil {
		return e.OpenConn(uri, o)
	}
	return dialLibvirt(uri, o)
}

// migFor returns the MIG backend and planner for root (MIGFor).
func (e *Env) migFor(root host.Root) (mig.Backend, layout.MIGPlanner, func()) {
	if e.MIGFor != nil {
		return e.MIGFor(root)
	}
	return nvmlMIG(e.NVML, root)
}
