package clitree

import (
	"context"
	"io"
	"log/slog"
	"os"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/agent/agentapi"
	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/mdev"
	"github.com/vgpu-host/vgpu-host/mig"
	migremote "github.com/vgpu-host/vgpu-host/mig/remote"
	"github.com/vgpu-host/vgpu-host/virt"
	"github.com/vgpu-host/vgpu-host/virt/remote"
)

// What vgpu-host-agent's own package (internal/agentcmd: the server, metrics, reconcile, drift
// watcher and the in-process download) uses of the tree, and no other package: the tree's
// rules for a command line, its host root, its libvirt and its exit codes stay here, once.

// Exit codes of the tree (README, Exit codes) that the agent's own code returns.
const (
	ExitUsage = exitUsage
)

// FetchISOFlag is the command line that makes vgpu-host-agent vgpu-host's downloader:
// `vgpu-host-agent --fetch-iso URL CHECKSUM DEST` (fetchISOFlag says why).
const FetchISOFlag = fetchISOFlag

// MIGCacheRefresh is how often the agent reads NVML again for the MIG state cache.
const MIGCacheRefresh = migCacheRefresh

// Execute runs argv (the program's name first) on the whole tree built with env, its output
// to stdout and stderr, and returns the exit code main would (tests of vgpu-host-agent).
func Execute(env Env, argv []string, stdout, stderr io.Writer) int {
	app := newApp(&env)
	app.Writer, app.ErrWriter = stdout, stderr
	return execute(app, argv, stderr)
}

// ExitCode is the exit code of err (README, Exit codes).
func ExitCode(err error) int { return exitCode(err) }

// UsageErr is a usage error (exit 2) whose message is format with a.
func UsageErr(format string, a ...any) error { return usageErr(format, a...) }

// FetchKinds are the error classes a download's error keeps on its way from
// vgpu-host-agent --fetch-iso back to vgpu-host (remote.ToWire, remote.FromWire).
func FetchKinds() []remote.ErrorKind { return fetchKinds() }

// RootOf returns the invocation's validated --host-root.
func RootOf(cmd *cli.Command) (host.Root, error) { return rootOf(cmd) }

// ConnURI returns the invocation's libvirt URI on root (--connect, or the default).
func ConnURI(cmd *cli.Command, root host.Root) (string, error) { return connURI(cmd, root) }

// IsTerminal reports whether f is a terminal (a character device).
func IsTerminal(f *os.File) bool { return isTerminal(f) }

// AgentSocket is the agent's default socket under root.
func AgentSocket(root host.Root) string { return agentSocketUnder(root) }

// Runner is the agent's Runner and Operator for the invocation cmd (the agent command): the
// tree with cmd's Env, in-process, on root and libvirt at uri, its host changes logged to log.
func Runner(cmd *cli.Command, root host.Root, uri string, log *slog.Logger) agentapi.Runner {
	return &cliRunner{root: root, uri: uri, log: log, env: envOf(cmd)}
}

// OpenConnWait opens the agent's long-lived libvirt connection to a URI as cmd's Env does, and
// returns once it is open or with why it could not be.
func OpenConnWait(cmd *cli.Command) func(uri string) (virt.Conn, error) {
	return envOf(cmd).openConnWait
}

// HostIO returns the Writer and ModuleLoader for root as cmd's Env gives them.
func HostIO(cmd *cli.Command, root host.Root) (host.Writer, host.ModuleLoader) {
	return envOf(cmd).hostIO(root)
}

// VGPUManager returns the invocation's mdev.Manager (dry run, allocation ledger, libvirt), the
// recorder of its writes, and what to call when done.
func VGPUManager(cmd *cli.Command) (*mdev.Manager, *host.Recorder, func(), error) {
	return vgpuManager(cmd)
}

// MIGOpener is the boot reconcile's way to NVML for root (reconcile.Reconciler.OpenMIG).
// NVML is found and started as this process's environment says.
func MIGOpener(root host.Root) func() (mig.Backend, func(), error) {
	return migOpener(migremote.Env{}, root)
}

// NVMLDescribes reports whether NVML, as this process's environment starts it, describes the
// host at root.
func NVMLDescribes(root host.Root) bool { return nvmlDescribes(migremote.Env{}, root) }

// RefreshMIGCache asks NVML for the MIG state through the helper as cmd's Env starts it (in the
// agent, its shared one) and saves it as root's MIG state cache.
func RefreshMIGCache(ctx context.Context, cmd *cli.Command, root host.Root) error {
	_, err := readMIGState(ctx, envOf(cmd).NVML, root)
	return err
}
