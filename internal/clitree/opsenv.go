package clitree

import (
	"context"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/layout"
	"github.com/vgpu-host/vgpu-host/lifecycle"
	"github.com/vgpu-host/vgpu-host/mdev"
	"github.com/vgpu-host/vgpu-host/mig"
	"github.com/vgpu-host/vgpu-host/ops"
	"github.com/vgpu-host/vgpu-host/virt"
)

// opsEnv is the operations' environment of the invocation cmd on root: its libvirt at uri
// (opened as openConnFor opens it), its host writer (hostIOFor), inspect's MIG reader, the
// ISO fetcher and the crash tests' hook. The agent builds its own (cliRunner.opsEnv).
func opsEnv(cmd *cli.Command, root host.Root, uri string) ops.Env {
	env := ops.Env{
		Root:     root,
		OpenConn: func() (virt.Conn, error) { return openConnFor(cmd, uri) },
		HostIO:   func() (host.Writer, host.ModuleLoader) { return hostIOFor(cmd, root) },
		// Warnings on stderr, and the steps too with table output, as the commands print them.
		Progress: func(e ops.Event) {
			o, _ := outputOf(cmd)
			printEvent(cmd.Root().ErrWriter, o, stderrIsTerminal(cmd), e)
		},
	}
	withHostParts(envOf(cmd), &env)
	return env
}

// withHostParts gives env what this binary adds to every operation, in the CLI and in the
// agent alike: inspect's MIG reader (NVML through vgpu-host-nvml, or the MIG state cache),
// host restore's way to NVML, the ISO fetcher of e and the crash tests' hook.
func withHostParts(e *Env, env *ops.Env) {
	root, nv := env.Root, e.NVML
	env.MIG = func(ctx context.Context, inv *host.Inventory, live bool) *ops.MIGInventory {
		return readMIGInventory(ctx, nv, root, inv, live)
	}
	env.GPUNames = func(inv *host.Inventory) map[string]string { return cachedGPUNames(nv, root, inv) }
	env.PlaceMIG = func(ctx context.Context, ps []mdev.Parent) *mig.State { return placeMIGState(ctx, nv, root, ps) }
	env.OpenMIG = migOpener(nv, root)
	env.LayoutMIG = func() (mig.Backend, layout.MIGPlanner, func()) { return e.migFor(root) }
	// mig show/plan/apply open NVML as host restore does: only where NVML describes the root
	// (migOpener), so a --host-root snapshot on a machine with NVIDIA GPUs never shows, or
	// changes, this machine's MIG under the snapshot's name.
	env.NVML = migOpener(nv, root)
	env.Lifecycle = func(o *lifecycle.Options) error {
		o.Fetch = e.fetchISO
		return crashHook(o)
	}
}
