package clitree

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/vgpu-host/vgpu-host/internal/testenv"
)

// TestMainBinaryHasNoNetHTTP: vgpu-host links neither net/http nor crypto/tls (nor the agent's
// server, metrics and drift watcher, nor the HTTP download): their package initialisation
// cost every command's start about a third of a bare Go binary's whole start (README,
// Benchmarks). The agent's client is agentapi's small HTTP/1.1 over the socket; the server and
// the download are in vgpu-host-agent (internal/agentcmd), which the same check shows links them,
// so it looks at the right thing. TestMainBinaryHasNoKubernetes guards the Kubernetes side.
func TestMainBinaryHasNoNetHTTP(t *testing.T) {
	t.Parallel()
	deps := func(pkg string) []string {
		t.Helper()
		out, err := exec.Command(testenv.GoTool(), "list", "-tags", "urfave_cli_no_template", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		return strings.Fields(string(out))
	}
	heavy := []string{"net/http", "crypto/tls", "github.com/vgpu-host/vgpu-host/agent", "github.com/vgpu-host/vgpu-host/internal/agentcmd",
		"github.com/vgpu-host/vgpu-host/agent/metrics", "github.com/vgpu-host/vgpu-host/agent/drift",
		"github.com/vgpu-host/vgpu-host/internal/fetch/httpget", "github.com/prometheus/client_golang/prometheus"}
	light, agent := deps("../../cmd/vgpu-host"), deps("../../cmd/vgpu-host-agent")
	for _, p := range heavy {
		if slices.Contains(light, p) {
			t.Errorf("vgpu-host links %s (go list -deps shows who imports it; move it into internal/agentcmd or a helper)", p)
		}
		if !slices.Contains(agent, p) {
			t.Errorf("vgpu-host-agent does not link %s: the check looks at the wrong binaries", p)
		}
	}
	if !slices.Contains(light, "github.com/vgpu-host/vgpu-host/agent/agentapi") {
		t.Error("vgpu-host does not link agentapi: the check looks at the wrong binary")
	}
}

var release struct {
	once      sync.Once
	dir, path string
	err       error
}

// releaseBinary builds bin/vgpu-host as `make build-static` does (CGO_ENABLED=0, -trimpath,
// -tags urfave_cli_no_template, the runtime defaults of cmd/vgpu-host/godebug.default; without
// the version's -ldflags), once for the test binary,
// for the tests that run the release binary itself (its initialisers, the crash hook it must
// not have, scripts/gpu-probe.sh): one link instead of one per test. TestMain removes it.
func releaseBinary(t *testing.T) string {
	t.Helper()
	release.once.Do(func() {
		release.dir, release.err = os.MkdirTemp("", "vgpu-host-release")
		if release.err != nil {
			return
		}
		release.path = filepath.Join(release.dir, "vgpu-host")
		godebug, err := os.ReadFile("../../cmd/vgpu-host/godebug.default")
		if err != nil {
			release.err = err
			return
		}
		build := exec.Command(testenv.GoTool(), "build", "-trimpath", "-tags", "urfave_cli_no_template",
			"-ldflags", "-X runtime.godebugDefault="+strings.TrimSpace(string(godebug)), "-o", release.path, "../../cmd/vgpu-host")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			release.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if release.err != nil {
		t.Fatalf("build the release vgpu-host: %v", release.err)
	}
	return release.path
}

// Budgets of TestLightBinaryInits: what the package initialisers of bin/vgpu-host (built as
// `make build` builds it) do at every start, as GODEBUG=inittrace=1 reports it for
// `vgpu-host --version` (Go 1.26: 58 packages with an initialiser, 174 allocations, all of
// them the standard library's and the libraries'; a hello world importing only the libraries
// vgpu-host links: 49 and 121). 449 allocations before yaml.v3's tables were built on first
// use (third_party/yaml.v3/VGPU-HOST.md): the budget catches go.mod's replace going missing.
// Raising one is a decision: say in the commit what the new initialiser buys (README,
// Benchmarks: on a machine where a page fault is dear, each initialiser's pages are most of
// what it costs).
const (
	maxInitPackages = 60
	maxInitAllocs   = 200
)

// TestLightBinaryInits: no package of this module, main included, has an initialiser in
// bin/vgpu-host (internal/lazy, a function or a switch instead; archtest's
// TestNoCompileAtInit names the usual causes in the source), and the others' stay within the
// budgets above. #32: package initialisers were vgpu-host's own share of every start, and
// each start is also most of the lab's bind and mdev rows. Costs a build of the binary
// (seconds with the build cache warm).
func TestLightBinaryInits(t *testing.T) {
	t.Parallel()
	bin := releaseBinary(t)
	run := exec.Command(bin, "--version")
	run.Env = append(os.Environ(), "GODEBUG=inittrace=1")
	var stderr strings.Builder
	run.Stderr = &stderr
	if err := run.Run(); err != nil {
		t.Fatalf("%s --version: %v\n%s", bin, err, stderr.String())
	}
	inits, err := parseInitTrace(stderr.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(inits) < 10 {
		t.Fatalf("inittrace reports %d initialisers: not the trace of a Go binary?\n%s", len(inits), stderr.String())
	}
	allocs := 0
	var list []string
	for _, in := range inits {
		allocs += in.allocs
		list = append(list, fmt.Sprintf("%s (%d allocs)", in.pkg, in.allocs))
		if in.pkg == "main" || strings.HasPrefix(in.pkg, "github.com/vgpu-host/vgpu-host/") {
			t.Errorf("%s has a package initialiser (%d allocations): go build -gcflags=-S ./PKG shows its lines under PKG.init; use internal/lazy, a function or a switch", in.pkg, in.allocs)
		}
	}
	if len(inits) > maxInitPackages || allocs > maxInitAllocs {
		t.Errorf("%d packages with an initialiser (budget %d), %d allocations (budget %d): a new import brought init work to every start:\n%s",
			len(inits), maxInitPackages, allocs, maxInitAllocs, strings.Join(list, "\n"))
	}
}

// initTrace is one line of GODEBUG=inittrace=1.
type initTrace struct {
	pkg    string
	allocs int
}

// parseInitTrace reads GODEBUG=inittrace=1's lines ("init PKG @T ms, C ms clock, B bytes, A
// allocs") from out; other lines are the program's.
func parseInitTrace(out string) ([]initTrace, error) {
	var inits []initTrace
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) != 11 || f[0] != "init" || f[10] != "allocs" {
			continue
		}
		n, err := strconv.Atoi(f[9])
		if err != nil {
			return nil, fmt.Errorf("inittrace line %q: %w", line, err)
		}
		inits = append(inits, initTrace{pkg: f[1], allocs: n})
	}
	return inits, nil
}

// TestParseInitTrace: the parser reads Go's inittrace lines and nothing else.
func TestParseInitTrace(t *testing.T) {
	t.Parallel()
	out := "init internal/bytealg @0.004 ms, 0.004 ms clock, 0 bytes, 0 allocs\n" +
		"init gopkg.in/yaml%2ev3 @1.2 ms, 0.80 ms clock, 25736 bytes, 276 allocs\n" +
		"vgpu-host version v commit c go1.26\n"
	got, err := parseInitTrace(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[1].pkg != "gopkg.in/yaml%2ev3" || got[1].allocs != 276 || got[0].allocs != 0 {
		t.Fatalf("parseInitTrace = %+v", got)
	}
}
