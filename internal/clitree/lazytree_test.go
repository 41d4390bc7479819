package clitree

import (
	"bytes"
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/internal/buildinfo"
)

// TestTopCommandNames: each name in topCommands is the name its constructor's command has.
func TestTopCommandNames(t *testing.T) {
	t.Parallel()
	for _, c := range topCommands() {
		if got := c.build().Name; got != c.name {
			t.Errorf("topCommands names %q for a command named %q", c.name, got)
		}
	}
}

// TestNewAppForSameAsWhole: main's tree (only the named commands built) answers every kind of
// command line (a command, --version, the root's help, a command's help, a mistyped command or
// flag, completion, no argument) byte for byte as the whole tree does.
func TestNewAppForSameAsWhole(t *testing.T) {
	t.Parallel()
	tr := fakeHost(t)
	for _, args := range [][]string{
		{"--version"},
		{"-v"},
		{"--help"},
		{},
		{"help"},
		{"--host-root", tr.Dir(), "-o", "json", "inspect"},
		{"--host-root", tr.Dir(), "check"},
		{"inspect", "--help"},
		{"mdev", "create", "-h"},
		{"inspekt"},
		{"inspect", "--bogus"},
		{"--bogus"},
		{"completion", "bash"},
		{"--generate-shell-completion"},
		{"version", "-o", "json"},
	} {
		var wout, werr, lout, lerr bytes.Buffer
		whole := newApp(testEnv())
		pruneUnnamed(whole, args)
		whole.Writer, whole.ErrWriter = &wout, &werr
		wcode := execute(whole, append([]string{"vgpu-host"}, args...), &werr)
		lazy := newAppFor(testEnv(), args)
		lazy.Writer, lazy.ErrWriter = &lout, &lerr
		lcode := execute(lazy, append([]string{"vgpu-host"}, args...), &lerr)
		if wcode != lcode || wout.String() != lout.String() || werr.String() != lerr.String() {
			t.Errorf("%q: whole tree exit %d\n%s%s\nmain's tree exit %d\n%s%s", args, wcode, wout.String(), werr.String(), lcode, lout.String(), lerr.String())
		}
	}
}

// TestOnlyVersionSameAsCLI: main answers `--version` and `-v` alone without the cli, with the
// very line the cli's version flag prints; any other command line goes to the cli.
func TestOnlyVersionSameAsCLI(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--version"}, {"-v"}} {
		if !onlyVersion(args) {
			t.Fatalf("onlyVersion(%q) = false", args)
		}
		var out, errOut bytes.Buffer
		app := newApp(testEnv())
		app.Writer, app.ErrWriter = &out, &errOut
		if code := execute(app, append([]string{"vgpu-host"}, args...), &errOut); code != 0 {
			t.Fatalf("%q: exit %d: %s", args, code, errOut.String())
		}
		if want := buildinfo.Get().Line(appName) + "\n"; out.String() != want {
			t.Errorf("%q: the cli prints %q, main's shortcut %q", args, out.String(), want)
		}
	}
	for _, args := range [][]string{{}, {"version"}, {"--version", "inspect"}, {"-o", "json", "--version"}, {"--help"}, {"-V"}} {
		if onlyVersion(args) {
			t.Errorf("onlyVersion(%q) = true", args)
		}
	}
}

var updateRootHelp = flag.Bool("update-root-help", false, "rewrite roothelp.txt from the command tree")

// TestRootHelpFile: the root's help main prints without the cli (roothelp.txt) is, byte for
// byte, what the cli renders from the whole tree for each command line that asks for it, with
// this build's version; and nothing else is answered from it.
func TestRootHelpFile(t *testing.T) {
	for _, args := range [][]string{{}, {"--help"}, {"-h"}, {"help"}} {
		if !onlyRootHelp(args) {
			t.Fatalf("onlyRootHelp(%q) = false", args)
		}
		var out, errOut bytes.Buffer
		app := newApp(testEnv())
		app.Writer, app.ErrWriter = &out, &errOut
		if code := execute(app, append([]string{"vgpu-host"}, args...), &errOut); code != 0 || errOut.Len() > 0 {
			t.Fatalf("%q: exit %d: %s", args, code, errOut.String())
		}
		v := "VERSION:\n   " + buildinfo.Version() + "\n"
		if !strings.Contains(out.String(), v) {
			t.Fatalf("%q: the cli's help has no %q:\n%s", args, v, out.String())
		}
		if *updateRootHelp {
			file := strings.Replace(out.String(), v, "VERSION:\n   "+versionMark+"\n", 1)
			if err := os.WriteFile("roothelp.txt", []byte(file), 0o644); err != nil {
				t.Fatal(err)
			}
			rootHelpFile = file
		}
		if got := rootHelp(); got != out.String() {
			t.Fatalf("%q: roothelp.txt is not the cli's help (run: go test ./cmd/vgpu-host -run TestRootHelpFile -update-root-help)\n--- roothelp.txt\n%s\n--- the cli\n%s", args, got, out.String())
		}
	}
	for _, args := range [][]string{{"inspect", "--help"}, {"help", "inspect"}, {"--help", "-o", "json"}, {"--version"}, {"h"}, {"-o", "json"}} {
		if onlyRootHelp(args) {
			t.Errorf("onlyRootHelp(%q) = true", args)
		}
	}
}
