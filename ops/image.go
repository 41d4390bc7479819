package ops

import (
	"context"

	"github.com/vgpu-host/vgpu-host/lifecycle"
)

// ExportRequest is `image export NAME --to FILE`: a shut-off VM's disk flattened into a
// standalone image, sealed if asked.
type ExportRequest struct {
	// VM is the builder VM's name.
	VM string `json:"vm"`
	// To is the image file to write (--to); FILE.partial until every step succeeded.
	To string `json:"to"`
	// Format is qcow2, raw or sparse (--format; lifecycle.FormatQcow2 by default).
	Format string `json:"format,omitempty"`
	// NoCompress, Seal, Force and DryRun are --no-compress, --seal, --force and --dry-run.
	NoCompress bool `json:"no_compress,omitempty"`
	Seal       bool `json:"seal,omitempty"`
	Force      bool `json:"force,omitempty"`
	DryRun     bool `json:"dry_run,omitempty"`
	// Progress asks for the helpers' progress (qemu-img -p, virt-sysprep's steps) as tick
	// events: the CLI asks when a person watches its table output on a terminal.
	Progress bool `json:"progress,omitempty"`
}

// Op is "image export".
func (ExportRequest) Op() string { return "image export" }

// Bool is the request's boolean setting by its flag's name.
func (r ExportRequest) Bool(name string) bool {
	switch name {
	case "no-compress":
		return r.NoCompress
	case "seal":
		return r.Seal
	case "force":
		return r.Force
	case "dry-run":
		return r.DryRun
	}
	return false
}

// IsSet reports whether the request sets the named setting.
func (r ExportRequest) IsSet(name string) bool {
	switch name {
	case "to":
		return r.To != ""
	case "format":
		return r.Format != "" && r.Format != lifecycle.FormatQcow2
	}
	return r.Bool(name)
}

// Check refuses a request without an image file (exit 2). The VM is looked up as named: none
// of that name is not in the ledger (exit 6).
func (r ExportRequest) Check() error {
	if r.To == "" {
		return Usagef("image export needs --to FILE: the image file to write")
	}
	return nil
}

// ExportResult is what image export wrote, or with a dry run the command lines it would run:
// its JSON is the command's --output json.
type ExportResult = lifecycle.ExportResult

// Export is image export: qemu-img flattens the VM's overlay and base into To (virt-sysprep
// seals the copy with Seal); with Progress, theirs (qemu-img -p, virt-sysprep's steps) comes
// as tick events, each line redrawn in place and ended by an empty one.
func Export(ctx context.Context, env Env, req ExportRequest) (*ExportResult, error) {
	if err := req.Check(); err != nil {
		return nil, err
	}
	format := req.Format
	if format == "" {
		format = lifecycle.FormatQcow2
	}
	conn, err := env.OpenConn()
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	lc := lifecycle.New(lifecycle.Options{Root: env.Root, Conn: conn})
	o := lifecycle.ExportOptions{Format: format, NoCompress: req.NoCompress, Seal: req.Seal, Force: req.Force, DryRun: req.DryRun}
	var tw *tickWriter
	if req.Progress && env.Progress != nil {
		tw = &tickWriter{env: env, op: "image export", subject: req.VM}
		o.Progress = tw
	}
	res, err := lc.Export(ctx, req.VM, req.To, o)
	if tw != nil {
		tw.flush()
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}

// tickWriter turns a helper's progress output into tick events: each piece ended by a carriage
// return (qemu-img -p redraws its line) or a newline is one tick, and a newline also sends the
// empty tick that moves a terminal to the next line.
type tickWriter struct {
	env         Env
	op, subject string
	buf         []byte
}

func (w *tickWriter) Write(p []byte) (int, error) {
	for _, b := range p {
		switch b {
		case '\r', '\n':
			w.flush()
			if b == '\n' {
				w.env.tick(w.op, w.subject, "")
			}
		default:
			w.buf = append(w.buf, b)
		}
	}
	return len(p), nil
}

// flush sends the piece written so far, if any.
func (w *tickWriter) flush() {
	if len(w.buf) > 0 {
		w.env.tick(w.op, w.subject, "%s", w.buf)
		w.buf = w.buf[:0]
	}
}
