package clitree

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/agent"
	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/internal/testenv"
)

// vias makes the CLI tests' helpers (runCLI, run, runErr, runSplit) send the command lines of
// the tests it names to an agent, as `vgpu-host --agent always` would, instead of running them
// in-process: TestCLITestsThroughAgent runs the CLI's own tests that way, with their own
// assertions. It is keyed by the name of the (sub)test that runs a test through an agent
// (throughAgent), so that the tests it runs may be parallel: each finds its own agent by its
// name, or its nearest ancestor's (viaOf), and the tests beside it run in-process.
var vias struct {
	mu sync.Mutex
	m  map[string]*viaAgent
}

// viaOf returns the agent t's command lines go through, or nil when t runs them in-process.
func viaOf(t *testing.T) *viaAgent {
	vias.mu.Lock()
	defer vias.mu.Unlock()
	for name := t.Name(); ; {
		if v, ok := vias.m[name]; ok {
			return v
		}
		i := strings.LastIndex(name, "/")
		if i < 0 {
			return nil
		}
		name = name[:i]
	}
}

// viaAgent holds the agents started for one test, one per host root and libvirt URI.
type viaAgent struct {
	mu        sync.Mutex        // tests run commands from several goroutines
	agents    map[string]string // root + " " + uri → socket
	forwarded int
}

// runInTest runs a command line for a test: in-process, or through an agent when via is set.
// It returns what app.Run would: the command's error (through the agent, an error with the
// message and exit code the agent's run printed).
func runInTest(t *testing.T, args []string, out, errw io.Writer) error {
	t.Helper()
	app := newApp(testEnvOf(t))
	app.Writer, app.ErrWriter = out, errw
	via := viaOf(t)
	if via == nil {
		return app.Run(context.Background(), append([]string{"vgpu-host"}, args...))
	}
	var agentErr strings.Builder
	app.ErrWriter = &agentErr
	app.Metadata[agentSocketKey] = func(cmd *cli.Command) (string, bool) { return via.socket(t, cmd) }
	err := app.Run(context.Background(), append([]string{"vgpu-host", "--agent", "always"}, args...))
	stderr := agentErr.String()
	var code agentExit
	if !errors.As(err, &code) {
		io.WriteString(errw, stderr)
		return err
	}
	// main printed the error last: "vgpu-host: MESSAGE\n".
	i := strings.LastIndex("\n"+stderr, "\nvgpu-host: ")
	if i < 0 {
		t.Fatalf("exit %d without an error line:\n%s", code, stderr)
	}
	io.WriteString(errw, stderr[:i])
	msg := strings.TrimSuffix(stderr[i+len("vgpu-host: "):], "\n")
	return cli.Exit(msg, int(code))
}

// socket is the socket of the agent for the command's host root and URI (started on first
// use); ok is false when the CLI is to run the command itself (the real root).
func (v *viaAgent) socket(t *testing.T, cmd *cli.Command) (string, bool) {
	t.Helper()
	root, err := host.NewRoot(cmd.String("host-root"))
	if err != nil || root.IsReal() {
		return "", false
	}
	uri, ok := cmd.String("connect"), cmd.IsSet("connect")
	for _, env := range []string{"VGPU_HOST_CONNECT", "LIBVIRT_DEFAULT_URI"} {
		if !ok {
			uri, ok = os.LookupEnv(env)
		}
	}
	if !ok {
		uri = "test:///default"
	}
	key := root.Dir() + " " + uri
	v.mu.Lock()
	defer v.mu.Unlock()
	socket, ok := v.agents[key]
	if !ok {
		socket = v.start(t, root, uri)
		v.agents[key] = socket
	}
	v.forwarded++
	return socket, true
}

// start serves an agent for root and uri on a socket outside the root, until the test ends.
func (v *viaAgent) start(t *testing.T, root host.Root, uri string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "via")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	procRoot, _ := host.NewRoot("/")
	log, _ := agent.NewLogger(io.Discard, "info", false)
	srv := &agent.Server{Root: root, Socket: filepath.Join(dir, "agent.sock"), GID: -1, ProcRoot: procRoot,
		Runner: &cliRunner{root: root, uri: uri, log: log, env: testEnvOf(t)}, Log: log, URI: uri,
		OpenConn: testEnv().openConnWait}
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return srv.Socket
}

// throughAgent runs test with every command line of the CLI helpers sent to an agent. test may
// call t.Parallel (it then goes on once the loop of TestCLITestsThroughAgent is done), and its
// subtests, parallel or not, go through the same agents: the agents and the check that
// something went through them last until t and its subtests are done (t.Cleanup).
func throughAgent(t *testing.T, test func(*testing.T)) {
	v := &viaAgent{agents: map[string]string{}}
	name := t.Name()
	vias.mu.Lock()
	if vias.m == nil {
		vias.m = map[string]*viaAgent{}
	}
	vias.m[name] = v
	vias.mu.Unlock()
	t.Cleanup(func() {
		vias.mu.Lock()
		delete(vias.m, name)
		vias.mu.Unlock()
		v.mu.Lock()
		defer v.mu.Unlock()
		if v.forwarded == 0 {
			t.Error("no command went through the agent")
		}
	})
	test(t)
}

// TestCLITestsThroughAgent runs the CLI's command tests again with every command line sent
// to a running agent (as --agent always does): their own assertions on stdout, stderr
// and exit codes must hold through the agent too. Left out: TestFakeRootNeedsExplicitConnect
// (the agent has its --connect, so a fake root needs none through it: docs/agent.md).
func TestCLITestsThroughAgent(t *testing.T) {
	for _, c := range []struct {
		name string
		test func(*testing.T)
	}{
		{"BindUnbindCLIJSON", TestBindUnbindCLIJSON},
		{"BindCLIExitCodes", TestBindCLIExitCodes},
		{"BindCLIDryRun", TestBindCLIDryRun},
		{"BindCLITimeoutIsBusy", TestBindCLITimeoutIsBusy},
		{"InspectJSON", TestInspectJSON},
		{"InspectYAMLAndTable", TestInspectYAMLAndTable},
		{"InspectOneDevice", TestInspectOneDevice},
		{"InspectBadFlags", TestInspectBadFlags},
		{"CheckExitCodes", TestCheckExitCodes},
		{"InspectMdevInstanceGroup", TestInspectMdevInstanceGroup},
		{"InspectAddrWarnings", TestInspectAddrWarnings},
		{"CheckJSONShape", TestCheckJSONShape},
		{"InspectMdevUUID", TestInspectMdevUUID},
		{"MdevCLILifecycle", TestMdevCLILifecycle},
		{"VFCLI", TestVFCLI},
		{"HostRestoreAndUnit", TestHostRestoreAndUnit},
		{"VendorVGPUCLI", TestVendorVGPUCLI},
		{"HostRestorePartialFailure", TestHostRestorePartialFailure},
		{"RenderCLI", TestRenderCLI},
		{"LifecycleJSONArraysNeverNull", TestLifecycleJSONArraysNeverNull},
		{"LifecycleJSONNothingOnFailure", TestLifecycleJSONNothingOnFailure},
		{"DamagedLedgerNullEntry", TestDamagedLedgerNullEntry},
		{"MdevDefineParentEscape", TestMdevDefineParentEscape},
		{"HostRestoreGoesOnPastBadFiles", TestHostRestoreGoesOnPastBadFiles},
		{"PersistRefusesEtcLinkOutOfRoot", TestPersistRefusesEtcLinkOutOfRoot},
		{"BootVGAPlannedRefusedForcedByName", TestBootVGAPlannedRefusedForcedByName},
		{"KubevirtConfigCLI", TestKubevirtConfigCLI},
		{"KubevirtVMCLI", TestKubevirtVMCLI},
		{"KubevirtLabelsCLI", TestKubevirtLabelsCLI},
		{"RaceMdevCreateCount", TestRaceMdevCreateCount},
		{"ProfileSameOnCommandLineAndSpecMdev", TestProfileSameOnCommandLineAndSpecMdev},
		{"InstanceUUIDsSameOnCommandLineAndApply", TestInstanceUUIDsSameOnCommandLineAndApply},
		{"FetchISOApply", TestFetchISOApply},
	} {
		t.Run(c.name, func(t *testing.T) { throughAgent(t, c.test) })
	}
}

// TestCLILibvirtdTestsThroughAgent runs the CLI's tests against the real libvirtd again through
// an agent, which holds one connection (through the helper vgpu-host-libvirt) for all of them.
func TestCLILibvirtdTestsThroughAgent(t *testing.T) {
	testenv.Libvirtd(t)
	for _, c := range []struct {
		name string
		test func(*testing.T)
	}{
		{"ApplyFallbackLibvirtd", TestApplyFallbackLibvirtd},
		{"StatusVerifyExportOutputsLibvirtd", TestStatusVerifyExportOutputsLibvirtd},
		{"ChangedSpecSameDevicesLibvirtd", TestChangedSpecSameDevicesLibvirtd},
		{"ForeignDomainDevicesLibvirtd", TestForeignDomainDevicesLibvirtd},
	} {
		t.Run(c.name, func(t *testing.T) { throughAgent(t, c.test) })
	}
}
