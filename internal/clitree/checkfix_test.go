package clitree

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
)

// printedCommand matches a command `check` prints for the user to run: `vgpu-host ...`.
var printedCommand = regexp.MustCompile("`(vgpu-host [^`]*)`")

// checkCommands runs `check --output json` on root and returns every vgpu-host command its
// details and fixes print.
func checkCommands(t *testing.T, root string) []string {
	t.Helper()
	out, code := run(t, "--host-root", root, "check", "--output", "json")
	if code != exitOK && code != exitNotReady {
		t.Fatalf("check on %s: exit %d: %s", root, code, out)
	}
	var r host.Readiness
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("check --output json: %v\n%s", err, out)
	}
	var texts []string
	for _, c := range r.Checks {
		texts = append(texts, c.Detail, c.Fix)
	}
	for _, g := range r.GPUs {
		texts = append(texts, g.Detail, g.Fix)
	}
	var cmds []string
	for _, s := range texts {
		for _, m := range printedCommand.FindAllStringSubmatch(s, -1) {
			cmds = append(cmds, m[1])
		}
	}
	return cmds
}

// leafCommand walks newApp's command tree along args' leading words and returns the command
// they name, the flags in scope (the leaf's and every ancestor's) and the remaining arguments.
func leafCommand(t *testing.T, args []string) (*cli.Command, map[string]bool, []string) {
	t.Helper()
	cmd := newApp(testEnv())
	flags := map[string]bool{}
	addFlags := func(c *cli.Command) {
		for _, f := range c.Flags {
			for _, n := range f.Names() {
				flags[n] = true
			}
		}
	}
	addFlags(cmd)
	for len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		sub := cmd.Command(args[0])
		if sub == nil {
			break
		}
		cmd, args = sub, args[1:]
		addFlags(cmd)
	}
	return cmd, flags, args
}

// TestCheckFixesParse runs every command `check` prints (as a fix or in a detail) through the
// CLI's command tree, on fake hosts and on the real-kernel snapshots: the command and each
// flag must exist, and the command run with --dry-run on that host must not be a usage error
// (exit 2). A fix with a placeholder (`vf enable ADDR N`) fails here.
func TestCheckFixesParse(t *testing.T) {
	t.Parallel()
	hosts := map[string]func(t *testing.T) string{
		"fake datacenter host": func(t *testing.T) string { return fakeHost(t).Dir() },
		"fake vGPU host": func(t *testing.T) string {
			tr := hosttest.New(t)
			tr.A100Mdev(tr.DatacenterGPU("0000:40:01.0", "0000:41:00.0", "nvidia", 0))
			tr.NvidiaSRIOVGPU("0000:80:01.0", "0000:81:00.0", 1, 0, nil) // SR-IOV, no VFs yet
			tr.NvidiaSRIOVGPU("0000:90:01.0", "0000:91:00.0", 1, 2, nil)
			tr.IntelGVTg()
			tr.ConsumerGPU("0000:00:01.0", "0000:01:00.0", "nouveau")
			tr.GPUWithNIC("0000:00:0b.0", "0000:03:01.0", "0000:03:02.0")
			return tr.Dir()
		},
		"fake host without IOMMU": func(t *testing.T) string {
			tr := hosttest.New(t)
			tr.NoIOMMU()
			tr.SetCmdline("root=/dev/sda1")
			tr.ConsumerGPU("0000:00:01.0", "0000:01:00.0", "nouveau")
			return tr.Dir()
		},
		"generated small host": func(t *testing.T) string {
			tr := hosttest.New(t)
			tr.GenerateHost(hosttest.SmallHost)
			return tr.Dir()
		},
		"lab snapshot": func(t *testing.T) string {
			p := hosttest.RepoFile(t, "host/testdata/lab-snapshot.tar.gz")
			if p == "" {
				t.Fatal("host/testdata/lab-snapshot.tar.gz is missing: make lab-snapshot captures it")
			}
			return hosttest.Snapshot(t, p).Dir()
		},
		"shared real-kernel fixture": func(t *testing.T) string {
			return hosttest.Snapshot(t, hosttest.SharedFixture(t, "qemu-q35-iommu-6.1.tar.gz")).Dir()
		},
	}
	var (
		mu  sync.Mutex // the hosts' subtests run in parallel
		all []string
	)
	t.Run("hosts", func(t *testing.T) {
		for name, build := range hosts {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				checkHostCommands(t, name, build(t), func(line string) {
					mu.Lock()
					defer mu.Unlock()
					all = append(all, line)
				})
			})
		}
	})
	// The test must have judged something: the vGPU host prints `vf enable` for the PF
	// without VFs and `bind` for groups not on vfio-pci yet.
	for _, want := range []string{"vgpu-host vf enable 0000:81:00.0 --count", "vgpu-host bind "} {
		if !slices.ContainsFunc(all, func(c string) bool { return strings.HasPrefix(c, want) }) {
			t.Errorf("no printed command starts with %q; printed: %q", want, all)
		}
	}
}

// checkHostCommands checks the commands check prints on the host under root (name in errors):
// each is a command of the tree that runs, with flags it has, and one with --dry-run parses
// there. found is given each command printed.
func checkHostCommands(t *testing.T, name, root string, found func(line string)) {
	t.Helper()
	for _, line := range checkCommands(t, root) {
		found(line)
		args := strings.Fields(line)[1:]
		leaf, flags, rest := leafCommand(t, args)
		if leaf.Action == nil {
			t.Errorf("%q: %q is not a command that runs", line, leaf.Name)
			continue
		}
		for _, a := range rest {
			if f, ok := strings.CutPrefix(a, "--"); ok && !flags[strings.SplitN(f, "=", 2)[0]] {
				t.Errorf("%q: %s has no flag --%s", line, leaf.FullName(), f)
			}
		}
		if !flags["dry-run"] {
			continue // parsed as far as the tree tells without running it
		}
		full := append([]string{"--host-root", root}, args...)
		out, code := run(t, append(full, "--dry-run")...)
		if code == exitUsage {
			t.Errorf("%q --dry-run on %s: exit %d (usage): %s", line, name, code, out)
		}
	}
}
