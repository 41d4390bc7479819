package clitree

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/lifecycle"
	"github.com/vgpu-host/vgpu-host/ops"
	"github.com/vgpu-host/vgpu-host/vfio"
	"github.com/vgpu-host/vgpu-host/virt"
	"github.com/vgpu-host/vgpu-host/virt/direct"
	"github.com/vgpu-host/vgpu-host/virt/remote"
)

// openConn connects to libvirt:
//   - qemu:///system (the URI nearly every host uses) through the pure-Go client of libvirtd's
//     socket (package virt/direct), which loads no libvirt library;
//   - any other URI, the agent's long-lived connection (its helper checks domains against
//     libvirt's schema compiled once), and whatever the pure-Go client cannot open (it then
//     says nothing: libvirt's own client names the cause) through the helper
//     vgpu-host-libvirt (package virt/remote), so that only the commands that talk to libvirt
//     load it. It does not wait for the helper to load libvirt and connect (remote.Start): the
//     command reads its spec and scans the host meanwhile, and its first libvirt call returns
//     the connection's error. The pure-Go client connects in the background too
//     (virt.OpenAsync);
//   - a vgpu-fake:///PATH URI opens the file-backed fake in-process (no libvirt at all).
//
// $VGPU_HOST_LIBVIRT_DIRECT=0 sends every URI through the helper. Tests give their own
// (Env.OpenConn).
func dialLibvirt(uri string, o remote.OpenOptions) (virt.Conn, error) {
	if virt.IsFileURI(uri) {
		return virt.OpenFile(uri)
	}
	if _, ok := direct.Socket(uri); ok && !o.LongLived && os.Getenv(envDirect) != "0" {
		return virt.OpenAsync(uri, func() (virt.Conn, error) {
			if c, err := direct.Open(uri); err == nil {
				return c, nil
			}
			return opened(remote.Start(uri, o))
		}), nil
	}
	return remote.Start(uri, o)
}

// envDirect, set to 0, turns the pure-Go libvirt client off (see openConn).
const envDirect = "VGPU_HOST_LIBVIRT_DIRECT"

// openConnWait opens the agent's long-lived connection (its helper checks domains against
// libvirt's schema compiled once) and returns once it is open, or with why it could not be:
// the agent reconnects on that error.
func (e *Env) openConnWait(uri string) (virt.Conn, error) {
	return opened(e.openConn(uri, remote.OpenOptions{LongLived: true}))
}

// opened returns c once it is connected (a connection remote.Start opens in the background),
// or closes it and returns why it could not be.
func opened(c virt.Conn, err error) (virt.Conn, error) {
	if err != nil {
		return nil, err
	}
	if o, ok := c.(interface{ Opened(context.Context) error }); ok {
		if err := o.Opened(context.Background()); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// connURI is the invocation's libvirt URI. Under a --host-root that is not this machine's
// root, the default (qemu:///system) would reach the real libvirtd with a fake host's devices,
// so the URI must then be given explicitly (--connect, VGPU_HOST_CONNECT or
// LIBVIRT_DEFAULT_URI).
func connURI(cmd *cli.Command, root host.Root) (string, error) {
	if !root.IsReal() && !cmd.IsSet("connect") {
		return "", usageErr("--host-root %s is not this machine's root: name the libvirt to use with --connect URI (test:///default, %s:///PATH/libvirt.json, or qemu:///system if you mean the real one)",
			root.Dir(), virt.FileScheme)
	}
	return cmd.String("connect"), nil
}

// forceFlag is apply's and plan's --force: the names of the safety checks to go past, each
// overriding its own refusal only.
func forceFlag() cli.Flag {
	return &cli.StringSliceFlag{Name: "force", Usage: "go past the named safety `CHECK`s only: " + strings.Join(vfio.ForceableChecks, ", ") + " (repeat, or comma-separate)"}
}

// virtTypeFlag is --virt-type of plan and apply; ops.CheckVirtType validates it.
func virtTypeFlag() cli.Flag {
	return &cli.StringFlag{Name: "virt-type", Usage: "domain type `kvm|qemu` (default: the best libvirt's domain capabilities offer)"}
}

func connectFlag() cli.Flag {
	return &cli.StringFlag{Name: "connect", Aliases: []string{"c"}, Value: virt.DefaultURI, Usage: "libvirt connection `URI`", Sources: cli.EnvVars("VGPU_HOST_CONNECT", "LIBVIRT_DEFAULT_URI")}
}

// isTerminal reports whether f is a character device (a terminal).
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func applyCommand() *cli.Command {
	return &cli.Command{
		Name:      "apply",
		Usage:     "allocate devices, prepare the host, create volumes and seed, define and start VMs (docs/apply.md)",
		ArgsUsage: "SPEC...",
		Description: "Makes each VM exist as its spec says. Devices are claimed in the ledger\n" +
			"(/var/lib/vgpu-host/ledger/ under --host-root) before the host changes; every step is\n" +
			"journalled before it is taken, so an interrupted apply is converged by the next apply or\n" +
			"destroy. Re-applying an unchanged spec changes nothing. Every safety check plan shows\n" +
			"refuses apply too; --force=CHECK goes past that check only. Exit codes: 0 applied,\n" +
			"1 failed (undone), 2 usage/spec, 4 refused by a safety check, 5 busy (devices held by\n" +
			"other VMs or processes), 6 not found, 7 unsupported.",
		Flags: []cli.Flag{
			connectFlag(),
			virtTypeFlag(),
			forceFlag(),
			&cli.BoolFlag{Name: "no-start", Usage: "define the domain but do not start it"},
			&cli.BoolFlag{Name: "wait-shutdown", Usage: "after starting, wait until the guest powers itself off (image builders)"},
			&cli.DurationFlag{Name: "timeout", Value: time.Hour, Usage: "give up waiting for --wait-shutdown after `DURATION`"},
		},
		Action: opAction("apply"),
	}
}

// applyRequest is apply's request: the specs loaded, --virt-type, --force, --no-start,
// --wait-shutdown and its --timeout (the operation checks the virt type and the forced checks,
// after the host root and --output, as apply always did).
func applyRequest(f flagValues) (ops.ApplyRequest, error) {
	specs, err := specsOf(f, "apply")
	if err != nil {
		return ops.ApplyRequest{}, err
	}
	return ops.ApplyRequest{Specs: specs, VirtType: f.String("virt-type"), Force: f.StringSlice("force"),
		NoStart: f.Bool("no-start"), WaitShutdown: f.Bool("wait-shutdown"), Timeout: f.Duration("timeout")}, nil
}

// renderApply prints a record for each VM applied; one that failed has none (its error goes
// to stderr).
func renderApply(o opOutput, results []*lifecycle.VMApplyResult) error {
	return o.emit(results, func(w io.Writer) error { return applyTable(w, results) })
}

func applyTable(w io.Writer, rs []*lifecycle.VMApplyResult) error {
	for _, r := range rs {
		what := "applied"
		if !r.Changed {
			what = "unchanged"
		}
		var devs []string
		for _, c := range r.Claims {
			devs = append(devs, string(c.Kind)+" "+c.ID)
		}
		if len(devs) == 0 {
			devs = []string{"no host devices"}
		}
		fmt.Fprintf(w, "%s: %s, %s (%s)\n", r.VM, what, r.State, strings.Join(devs, ", "))
		for _, f := range r.Fallback {
			fmt.Fprintf(w, "  FALLBACK %s\n", f)
		}
		if r.Replaced != nil {
			rel := []string{"no host devices"}
			if len(r.Replaced.Released) > 0 {
				rel = nil
				for _, c := range r.Replaced.Released {
					rel = append(rel, string(c.Kind)+" "+c.ID)
				}
			}
			fmt.Fprintf(w, "  its devices changed: destroyed and re-created it (released %s)\n", strings.Join(rel, ", "))
		}
		if len(r.Converged) > 0 {
			fmt.Fprintf(w, "  converged an interrupted run first: undid %s\n", strings.Join(r.Converged, "; "))
		}
		if r.RestartNeeded {
			fmt.Fprintf(w, "  the domain was redefined while running: restart it for the change to take effect\n")
		}
	}
	return nil
}
