package clitree

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/internal/buildinfo"
	"github.com/vgpu-host/vgpu-host/virt/remote"
)

// exitCodeDocs is the EXIT STATUS section of vgpu-host(1), in the order of the README's table.
var exitCodeDocs = []struct {
	code int
	text string
}{
	{exitOK, "success, including \"already in that state\""},
	{exitFailure, "the operation failed; the message names the device, the path and why; also --agent always when no agent answers"},
	{exitUsage, "bad command line or input: unknown flag or output format, malformed address or spec"},
	{exitNotReady, "check: nothing on this host can be given to a VM"},
	{exitRefused, "refused: by the agent, to a caller that is neither root nor in its group, or by a safety check (boot VGA, host-critical device in the group, a device vgpu-host did not bind, an mdev a domain uses); re-run with --force if you mean it"},
	{exitBusy, "busy: the device or resource is in use"},
	{exitNotFound, "not found: the named device, type, instance or VM does not exist"},
	{exitUnsupported, "not supported by this host or driver (no IOMMU, no SR-IOV, no mdev)"},
}

// manCommand writes the man pages: vgpu-host(1) and one vgpu-host-COMMAND(1) per visible
// command, from the same tree the binary runs, so they cannot drift from --help. `make
// install` and the Debian package run it; it is hidden from help.
func manCommand() *cli.Command {
	return &cli.Command{
		Name:      "__man",
		Hidden:    true,
		Usage:     "write the man pages generated from the command tree into DIR",
		ArgsUsage: "DIR",
		Action: func(_ context.Context, cmd *cli.Command) error {
			dir := cmd.Args().First()
			if dir == "" || cmd.Args().Len() != 1 {
				return usageErr("__man takes one argument, the directory to write the pages to")
			}
			// A fresh tree: main pruned the commands not named on this command line.
			pages := manPages(newApp(envOf(cmd)))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("man pages: %w", err)
			}
			for name, text := range pages {
				p := filepath.Join(dir, name)
				if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
					return fmt.Errorf("man pages: %w", err)
				}
			}
			return nil
		},
	}
}

// manPages returns file name -> roff text for the root and each visible top-level command.
func manPages(root *cli.Command) map[string]string {
	pages := map[string]string{}
	th := fmt.Sprintf(".TH %%s 1 \"\" \"vgpu-host %s\" \"vgpu-host manual\"\n", roffEscape(buildinfo.Version()))
	var b strings.Builder
	fmt.Fprintf(&b, th, "VGPU-HOST")
	fmt.Fprintf(&b, ".SH NAME\nvgpu-host \\- %s\n", roffEscape(root.Usage))
	b.WriteString(".SH SYNOPSIS\n.B vgpu-host\n[\\fIGLOBAL OPTIONS\\fR] \\fICOMMAND\\fR [\\fIOPTIONS\\fR] [\\fIARGUMENTS\\fR]\n")
	b.WriteString(".SH DESCRIPTION\n")
	b.WriteString(roffText("vgpu-host inspects a GPU host (IOMMU groups, GPUs, SR-IOV, mdev and vendor vGPU types), " +
		"prepares it (binds whole IOMMU groups to vfio-pci and restores them exactly, enables VFs, creates vGPU instances) " +
		"and attaches it (renders YAML VM specs to libvirt domain XML, defines and starts the guests). " +
		"Options may follow arguments. --dry-run prints the exact writes; -o json gives stable field names."))
	b.WriteString(".SH GLOBAL OPTIONS\n")
	writeFlags(&b, root.Flags)
	b.WriteString(".SH COMMANDS\n")
	var seeAlso []string
	for _, c := range root.VisibleCommands() {
		page := "vgpu-host-" + c.Name
		fmt.Fprintf(&b, ".TP\n.B %s\n%s See \\fB%s\\fR(1).\n", roffEscape(c.Name), roffEscape(sentence(c.Usage)), roffEscape(page))
		seeAlso = append(seeAlso, fmt.Sprintf(".BR %s (1)", roffEscape(page)))
		pages[page+".1"] = commandPage(th, c)
	}
	b.WriteString(".SH EXIT STATUS\n")
	for _, e := range exitCodeDocs {
		fmt.Fprintf(&b, ".TP\n.B %d\n%s\n", e.code, roffEscape(sentence(e.text)))
	}
	b.WriteString(".SH ENVIRONMENT\n")
	for _, f := range root.Flags {
		if d, ok := f.(cli.DocGenerationFlag); ok {
			for _, env := range d.GetEnvVars() {
				fmt.Fprintf(&b, ".TP\n.B %s\nthe default of \\fB%s\\fR.\n", roffEscape(env), roffEscape(flagName(f.Names()[0])))
			}
		}
	}
	fmt.Fprintf(&b, ".TP\n.B %s\npath of the libvirt helper %s (default: beside vgpu-host, then in PATH).\n",
		roffEscape(remote.EnvHelper), roffEscape(remote.HelperName))
	fmt.Fprintf(&b, ".TP\n.B %s\n0 sends qemu:///system through the libvirt helper too, instead of vgpu-host's own client of libvirtd's socket.\n",
		roffEscape(envDirect))
	b.WriteString(".SH FILES\n.TP\n.I /var/lib/vgpu-host\nthe allocation ledger and the original drivers of bound devices.\n")
	b.WriteString(".TP\n.I vgpu-host-restore.service\nre-creates persisted VFs, vendor vGPU types and mdev instances at boot, before libvirt's guests: " +
		"in /usr/lib/systemd/system from the Debian package, in PREFIX/lib/systemd/system from make install, " +
		"or in /etc/systemd/system from \\fBvgpu-host host install-unit\\fR (see \\fBvgpu-host-host\\fR(1)).\n")
	b.WriteString(".SH SEE ALSO\n" + strings.Join(seeAlso, ",\n") + ",\n.BR virsh (1),\n.BR lspci (8)\n")
	pages["vgpu-host.1"] = b.String()
	return pages
}

// commandPage is vgpu-host-NAME(1): the command, its options, and its subcommands in turn.
func commandPage(th string, c *cli.Command) string {
	var b strings.Builder
	fmt.Fprintf(&b, th, strings.ToUpper("vgpu-host-"+c.Name))
	fmt.Fprintf(&b, ".SH NAME\nvgpu-host-%s \\- %s\n", roffEscape(c.Name), roffEscape(c.Usage))
	b.WriteString(".SH SYNOPSIS\n")
	synopsis(&b, "vgpu-host "+c.Name, c)
	if c.Description != "" {
		b.WriteString(".SH DESCRIPTION\n" + roffText(c.Description))
	}
	if len(c.Flags) > 0 {
		b.WriteString(".SH OPTIONS\n")
		writeFlags(&b, c.Flags)
	}
	if subs := c.VisibleCommands(); len(subs) > 0 {
		b.WriteString(".SH COMMANDS\n")
		var walk func(prefix string, subs []*cli.Command)
		walk = func(prefix string, subs []*cli.Command) {
			for _, s := range subs {
				path := prefix + " " + s.Name
				fmt.Fprintf(&b, ".SS %s\n", roffEscape(path))
				synopsis(&b, path, s)
				b.WriteString(".PP\n" + roffText(sentence(s.Usage)))
				if s.Description != "" {
					b.WriteString(".PP\n" + roffText(s.Description))
				}
				if len(s.Flags) > 0 {
					b.WriteString(".PP\nOptions:\n")
					writeFlags(&b, s.Flags)
				}
				walk(path, s.VisibleCommands())
			}
		}
		walk("vgpu-host "+c.Name, subs)
	}
	b.WriteString(".SH SEE ALSO\n.BR vgpu-host (1)\n")
	return b.String()
}

// synopsis writes one synopsis line: the command path in bold, then its options and arguments.
func synopsis(b *strings.Builder, path string, c *cli.Command) {
	fmt.Fprintf(b, ".PP\n.B %s\n", roffEscape(path))
	var rest []string
	if len(c.Flags) > 0 {
		rest = append(rest, "[\\fIOPTIONS\\fR]")
	}
	if len(c.VisibleCommands()) > 0 {
		rest = append(rest, "\\fICOMMAND\\fR")
	}
	if c.ArgsUsage != "" {
		rest = append(rest, "\\fI"+roffEscape(c.ArgsUsage)+"\\fR")
	}
	if len(rest) > 0 {
		b.WriteString(strings.Join(rest, " ") + "\n")
	}
}

// writeFlags writes one tagged paragraph per visible flag: names, placeholder, usage, default
// and environment variable, as --help shows them.
func writeFlags(b *strings.Builder, flags []cli.Flag) {
	for _, f := range flags {
		if v, ok := f.(cli.VisibleFlag); ok && !v.IsVisible() {
			continue
		}
		d, ok := f.(cli.DocGenerationFlag)
		if !ok {
			continue
		}
		placeholder, usage := splitPlaceholder(d.GetUsage())
		if placeholder == "" && d.TakesValue() {
			placeholder = "value"
		}
		var names []string
		for _, n := range f.Names() {
			names = append(names, "\\fB"+roffEscape(flagName(n))+"\\fR")
		}
		tag := strings.Join(names, ", ")
		if d.TakesValue() {
			tag += " \\fI" + roffEscape(placeholder) + "\\fR"
		}
		var notes []string
		if r, ok := f.(cli.RequiredFlag); ok && r.IsRequired() {
			notes = append(notes, "required")
		}
		if def := d.GetDefaultText(); def == "" && d.TakesValue() && d.IsDefaultVisible() {
			if v := d.GetValue(); v != "" && v != `""` && v != "0" && v != "[]" {
				notes = append(notes, "default: "+strings.Trim(v, `"`))
			}
		} else if def != "" {
			notes = append(notes, "default: "+def)
		}
		if env := d.GetEnvVars(); len(env) > 0 {
			notes = append(notes, "environment: "+strings.Join(env, ", "))
		}
		if len(notes) > 0 {
			usage += " (" + strings.Join(notes, "; ") + ")"
		}
		fmt.Fprintf(b, ".TP\n%s\n%s\n", tag, roffEscape(sentence(usage)))
	}
}

// splitPlaceholder takes the `PLACEHOLDER` out of a flag's usage, as the cli's help does.
func splitPlaceholder(usage string) (placeholder, rest string) {
	i := strings.IndexByte(usage, '`')
	if i < 0 {
		return "", usage
	}
	j := strings.IndexByte(usage[i+1:], '`')
	if j < 0 {
		return "", usage
	}
	placeholder = usage[i+1 : i+1+j]
	return placeholder, usage[:i] + placeholder + usage[i+1+j+1:]
}

func flagName(n string) string {
	if len(n) == 1 {
		return "-" + n
	}
	return "--" + n
}

// sentence capitalises the first letter and ends the text with a full stop.
func sentence(s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return s
	}
	if c := s[0]; c >= 'a' && c <= 'z' {
		s = string(c-'a'+'A') + s[1:]
	}
	if !strings.HasSuffix(s, ".") {
		s += "."
	}
	return s
}

// roffText escapes free text line by line; roff fills the lines into paragraphs, and a blank
// line starts a new one.
func roffText(s string) string {
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			b.WriteString(".PP\n")
			continue
		}
		b.WriteString(roffEscape(line) + "\n")
	}
	return b.String()
}

// roffEscape makes s safe as roff text: backslashes and minus signs escaped, and a leading
// dot or quote (a request) neutralised.
func roffEscape(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	s = strings.ReplaceAll(s, "-", `\-`)
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	return s
}
