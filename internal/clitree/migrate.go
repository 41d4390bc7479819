package clitree

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os/exec"
	"slices"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/lifecycle"
)

func migrateCommand() *cli.Command {
	return &cli.Command{
		Name:      "migrate",
		Usage:     "move a running VM live to another host run by vgpu-host, with an equivalent vGPU there (docs/migrate.md)",
		ArgsUsage: "VM",
		Description: "The target's vgpu-host (`vgpu-host migrate-target`, over ssh for qemu+ssh:// URIs) reserves and\n" +
			"prepares a device of the same mdev or vendor vGPU type; the domain XML is rewritten for it;\n" +
			"libvirt migrates the VM live (persistent there, undefined here); then the target records it\n" +
			"and this host releases its devices. A failure leaves the VM running here, both ledgers as\n" +
			"they were. Refused before anything changes: passthrough (vfio-pci has no VFIO migration),\n" +
			"mdev drivers without migration (mbochs, mdpy, i915), virgl 3D, host disks without\n" +
			"--copy-storage or --shared-storage. --dry-run prints both hosts' steps.\n" +
			"Exit codes: 0 migrated, 1 failed (the message says where the VM runs), 2 bad input,\n" +
			"4 refused, 5 busy (no free equivalent device on the target), 6 not in the ledger,\n" +
			"7 cannot migrate (driver, virgl).",
		Flags: append([]cli.Flag{connectFlag()}, append(migrateFlags(true),
			&cli.BoolFlag{Name: "dry-run", Usage: "print both hosts' steps (the target's from its own plan); change nothing"},
			resetFlag(),
		)...),
		Action: runMigrate,
	}
}

// migrateFlags are the flags that say where and how a VM migrates (migrate, plan --migrate).
func migrateFlags(toRequired bool) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "to", Usage: "the target's libvirt `URI` as this host's libvirtd reaches it (qemu+ssh://HOST/system)", Required: toRequired},
		&cli.StringFlag{Name: "target-cmd", Usage: "how to run vgpu-host on the target: `WORDS` split on spaces, no shell (default for qemu+ssh URIs: ssh [-p PORT] [USER@]HOST vgpu-host); not through the agent"},
		&cli.StringFlag{Name: "migrate-uri", Usage: "where QEMU's migration stream goes (`tcp://ADDR[:PORT]`); default: the target's host name"},
		&cli.BoolFlag{Name: "copy-storage", Usage: "copy the VM's disks to the target while it runs (libvirt's copy-storage-all)"},
		&cli.BoolFlag{Name: "shared-storage", Usage: "the VM's disks are on storage both hosts see at the same paths: do not copy them"},
	}
}

func migrateTargetCommand() *cli.Command {
	return &cli.Command{
		Name:  "migrate-target",
		Usage: "the target's end of `vgpu-host migrate`: plan, prepare, commit or abort an incoming VM (docs/migrate.md)",
		Description: "Run by `vgpu-host migrate` on the source host, not by hand except to finish a migration whose\n" +
			"source died: --request is one JSON object {\"op\": \"plan\"|\"prepare\"|\"commit\"|\"abort\", \"vm\": NAME,\n" +
			"\"devices\": [...]}, decoded strictly; the answer is JSON on stdout whatever --output says.\n" +
			"`vgpu-host migrate-target commit VM` and `abort VM` are the same as such a request.",
		ArgsUsage: "[commit|abort VM]",
		Flags: []cli.Flag{
			connectFlag(),
			&cli.StringFlag{Name: "request", Usage: "the request, one JSON `OBJECT`"},
		},
		Action: runMigrateTarget,
	}
}

// decodeIncoming decodes a migration request strictly: unknown fields and trailing data are
// refused, and the typed request is checked.
func decodeIncoming(s string) (lifecycle.IncomingRequest, error) {
	var req lifecycle.IncomingRequest
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, fmt.Errorf("migration request: %w: %w", err, host.ErrInvalid)
	}
	if dec.More() {
		return req, fmt.Errorf("migration request: data after the JSON object: %w", host.ErrInvalid)
	}
	return req, req.Check()
}

func runMigrateTarget(ctx context.Context, cmd *cli.Command) error {
	var req lifecycle.IncomingRequest
	switch {
	case cmd.IsSet("request") && cmd.Args().Len() == 0:
		r, err := decodeIncoming(cmd.String("request"))
		if err != nil {
			return err
		}
		req = r
	case !cmd.IsSet("request") && cmd.Args().Len() == 2 && (cmd.Args().Get(0) == "commit" || cmd.Args().Get(0) == "abort"):
		req = lifecycle.IncomingRequest{Op: lifecycle.IncomingOp(cmd.Args().Get(0)), VM: cmd.Args().Get(1)}
		if err := req.Check(); err != nil {
			return err
		}
	default:
		return usageErr("migrate-target takes --request JSON, or commit VM, or abort VM")
	}
	lc, conn, err := lifecycleOf(cmd)
	if err != nil {
		return err
	}
	defer conn.Close()
	rep, err := lc.Incoming(ctx, req)
	if err != nil {
		return err
	}
	b, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(cmd.Root().Writer, "%s\n", b)
	return err
}

// execTarget is the target's vgpu-host run as a command: each request is one run of
// `WORDS... migrate-target --request JSON`, the answer its stdout. The target's exit code
// gives its error back its class (busy, not found, unsupported, refused, invalid).
type execTarget struct {
	words []string
	// ssh: the last word runs in the remote shell, so the request is quoted for it.
	ssh    bool
	stderr io.Writer
}

func (t *execTarget) Incoming(ctx context.Context, req lifecycle.IncomingRequest) (*lifecycle.IncomingReply, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	args := append(append([]string(nil), t.words[1:]...), "migrate-target", "--request", string(b))
	if t.ssh {
		args[len(args)-1] = shellWord(string(b))
	}
	c := exec.CommandContext(ctx, t.words[0], args...)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	if err := c.Run(); err != nil {
		return nil, t.failed(err, errb.String())
	}
	_, _ = t.stderr.Write(errb.Bytes()) // the target's progress lines
	var rep lifecycle.IncomingReply
	dec := json.NewDecoder(&out)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		return nil, fmt.Errorf("the target's answer (%s): %w", strings.Join(t.words, " "), err)
	}
	if rep.VM != req.VM {
		return nil, fmt.Errorf("the target answered for VM %q, not %q", rep.VM, req.VM)
	}
	return &rep, nil
}

// failed is the error of a failed run: the last line the target printed, with the class its
// exit code gives it.
func (t *execTarget) failed(runErr error, stderr string) error {
	msg := strings.TrimSpace(stderr)
	if i := strings.LastIndex(msg, "\n"); i >= 0 {
		msg = msg[i+1:]
	}
	msg = strings.TrimPrefix(msg, "vgpu-host: ")
	if msg == "" {
		msg = runErr.Error()
	}
	how := strings.Join(t.words, " ")
	var ee *exec.ExitError
	if errors.As(runErr, &ee) {
		if s := sentinelOf(ee.ExitCode()); s != nil {
			return fmt.Errorf("%s (target: %s): %w", strings.TrimSuffix(msg, ": "+s.Error()), how, s)
		}
	}
	return fmt.Errorf("%s (target: %s): %s", msg, how, runErr)
}

// sentinelOf is the error class of a documented exit code.
func sentinelOf(code int) error {
	switch code {
	case exitUsage:
		return host.ErrInvalid
	case exitRefused:
		return host.ErrRefused
	case exitBusy:
		return host.ErrBusy
	case exitNotFound:
		return host.ErrNotFound
	case exitUnsupported:
		return host.ErrUnsupported
	}
	return nil
}

// shellWord quotes s for a POSIX shell (ssh runs its command line in the remote user's shell).
func shellWord(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// targetOf is how to reach the target's vgpu-host: --target-cmd, else ssh to the host of a
// qemu+ssh URI.
func targetOf(cmd *cli.Command, uri string) (*execTarget, error) {
	errw := cmd.Root().ErrWriter
	if cmd.IsSet("target-cmd") {
		if runEnvOf(cmd) != nil {
			return nil, usageErr("--target-cmd: the agent runs no command a caller names; it reaches the target from --to (qemu+ssh://HOST/...)")
		}
		w := strings.Fields(cmd.String("target-cmd"))
		if len(w) == 0 {
			return nil, usageErr("--target-cmd is empty")
		}
		return &execTarget{words: w, ssh: w[0] == "ssh", stderr: errw}, nil
	}
	u, err := url.Parse(uri)
	if err != nil {
		return nil, usageErr("--to %q: %v", uri, err)
	}
	if w := sshWords(u); w != nil {
		return &execTarget{words: w, ssh: true, stderr: errw}, nil
	}
	if strings.HasSuffix(u.Scheme, "+ssh") {
		return nil, usageErr("--to %q: no host to reach", uri)
	}
	// A local URI is a second libvirtd on this machine: its vgpu-host has a root and ledger of
	// its own, which only the caller knows how to name.
	return nil, usageErr("--to %q: vgpu-host reaches the target's vgpu-host over ssh for qemu+ssh:// URIs; for this one say how with --target-cmd", uri)
}

func runMigrate(ctx context.Context, cmd *cli.Command) error {
	if cmd.Args().Len() != 1 {
		return usageErr("migrate takes one VM name")
	}
	return migrateVM(ctx, cmd, cmd.Args().First(), cmd.Bool("dry-run"))
}

// migrateVM migrates VM arg to --to (only its plan on both hosts with dryRun): migrate, and
// plan --migrate.
func migrateVM(ctx context.Context, cmd *cli.Command, arg string, dryRun bool) error {
	name, err := vmName(arg)
	if err != nil {
		return err
	}
	if cmd.Bool("copy-storage") && cmd.Bool("shared-storage") {
		return usageErr("--copy-storage and --shared-storage: choose one")
	}
	if mu := cmd.String("migrate-uri"); mu != "" {
		if u, err := url.Parse(mu); err != nil || u.Scheme != "tcp" || u.Host == "" {
			return usageErr("--migrate-uri %q: want tcp://ADDR[:PORT]", mu)
		}
	}
	to := cmd.String("to")
	tg, err := targetOf(cmd, to)
	if err != nil {
		return err
	}
	lc, conn, err := lifecycleOf(cmd)
	if err != nil {
		return err
	}
	defer conn.Close()
	res, err := lc.Migrate(ctx, name, lifecycle.MigrateOptions{Target: tg, DestURI: to, MigrateURI: cmd.String("migrate-uri"),
		CopyStorage: cmd.Bool("copy-storage"), SharedStorage: cmd.Bool("shared-storage"), DryRun: dryRun})
	migrated := res != nil && !res.DryRun && slices.ContainsFunc(res.SourceSteps, func(s string) bool { return strings.HasPrefix(s, "migrate domain ") })
	if err != nil && !migrated {
		return err // the VM is where it was: nothing on stdout
	}
	if root, rerr := rootOf(cmd); rerr == nil && len(res.Released) > 0 {
		w, _ := hostIOFor(cmd, root)
		handBack(ctx, cmd, root, w, releasedBy(&lifecycle.DestroyResult{VM: name, Released: res.Released}), "migrate "+name)
	}
	if eerr := emit(cmd, res, func(w io.Writer) error { return migrateTable(w, res) }); eerr != nil {
		return eerr
	}
	return err
}

func migrateTable(w io.Writer, r *lifecycle.MigrateResult) error {
	if r.DryRun {
		fmt.Fprintf(w, "# dry run: migrate %s from %s to %s (nothing was changed)\n", r.VM, r.From, r.To)
	} else {
		fmt.Fprintf(w, "%s: migrated from %s to %s\n", r.VM, r.From, r.To)
	}
	for _, d := range r.Devices {
		fmt.Fprintf(w, "device  %s %s (%s) -> %s\n", d.Kind, d.Source, d.Type, d.Target)
	}
	fmt.Fprintln(w, "this host (source):")
	for _, s := range r.SourceSteps {
		fmt.Fprintf(w, "  %s\n", s)
	}
	fmt.Fprintln(w, "target:")
	for _, s := range r.TargetSteps {
		fmt.Fprintf(w, "  %s\n", s)
	}
	if len(r.Kept) > 0 {
		fmt.Fprintf(w, "kept here (the target may use them): %s\n", strings.Join(r.Kept, ", "))
	}
	return nil
}

// sshWords is the command that runs vgpu-host on the host of a qemu+ssh URI:
// ssh [-p PORT] -- [USER@]HOST vgpu-host; nil for another URI or one without a usable host.
func sshWords(u *url.URL) []string {
	if !strings.HasSuffix(u.Scheme, "+ssh") || u.Hostname() == "" || strings.HasPrefix(u.Hostname(), "-") {
		return nil
	}
	w := []string{"ssh"}
	if p := u.Port(); p != "" {
		w = append(w, "-p", p)
	}
	dest := u.Hostname()
	if u.User != nil && u.User.Username() != "" {
		dest = u.User.Username() + "@" + dest
	}
	return append(w, "--", dest, "vgpu-host")
}
