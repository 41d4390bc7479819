package clitree

import (
	"bytes"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
	migremote "github.com/vgpu-host/vgpu-host/mig/remote"
	"github.com/vgpu-host/vgpu-host/virt"
	"github.com/vgpu-host/vgpu-host/virt/remote"
)

// testWorld is what the tests put in place of the host for the trees they build (testEnv):
// the kernel emulator of a fake root (withKernel), by the root's directory, and an in-memory
// libvirt (fakeLibvirt), by its URI. Both keys are the test's own (a temporary directory, a
// fake's unique URI), and each test removes its entries when it ends.
var testWorld struct {
	mu      sync.Mutex
	kernels map[string]*hosttest.Kernel
	conns   map[string]virt.Conn
	nvml    map[string]map[string]string // test name → its NVML helper's variables (setNVML)
}

// testEnv is the Env the tests build their trees with: sysfs writes under a root withKernel
// registered go to its emulator, connections to a URI a test registered get its fake; the rest
// is the light CLI's.
func testEnv() *Env {
	return &Env{
		HostIO: func(root host.Root) (host.Writer, host.ModuleLoader) {
			testWorld.mu.Lock()
			k, ok := testWorld.kernels[root.Dir()]
			testWorld.mu.Unlock()
			if ok {
				return k, k
			}
			return kernelHostIO(root)
		},
		OpenConn: func(uri string, o remote.OpenOptions) (virt.Conn, error) {
			testWorld.mu.Lock()
			c, ok := testWorld.conns[uri]
			testWorld.mu.Unlock()
			if ok {
				return c, nil
			}
			return dialLibvirt(uri, o)
		},
	}
}

// testEnvOf is testEnv with t's NVML helper (setNVML) in Env.NVML: the Env of the trees the
// CLI helpers (run, runErr, runSplit, ...) build for t.
func testEnvOf(t *testing.T) *Env {
	e := testEnv()
	e.NVML = nvmlOf(t)
	return e
}

// setNVML sets t's NVML helper variable name (migremote.EnvVars) to value for the trees t and
// its subtests build from then on (testEnvOf): the helper's path, the capture it replays, the
// mock it serves, as t.Setenv did when these tests ran one at a time. The first call gives t
// all of them, empty (unset) unless set, whatever this process's environment holds.
func setNVML(t *testing.T, name, value string) {
	t.Helper()
	if !slices.Contains(migremote.EnvVars, name) {
		t.Fatalf("setNVML: %s is not an NVML helper variable", name)
	}
	testWorld.mu.Lock()
	defer testWorld.mu.Unlock()
	if testWorld.nvml == nil {
		testWorld.nvml = map[string]map[string]string{}
	}
	vars, ok := testWorld.nvml[t.Name()]
	if !ok {
		vars = map[string]string{}
		for _, v := range migremote.EnvVars {
			vars[v] = ""
		}
		t.Cleanup(func() {
			testWorld.mu.Lock()
			defer testWorld.mu.Unlock()
			delete(testWorld.nvml, t.Name())
		})
	}
	// A new map each time: trees built before keep what they were given.
	vars = maps.Clone(vars)
	vars[name] = value
	testWorld.nvml[t.Name()] = vars
}

// nvmlOf is the NVML helper environment of t: its own (setNVML) or its nearest parent's, else
// this process's.
func nvmlOf(t *testing.T) migremote.Env {
	testWorld.mu.Lock()
	defer testWorld.mu.Unlock()
	for name := t.Name(); ; {
		if vars, ok := testWorld.nvml[name]; ok {
			return migremote.Env{Vars: vars}
		}
		i := strings.LastIndex(name, "/")
		if i < 0 {
			return migremote.Env{}
		}
		name = name[:i]
	}
}

// withConn makes the trees of this test (testEnv) open c for uri. The URI is the test's alone
// while it runs: a virt.Fake's is always fake:///, so two tests running at once that both
// register one would each end up talking to the other's (or, after its cleanup, to nothing);
// the second fails here instead. A parallel test gives a file-backed fake (vgpu-fake:///, under
// its own temporary directory) or a URI of its own.
func withConn(t *testing.T, uri string, c virt.Conn) {
	t.Helper()
	testWorld.mu.Lock()
	defer testWorld.mu.Unlock()
	if testWorld.conns == nil {
		testWorld.conns = map[string]virt.Conn{}
	}
	if _, taken := testWorld.conns[uri]; taken {
		t.Fatalf("withConn: %s is registered by another test running now: give this test a URI of its own", uri)
	}
	testWorld.conns[uri] = c
	t.Cleanup(func() {
		testWorld.mu.Lock()
		defer testWorld.mu.Unlock()
		delete(testWorld.conns, uri)
	})
}

// withKernel routes the sysfs writes of this test's trees (testEnv) under tr's root to
// hosttest's kernel emulator.
func withKernel(t *testing.T, tr *hosttest.Tree) *hosttest.Kernel {
	t.Helper()
	k := hosttest.NewKernel(tr)
	testWorld.mu.Lock()
	defer testWorld.mu.Unlock()
	if testWorld.kernels == nil {
		testWorld.kernels = map[string]*hosttest.Kernel{}
	}
	old, had := testWorld.kernels[tr.Dir()]
	testWorld.kernels[tr.Dir()] = k
	t.Cleanup(func() {
		testWorld.mu.Lock()
		defer testWorld.mu.Unlock()
		if had {
			testWorld.kernels[tr.Dir()] = old
		} else {
			delete(testWorld.kernels, tr.Dir())
		}
	})
	return k
}

// TestEnvReachesEveryCommand: the Env a tree is built with is what its commands use, and two
// trees built with different Envs do not share one (the tree keeps no seam in a variable).
func TestEnvReachesEveryCommand(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	gpu, _ := tr.ConsumerGPU("0000:00:04.0", "0000:01:00.0", "")
	var mine, other int
	count := func(n *int) *Env {
		return &Env{HostIO: func(root host.Root) (host.Writer, host.ModuleLoader) {
			*n++
			k := hosttest.NewKernel(tr)
			return k, k
		}}
	}
	a := newApp(count(&mine))
	_ = newApp(count(&other)) // built after a: a seam in a package variable would be this one's
	var out, errw bytes.Buffer
	a.Writer, a.ErrWriter = &out, &errw
	if code := execute(a, []string{"vgpu-host", "--host-root", tr.Dir(), "bind", gpu.String()}, &errw); code != 0 {
		t.Fatalf("bind: exit %d\n%s", code, errw.String())
	}
	if mine == 0 || other != 0 {
		t.Errorf("bind asked the tree's Env %d times and another tree's %d: want at least once, and never", mine, other)
	}
}
