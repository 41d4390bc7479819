package clitree

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/lifecycle"
	"github.com/vgpu-host/vgpu-host/ops"
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
		Action: opAction("migrate"),
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
		Action: opAction("migrate-target"),
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

// migrateTargetRequest is migrate-target's request: --request JSON (decoded strictly), or
// the operands commit VM or abort VM.
func migrateTargetRequest(f flagValues) (ops.MigrateTargetRequest, error) {
	args := f.Operands()
	switch {
	case f.IsSet("request") && len(args) == 0:
		r, err := decodeIncoming(f.String("request"))
		return ops.MigrateTargetRequest{Incoming: r}, err
	case !f.IsSet("request") && len(args) == 2 && (args[0] == "commit" || args[0] == "abort"):
		req := ops.MigrateTargetRequest{Incoming: lifecycle.IncomingRequest{Op: lifecycle.IncomingOp(args[0]), VM: args[1]}}
		return req, req.Check()
	}
	return ops.MigrateTargetRequest{}, usageErr("migrate-target takes --request JSON, or commit VM, or abort VM")
}

// renderMigrateTarget prints the target's answer as one line of JSON whatever --output says:
// the source decodes it (execTarget).
func renderMigrateTarget(o opOutput, rep *ops.MigrateTargetResult) error {
	b, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(o.w, "%s\n", b)
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

// migrateRequest is migrate's request: its one operand, the VM (or a spec file naming it),
// and the flags migrateRequestFor reads.
func migrateRequest(f flagValues) (ops.MigrateRequest, error) {
	if len(f.Operands()) != 1 {
		return ops.MigrateRequest{}, usageErr("migrate takes one VM name")
	}
	return migrateRequestFor(f, f.Operands()[0], f.Bool("dry-run"))
}

// migrateRequestFor is the request that migrates VM arg (only its plan on both hosts with
// dryRun): --to, --target-cmd (words, no shell), --migrate-uri, --copy-storage,
// --shared-storage and --reset. migrate and plan --migrate build it.
func migrateRequestFor(f flagValues, arg string, dryRun bool) (ops.MigrateRequest, error) {
	name, err := vmName(arg)
	if err != nil {
		return ops.MigrateRequest{}, err
	}
	req := ops.MigrateRequest{VM: name, To: f.String("to"), MigrateURI: f.String("migrate-uri"), CopyStorage: f.Bool("copy-storage"),
		SharedStorage: f.Bool("shared-storage"), DryRun: dryRun, Reset: f.Bool("reset")}
	if err := req.Check(); err != nil {
		return req, err
	}
	if f.IsSet("target-cmd") {
		if req.TargetCmd = strings.Fields(f.String("target-cmd")); len(req.TargetCmd) == 0 {
			return req, usageErr("--target-cmd is empty")
		}
	}
	return req, nil
}

// vetMigrate checks a migration's request before the root, as migrate always did: the agent
// runs no command a caller names (--target-cmd), and the target can be reached.
func vetMigrate(req ops.Request, site opSite) error {
	var r ops.MigrateRequest
	switch q := req.(type) {
	case ops.MigrateRequest:
		r = q
	case planMigrateRequest:
		r = q.MigrateRequest
	}
	if len(r.TargetCmd) > 0 && !site.oneShot() {
		return usageErr("--target-cmd: the agent runs no command a caller names; it reaches the target from --to (qemu+ssh://HOST/...)")
	}
	_, _, err := ops.MigrationTarget(r.To, r.TargetCmd)
	return err
}

// renderMigrate prints migrate's result in output format output.
func renderMigrate(w io.Writer, output string, res *ops.MigrateResult) error {
	return emitTo(w, output, res, func(w io.Writer) error { return migrateTable(w, res) })
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
