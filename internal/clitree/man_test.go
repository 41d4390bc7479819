package clitree

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/mdev"
)

// TestPruneKeepsBehaviour: the help (and so the flags and subcommands) of every command and
// subcommand is the same whether main pruned the tree for that command line or not.
func TestPruneKeepsBehaviour(t *testing.T) {
	t.Parallel()
	run := func(prune bool, args ...string) string {
		var out bytes.Buffer
		app := newApp(testEnv())
		app.Writer, app.ErrWriter = &out, &out
		if prune {
			pruneUnnamed(app, args)
		}
		if err := app.Run(context.Background(), append([]string{"vgpu-host"}, args...)); err != nil {
			fmt.Fprintf(&out, "error: %v (exit %d)\n", err, exitCode(err))
		}
		return out.String()
	}
	var lines [][]string
	for _, c := range newApp(testEnv()).Commands {
		lines = append(lines, []string{c.Name, "--help"})
		for _, s := range c.Commands {
			lines = append(lines, []string{c.Name, s.Name, "--help"})
		}
	}
	lines = append(lines, []string{"--help"}, []string{"help", "mdev"}, []string{"mdev", "--generate-shell-completion"},
		[]string{"--generate-shell-completion"}, []string{"nosuchcommand"},
		// Below a named command its unnamed subcommands are pruned too: its own help, its help
		// command, a mistyped subcommand, a subcommand's usage error and completion.
		[]string{"mdev"}, []string{"mdev", "help"}, []string{"mdev", "help", "create"}, []string{"mdev", "craete"},
		[]string{"mdev", "create"}, []string{"mdev", "create", "--generate-shell-completion"},
		[]string{"host", "--help"}, []string{"mig"}, []string{"vf", "list", "--help"}, []string{"host", "layout", "--help"})
	for _, args := range lines {
		whole, pruned := run(false, args...), run(true, args...)
		if whole != pruned {
			t.Errorf("%q: pruned tree answers differently:\n--- whole\n%s\n--- pruned\n%s", args, whole, pruned)
		}
		if whole == "" && args[0] != "--generate-shell-completion" { // the root's completion goes to os.Stdout
			t.Errorf("%q: no output", args)
		}
	}
	app := newApp(testEnv())
	pruneUnnamed(app, []string{"-o", "json", "inspect"})
	for _, c := range app.Commands {
		if c.Name != "inspect" && (len(c.Commands) > 0 || len(c.Flags) > 0) {
			t.Errorf("%s was not pruned for `inspect`", c.Name)
		}
	}
	app = newApp(testEnv())
	pruneUnnamed(app, []string{"mdev", "create", "--count", "2"})
	for _, c := range app.Commands {
		if c.Name != "mdev" {
			continue
		}
		for _, s := range c.Commands {
			if whole := s.Name == "create"; whole != (len(s.Flags) > 0) {
				t.Errorf("mdev %s for `mdev create`: %d flags left", s.Name, len(s.Flags))
			}
		}
	}
}

// TestManPages: a page per visible command, each naming its subcommands and flags, and groff
// finds nothing to warn about.
func TestManPages(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, errOut, code := runSplit(t, "__man", dir); code != 0 {
		t.Fatalf("__man: exit %d: %s", code, errOut)
	}
	app := newApp(testEnv())
	want := map[string]bool{"vgpu-host.1": true}
	for _, c := range app.VisibleCommands() {
		want["vgpu-host-"+c.Name+".1"] = true
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != len(want) {
		t.Errorf("%d pages, want %d: %v", len(ents), len(want), want)
	}
	for name := range want {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(string(b), ".TH ") {
			t.Errorf("%s: no .TH", name)
		}
	}
	mdevPage, _ := os.ReadFile(filepath.Join(dir, "vgpu-host-mdev.1"))
	for _, s := range []string{`.SS vgpu\-host mdev create`, `\fB\-\-parent\fR, \fB\-p\fR \fIDEVICE\fR`} {
		if !strings.Contains(string(mdevPage), s) {
			t.Errorf("vgpu-host-mdev.1 lacks %q", s)
		}
	}
	if _, err := exec.LookPath("groff"); err != nil {
		t.Log("groff not installed: pages not formatted")
		return
	}
	for name := range want {
		cmd := exec.Command("groff", "-ww", "-z", "-man", filepath.Join(dir, name))
		if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
			t.Errorf("groff -ww %s: %v\n%s", name, err, out)
		}
	}
}

// TestShippedUnitIsInstallUnits: deploy/systemd/vgpu-host-restore.service, which make install
// and the Debian package ship, is exactly what `host install-unit` writes for /usr/bin/vgpu-host.
func TestShippedUnitIsInstallUnits(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "systemd", mdev.UnitName))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), mdev.SystemdUnit("/usr/bin/vgpu-host"); got != want {
		t.Errorf("deploy/systemd/%s differs from mdev.SystemdUnit:\n--- shipped\n%s\n--- install-unit\n%s", mdev.UnitName, got, want)
	}
}

// BenchmarkStartVersion is main's work for `vgpu-host --version` after the package
// initialisers: build the tree, prune it, run. bench/start.sh measures the whole process.
func BenchmarkStartVersion(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		app := newApp(testEnv())
		app.Writer = io.Discard
		args := []string{"vgpu-host", "--version"}
		pruneUnnamed(app, args[1:])
		if err := app.Run(context.Background(), args); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNewApp is the cost of building the whole command tree.
func BenchmarkNewApp(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = newApp(testEnv())
	}
}
