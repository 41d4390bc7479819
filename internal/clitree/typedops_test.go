package clitree

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/agent"
	"github.com/vgpu-host/vgpu-host/agent/agentapi"
	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/internal/jsonindent"
	"github.com/vgpu-host/vgpu-host/internal/kubetest"
	"github.com/vgpu-host/vgpu-host/layout"
	"github.com/vgpu-host/vgpu-host/lifecycle"
	"github.com/vgpu-host/vgpu-host/mdev"
	migremote "github.com/vgpu-host/vgpu-host/mig/remote"
	"github.com/vgpu-host/vgpu-host/ops"
	"github.com/vgpu-host/vgpu-host/virt"
	"github.com/vgpu-host/vgpu-host/virt/remote"
)

// fakeFlags is flagValues from a map: what the agent's typed values look like to a request
// builder, without a command tree.
type fakeFlags struct {
	vals     map[string]string
	operands []string
}

func (f fakeFlags) Bool(n string) bool     { b, _ := strconv.ParseBool(f.vals[n]); return b }
func (f fakeFlags) String(n string) string { return f.vals[n] }
func (f fakeFlags) Int(n string) int {
	i, _ := strconv.Atoi(f.vals[n])
	return i
}
func (f fakeFlags) Duration(n string) time.Duration { d, _ := time.ParseDuration(f.vals[n]); return d }
func (f fakeFlags) StringSlice(n string) []string {
	if v, ok := f.vals[n]; ok {
		return []string{v}
	}
	return nil
}
func (f fakeFlags) IsSet(n string) bool { _, ok := f.vals[n]; return ok }
func (f fakeFlags) Operands() []string  { return f.operands }

// opJSON runs req's operation on dir's host and returns its result as -o json prints it.
func opJSON(t *testing.T, dir string, req ops.Request) *bytes.Buffer {
	t.Helper()
	v, err := ops.Run(context.Background(), opsEnvFor(t, dir), req)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := jsonindent.Encode(&b, v); err != nil {
		t.Fatal(err)
	}
	return &b
}

// opsEnvFor is the CLI's operations environment on root without a command line: its host
// writer, no libvirt, and what this binary adds to every operation (withHostParts).
func opsEnvFor(t *testing.T, dir string) ops.Env {
	t.Helper()
	root, err := host.NewRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	env := ops.Env{Root: root,
		OpenConn: func() (virt.Conn, error) { return nil, host.ErrUnsupported },
		HostIO:   func() (host.Writer, host.ModuleLoader) { return testEnv().hostIO(root) },
	}
	withHostParts(testEnvOf(t), &env)
	return env
}

// roundTrip decodes b into a new T and encodes it again as the CLI encodes JSON.
func roundTrip[T any](t *testing.T, b []byte) string {
	t.Helper()
	v := new(T)
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("decode %T: %v\n%s", v, err, b)
	}
	var out bytes.Buffer
	if err := jsonindent.Encode(&out, v); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// typedCase is one command line and its request built from flag values, with the decoder
// of its result type.
type typedCase struct {
	args  []string
	env   func() ops.Env // nil: opsEnvFor the case's root
	build func() (ops.Request, error)
	back  func(t *testing.T, b []byte) string
	// same, when set, blanks what may differ between two runs (a check's time).
	same func(string) string
}

// asCommandBuilds builds the request of the operation-backed command name from f as the
// command does (runOpCommand's order, less the host root it never needs): its operand check,
// its request builder, then its finishing step, at a testSite.
func asCommandBuilds[Q any](t *testing.T, name string, f flagValues) (ops.Request, error) {
	t.Helper()
	oc, ok := opCommandNamed(name)
	if !ok {
		t.Fatalf("no operation-backed command %q", name)
	}
	if oc.pre != nil {
		if err := oc.pre(f); err != nil {
			return nil, err
		}
	}
	req, err := oc.request(f)
	if err != nil {
		return nil, err
	}
	if oc.finish != nil {
		if req, err = oc.finish(f, req, testSite{}); err != nil {
			return nil, err
		}
	}
	q := req.(Q)
	return any(&q).(ops.Request), nil
}

// testSite is the site asCommandBuilds gives a command's finishing step: a one-shot CLI whose
// progress reaches no terminal. The rest of opSite is left nil: a finishing step that asks for
// it fails the test.
type testSite struct{ opSite }

func (testSite) oneShot() bool      { return true }
func (testSite) liveProgress() bool { return false }

// checkTypedCases runs each case's command line with --output json and its request through
// ops.Run: the same exit code, the same error text, the result's JSON byte for byte the CLI's,
// and that JSON decodes into the result type and encodes to the same bytes.
func checkTypedCases(t *testing.T, dir string, cases []typedCase) {
	t.Helper()
	for _, c := range cases {
		stdout, stderr, exit := runVia(t, agentNever, append([]string{"--host-root", dir, "-o", "json"}, c.args...)...)
		req, err := c.build()
		var v any
		var warnings strings.Builder
		if err == nil {
			env := opsEnvFor(t, dir)
			if c.env != nil {
				env = c.env()
			}
			env.Progress = func(e ops.Event) {
				if e.Kind == ops.EventWarning {
					warnings.WriteString(e.Message + "\n")
				}
			}
			v, err = ops.Run(context.Background(), env, req)
		}
		if code := exitCode(err); code != exit {
			t.Errorf("%v: the operation exits %d (%v), the CLI %d: %s", c.args, code, err, exit, stderr)
			continue
		}
		want := warnings.String()
		if err != nil {
			want += "vgpu-host: " + err.Error() + "\n"
		}
		if stderr != want {
			t.Errorf("%v: the CLI printed %q on stderr; the operation warned and failed with %q", c.args, stderr, want)
		}
		if v == nil {
			if stdout != "" {
				t.Errorf("%v: the operation gave no result, the CLI printed\n%s", c.args, stdout)
			}
			continue
		}
		var b bytes.Buffer
		if err := jsonindent.Encode(&b, v); err != nil {
			t.Fatal(err)
		}
		got, back := b.String(), c.back(t, b.Bytes())
		if c.same != nil {
			stdout, got, back = c.same(stdout), c.same(got), c.same(back)
		}
		if got != stdout {
			t.Errorf("%v: the operation's result\n%s\nthe CLI's -o json\n%s", c.args, got, stdout)
		}
		if back != got {
			t.Errorf("%v: the result does not round-trip through JSON:\n%s\nwant\n%s", c.args, back, got)
		}
	}
}

// TestReadOpsAreTheCLIs: mdev types, mdev list, mdev place and vf list, as operations on
// requests built from flag values, answer what their commands print on the real-kernel lab
// snapshot (mbochs, mdpy and mtty parents, an SR-IOV PF with VFs), the real H200 host, and a
// fake tree with an NVIDIA vendor-VFIO GPU (VFs with vGPU types, mbochs beside it).
func TestReadOpsAreTheCLIs(t *testing.T) {
	t.Parallel()
	p := hosttest.RepoFile(t, "host/testdata/lab-snapshot.tar.gz")
	if p == "" {
		t.Fatal("host/testdata/lab-snapshot.tar.gz is missing: make lab-snapshot captures it")
	}
	lab := hosttest.Snapshot(t, p).Dir()
	h200 := hosttest.Snapshot(t, hosttest.SharedFixture(t, "nvidia-h200/sysfs-snapshot.tar.gz")).Dir()
	typesCase := func(args []string, f fakeFlags) typedCase {
		return typedCase{args: args, build: func() (ops.Request, error) { r := mdevTypesRequest(f); return &r, nil }, back: roundTrip[ops.MdevTypesResult]}
	}
	listCase := func(args []string, f fakeFlags) typedCase {
		return typedCase{args: args, build: func() (ops.Request, error) { r := mdevListRequest(f); return &r, nil }, back: roundTrip[ops.MdevListResult]}
	}
	placeCase := func(args []string, f fakeFlags) typedCase {
		return typedCase{args: args, build: func() (ops.Request, error) { r, err := mdevPlaceRequest(f); return &r, err }, back: roundTrip[ops.MdevPlaceResult]}
	}
	vfCase := func(args []string, f fakeFlags) typedCase {
		return typedCase{args: args, build: func() (ops.Request, error) { r, err := vfListRequest(f); return &r, err }, back: roundTrip[ops.VFListResult]}
	}
	tr := hosttest.New(t)
	tr.NvidiaSRIOVGPU("0000:00:0a.0", "0000:0b:00.0", 0, 4, nil)
	tr.Mbochs()
	for _, dir := range []string{lab, h200, tr.Dir()} {
		checkTypedCases(t, dir, []typedCase{
			typesCase([]string{"mdev", "types"}, fakeFlags{}),
			typesCase([]string{"mdev", "types", "mbochs"}, fakeFlags{operands: []string{"mbochs"}}),
			typesCase([]string{"mdev", "types", "nosuch"}, fakeFlags{operands: []string{"nosuch"}}),
			typesCase([]string{"mdev", "types", ""}, fakeFlags{operands: []string{""}}),
			listCase([]string{"mdev", "list", ""}, fakeFlags{operands: []string{""}}),
			listCase([]string{"mdev", "list"}, fakeFlags{}),
			listCase([]string{"mdev", "list", "--defined", "mbochs"}, fakeFlags{vals: map[string]string{"defined": "true"}, operands: []string{"mbochs"}}),
			placeCase([]string{"mdev", "place", "-t", "mbochs-small", "-n", "2"}, fakeFlags{vals: map[string]string{"type": "mbochs-small", "count": "2"}}),
			placeCase([]string{"mdev", "place", "-t", "mbochs-small", "--numa", "0"}, fakeFlags{vals: map[string]string{"type": "mbochs-small", "count": "1", "numa": "0"}}),
			placeCase([]string{"mdev", "place", "-t", "mbochs-small", "--numa", "x"}, fakeFlags{vals: map[string]string{"type": "mbochs-small", "numa": "x"}}),
			placeCase([]string{"mdev", "place", "-t", "H200-3-71C"}, fakeFlags{vals: map[string]string{"type": "H200-3-71C", "count": "1"}}),
			placeCase([]string{"mdev", "place", "-t", "L40S-8Q", "-n", "3", "--numa", "1"}, fakeFlags{vals: map[string]string{"type": "L40S-8Q", "count": "3", "numa": "1"}}),
			typesCase([]string{"mdev", "types", "0000:0b:00.4"}, fakeFlags{operands: []string{"0000:0b:00.4"}}),
			vfCase([]string{"vf", "list", "0000:0b:00.0"}, fakeFlags{operands: []string{"0000:0b:00.0"}}),
			placeCase([]string{"mdev", "place", "-t", "nosuch"}, fakeFlags{vals: map[string]string{"type": "nosuch", "count": "1"}}),
			vfCase([]string{"vf", "list"}, fakeFlags{}),
			vfCase([]string{"vf", "list", "0000:00:0a.0"}, fakeFlags{operands: []string{"0000:00:0a.0"}}),
			vfCase([]string{"vf", "list", "nope"}, fakeFlags{operands: []string{"nope"}}),
			vfCase([]string{"vf", "list", "a", "b"}, fakeFlags{operands: []string{"a", "b"}}),
			vfCase([]string{"vf", "list", ""}, fakeFlags{operands: []string{""}}),
		})
	}
}

// TestVerifyOpIsTheCLIs: verify as an operation answers what the command prints, a device
// missing in the guest included (the result and exit 1).
func TestVerifyOpIsTheCLIs(t *testing.T) {
	t.Parallel()
	fake := virt.NewFake("qemu")
	name := "vgpuhost-test-missing"
	fake.AddForeignDomain(name, `<domain type="qemu"><name>`+name+`</name><memory unit="MiB">64</memory><os><type arch="x86_64">hvm</type></os><devices>
  <hostdev mode="subsystem" type="pci" managed="yes"><source><address domain="0x0000" bus="0x41" slot="0x00" function="0x0"/></source><alias name="hostdev0"/></hostdev>
  <video><model type="virtio"/><alias name="video0"/></video>
</devices></domain>`, true)
	fake.QMPFunc = func(_, _, _ string) (string, error) {
		return `{"return":[{"bus":0,"devices":[{"bus":0,"slot":1,"function":0,"class_info":{"class":768},"id":{"vendor":6900,"device":4176},"qdev_id":"video0","regions":[]}]}]}`, nil
	}
	withConn(t, fake.URI(), fake)
	dir := t.TempDir()
	env := func() ops.Env {
		e := opsEnvFor(t, dir)
		e.OpenConn = func() (virt.Conn, error) { return fake, nil }
		return e
	}
	verifyCase := func(args ...string) typedCase {
		f := fakeFlags{operands: args}
		return typedCase{args: append([]string{"verify", "--connect", fake.URI()}, args...), env: env,
			build: func() (ops.Request, error) { r, err := verifyRequest(f); return &r, err }, back: roundTrip[ops.VerifyResult]}
	}
	checkTypedCases(t, dir, []typedCase{verifyCase(name), verifyCase("vgpuhost-test-nosuch"), verifyCase(), verifyCase("a", "b")})
}

// TestHealthOpIsTheCLIs: host health as an operation answers what the command prints: the
// recorded checks and a quarantine (a GPU handed back with config space of all ones), and
// one device checked now (its check's time aside).
func TestHealthOpIsTheCLIs(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	gpu, _ := tr.ConsumerGPU("0000:00:04.0", "0000:01:00.0", "")
	withKernel(t, tr)
	dir := tr.Dir()
	if out, code := run(t, "--host-root", dir, "bind", "01:00.0"); code != 0 {
		t.Fatalf("bind exit %d: %s", code, out)
	}
	tr.SetConfigAllOnes(gpu)
	if out, code := run(t, "--host-root", dir, "unbind", "01:00.0"); code != 0 || !strings.Contains(out, "quarantined") {
		t.Fatalf("unbind exit %d: %s", code, out)
	}
	checked := regexp.MustCompile(`"checked_at": "[^"]*"`)
	healthCase := func(args ...string) typedCase {
		f := fakeFlags{operands: args}
		return typedCase{args: append([]string{"host", "health"}, args...),
			build: func() (ops.Request, error) { r, err := healthRequest(f); return &r, err }, back: roundTrip[ops.HealthResult]}
	}
	checkNow := func(addr string) typedCase {
		c := healthCase(addr)
		c.same = func(s string) string { return checked.ReplaceAllString(s, `"checked_at": "-"`) }
		return c
	}
	checkTypedCases(t, dir, []typedCase{healthCase(), checkNow("0000:01:00.0"), checkNow("0000:01:00.1"), healthCase("nope"), healthCase(""), healthCase("a", "b")})
	empty := hosttest.New(t)
	checkTypedCases(t, empty.Dir(), []typedCase{healthCase()})
}

// TestLayoutOpsAreTheCLIs: host layout plan, apply (dry run, refused, done) and show, as
// operations on requests built from flag values, answer what their commands print.
func TestLayoutOpsAreTheCLIs(t *testing.T) {
	t.Parallel()
	tr, _, f, _ := layoutFixture(t)
	dir := tr.Dir()
	flags := func(vals map[string]string, args ...string) fakeFlags {
		return fakeFlags{vals: vals, operands: args}
	}
	planCase := func(args []string, ff fakeFlags) typedCase {
		return typedCase{args: append([]string{"host", "layout", "plan"}, args...),
			build: func() (ops.Request, error) { r, err := layoutPlanRequest(ff); return &r, err }, back: roundTrip[ops.LayoutPlanResult]}
	}
	applyCase := func(args []string, ff fakeFlags) typedCase {
		return typedCase{args: append([]string{"host", "layout", "apply"}, args...),
			build: func() (ops.Request, error) { r, err := layoutApplyRequest(ff); return &r, err },
			back: func(t *testing.T, b []byte) string {
				if ff.Bool("dry-run") {
					// The report's result decoded as what it is, not as a map.
					type report struct {
						ops.DryRunReport
						Result *layout.HostApplyResult `json:"result,omitempty"`
					}
					return roundTrip[report](t, b)
				}
				return roundTrip[layout.HostApplyResult](t, b)
			}}
	}
	appliedAt := regexp.MustCompile(`"applied_at": "[^"]*"`)
	showCase := func(args []string, ff fakeFlags) typedCase {
		return typedCase{args: append([]string{"host", "layout", "show"}, args...),
			build: func() (ops.Request, error) { r := layoutShowRequest(ff); return &r, nil },
			back: func(t *testing.T, b []byte) string {
				if ff.Bool("selected") {
					return roundTrip[layout.Selection](t, b)
				}
				return roundTrip[layout.File](t, b)
			},
			same: func(s string) string { return appliedAt.ReplaceAllString(s, `"applied_at": "-"`) }}
	}
	desks := map[string]string{"config": "desks"}
	checkTypedCases(t, dir, []typedCase{
		planCase([]string{f}, flags(nil, f)),
		planCase([]string{f, "--config", "desks"}, flags(desks, f)),
		planCase([]string{f, "--config", "train"}, flags(map[string]string{"config": "train"}, f)),
		planCase([]string{f, "--config", "desks", "--force", "nonsense"}, flags(map[string]string{"config": "desks", "force": "nonsense"}, f)),
		planCase([]string{"--config", "desks"}, flags(desks)),
		planCase([]string{filepath.Join(dir, "nosuch.yaml")}, flags(nil, filepath.Join(dir, "nosuch.yaml"))),
		applyCase([]string{f, "--config", "desks", "--dry-run"}, flags(map[string]string{"config": "desks", "dry-run": "true"}, f)),
		showCase(nil, flags(nil)),
		showCase([]string{"--selected"}, flags(map[string]string{"selected": "true"})),
	})
	// Applied by the operation, cleared, applied by the command: the same answer.
	req, err := layoutApplyRequest(flags(desks, f))
	if err != nil {
		t.Fatal(err)
	}
	byOp := opJSON(t, dir, &req)
	checkTypedCases(t, dir, []typedCase{
		showCase(nil, flags(nil)),
		showCase([]string{"--selected"}, flags(map[string]string{"selected": "true"})),
		planCase([]string{f, "--config", "desks"}, flags(desks, f)),
	})
	if out, code := run(t, "--host-root", dir, "host", "layout", "apply", f, "--config", "clear"); code != 0 {
		t.Fatalf("clear: exit %d\n%s", code, out)
	}
	stdout, stderr, code := runVia(t, agentNever, "--host-root", dir, "-o", "json", "host", "layout", "apply", f, "--config", "desks")
	if code != 0 || stdout != byOp.String() {
		t.Errorf("host layout apply: exit %d (%s)\n%s\nthe operation's result:\n%s", code, stderr, stdout, byOp.String())
	}
}

// TestMIGOpsAreTheCLIs: mig show, plan and apply (dry run and done), as operations on requests
// built from flag values, answer what their commands print; each starts its own helper on the
// NVML mock's fresh state.
func TestMIGOpsAreTheCLIs(t *testing.T) {
	t.Parallel()
	mockNVML(t)
	dir := t.TempDir()
	// The mock makes up the GPUs' and instances' UUIDs at each start of its helper.
	uuid := regexp.MustCompile(`"uuid": "[^"]*"`)
	same := func(s string) string { return uuid.ReplaceAllString(s, `"uuid": "-"`) }
	showCase := func(args ...string) typedCase {
		ff := fakeFlags{operands: args}
		return typedCase{args: append([]string{"mig", "show"}, args...),
			build: func() (ops.Request, error) { r := migShowRequest(ff); return &r, nil }, back: roundTrip[ops.MIGShowResult], same: same}
	}
	planCase := func(vals map[string]string) typedCase {
		args := []string{"mig", "plan"}
		for _, k := range []string{"gpu", "profiles", "disable-mig"} {
			if v, ok := vals[k]; ok {
				args = append(args, "--"+k+"="+v)
			}
		}
		ff := fakeFlags{vals: vals}
		return typedCase{args: args, build: func() (ops.Request, error) { r, err := migPlanRequest(ff); return &r, err }, back: roundTrip[ops.MIGPlanResult], same: same}
	}
	applyCase := func(vals map[string]string) typedCase {
		c := planCase(vals)
		c.args[1] = "apply"
		if vals["dry-run"] == "true" {
			c.args = append(c.args, "--dry-run")
		}
		ff := fakeFlags{vals: vals}
		c.build = func() (ops.Request, error) { r, err := migApplyRequest(ff); return &r, err }
		c.back = roundTrip[ops.MIGPlanResult]
		return c
	}
	checkTypedCases(t, dir, []typedCase{
		showCase(), showCase("0000:01:00.0"), showCase("0000:63:00.0"),
		planCase(map[string]string{"gpu": "0000:01:00.0", "profiles": "3g.20gb,4g.20gb"}),
		planCase(map[string]string{"gpu": "0", "profiles": "1g.5gb*8"}),
		planCase(map[string]string{"gpu": "0", "profiles": "1g.5gb*x"}),
		planCase(map[string]string{"gpu": "0", "profiles": "1g.5gb", "disable-mig": "true"}),
		planCase(map[string]string{"gpu": "0000:63:00.0", "profiles": "1g.5gb"}),
		applyCase(map[string]string{"gpu": "0", "profiles": "1g.5gb*7", "dry-run": "true"}),
		applyCase(map[string]string{"gpu": "0000:00:00.0", "profiles": "1g.5gb×7"}),
		applyCase(map[string]string{"gpu": "1", "profiles": "", "disable-mig": "true"}),
	})
}

// TestHotplugOpsAreTheCLIs: attach and detach, as operations on requests built from flag
// values, answer what their commands print on the in-memory fake libvirt: usage errors, a live
// virtio-gpu (exit 7), no such VM, the dry run, and each change made by the operation and then
// the same change by the command.
func TestHotplugOpsAreTheCLIs(t *testing.T) {
	f := fakeLibvirt(t)
	tr := hosttest.New(t)
	dir := tr.Dir()
	spec := deviceFreeVM(t, dir, "hpops")
	if out, code := runCLI(t, "--host-root", dir, "apply", spec); code != 0 {
		t.Fatalf("apply: exit %d\n%s", code, out)
	}
	env := func() ops.Env {
		e := opsEnvFor(t, dir)
		e.OpenConn = func() (virt.Conn, error) { return f, nil }
		return e
	}
	attachCase := func(vals map[string]string, args ...string) typedCase {
		cl := append([]string{"attach"}, args...)
		for _, k := range []string{"gpu", "profile", "virtio", "config", "dry-run", "force"} {
			if v, ok := vals[k]; ok {
				cl = append(cl, "--"+k+"="+v)
			}
		}
		ff := fakeFlags{vals: vals, operands: args}
		return typedCase{args: cl, env: env, build: func() (ops.Request, error) { return asCommandBuilds[ops.AttachRequest](t, "attach", ff) },
			back: roundTrip[ops.HotplugResult]}
	}
	detachCase := func(timeout string, args ...string) typedCase {
		ff := fakeFlags{vals: map[string]string{"timeout": timeout}, operands: args}
		return typedCase{args: append([]string{"detach", "--timeout", timeout}, args...), env: env,
			build: func() (ops.Request, error) { r, err := detachRequest(ff); return &r, err }, back: roundTrip[ops.HotplugResult]}
	}
	virtio := map[string]string{"virtio": "true", "config": "true"}
	checkTypedCases(t, dir, []typedCase{
		attachCase(nil, "hpops"),
		attachCase(map[string]string{"virtio": "true", "gpu": "0000:01:00.0"}, "hpops"),
		attachCase(map[string]string{"virtio": "true"}, "../etc"),
		attachCase(map[string]string{"virtio": "true"}, "hpops"),
		attachCase(virtio, "nosuch"),
		attachCase(map[string]string{"virtio": "true", "config": "true", "dry-run": "true"}, "hpops"),
		attachCase(map[string]string{"virtio": "true", "config": "true", "force": "nonsense"}, "hpops"),
		detachCase("30s", "hpops"),
		detachCase("0s", "hpops", "virtio-gpu"),
		detachCase("30s", "hpops", "0000:01:00.0"),
	})
	// Each change by the operation, undone, then by the command: the same answer.
	for _, c := range []struct {
		do, undo typedCase
	}{
		{attachCase(virtio, "hpops"), detachCase("30s", "hpops", "virtio-gpu")},
		{detachCase("30s", "hpops", "virtio-gpu"), attachCase(virtio, "hpops")},
	} {
		req, err := c.do.build()
		if err != nil {
			t.Fatal(err)
		}
		v, err := ops.Run(context.Background(), env(), req)
		if err != nil {
			t.Fatalf("%v by the operation: %v", c.do.args, err)
		}
		var byOp bytes.Buffer
		if err := jsonindent.Encode(&byOp, v); err != nil {
			t.Fatal(err)
		}
		if out, code := runCLI(t, append([]string{"--host-root", dir}, c.undo.args...)...); code != 0 {
			t.Fatalf("%v: exit %d\n%s", c.undo.args, code, out)
		}
		stdout, stderr, code := runVia(t, agentNever, append([]string{"--host-root", dir, "-o", "json"}, c.do.args...)...)
		if code != 0 || stdout != byOp.String() {
			t.Errorf("%v: exit %d (%s)\n%s\nthe operation's result:\n%s", c.do.args, code, stderr, stdout, byOp.String())
		}
		if back := c.do.back(t, byOp.Bytes()); back != byOp.String() {
			t.Errorf("%v: the result does not round-trip through JSON:\n%s\nwant\n%s", c.do.args, back, byOp.String())
		}
	}
}

// TestMdevDefineOpsAreTheCLIs: mdev define and undefine, as operations on requests built from
// flag values, answer what their commands print: usage errors, dry runs, an instance that is
// not active, and each change made by the operation, undone, and made by the command.
func TestMdevDefineOpsAreTheCLIs(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	tr.Mbochs()
	withKernel(t, tr)
	dir := tr.Dir()
	out, code := run(t, "--host-root", dir, "-o", "json", "mdev", "create", "-p", "mbochs", "-t", "mbochs-small", "--name", "defvm")
	var ins []mdev.Instance
	if code != 0 || json.Unmarshal([]byte(out), &ins) != nil || len(ins) != 1 {
		t.Fatalf("create: exit %d\n%s", code, out)
	}
	id := ins[0].UUID
	defineCase := func(vals map[string]string, args ...string) typedCase {
		cl := []string{"mdev", "define"}
		for _, k := range []string{"parent", "type", "manual", "dry-run"} {
			if v, ok := vals[k]; ok {
				cl = append(cl, "--"+k+"="+v)
			}
		}
		ff := fakeFlags{vals: vals, operands: args}
		return typedCase{args: append(cl, args...), build: func() (ops.Request, error) { r := mdevDefineRequest(ff); return &r, r.Check() },
			back: roundTrip[[]mdev.Definition]}
	}
	undefineCase := func(dry bool, args ...string) typedCase {
		vals := map[string]string{"dry-run": strconv.FormatBool(dry)}
		ff := fakeFlags{vals: vals, operands: args}
		return typedCase{args: append([]string{"mdev", "undefine", "--dry-run=" + vals["dry-run"]}, args...),
			build: func() (ops.Request, error) { r := mdevUndefineRequest(ff); return &r, r.Check() }, back: roundTrip[ops.MdevUndefineResult]}
	}
	other := "9b3a3d1e-5c5f-4f43-9d1a-0e3c2a1b4d5e"
	checkTypedCases(t, dir, []typedCase{
		defineCase(nil),
		defineCase(map[string]string{"dry-run": "true"}, id),
		defineCase(map[string]string{"dry-run": "true", "manual": "true"}, id),
		defineCase(map[string]string{"dry-run": "true"}, other),
		defineCase(map[string]string{"dry-run": "true", "parent": "mbochs", "type": "mbochs-large"}, other),
		defineCase(map[string]string{"dry-run": "true", "parent": "nosuch", "type": "mbochs-large"}, other),
		undefineCase(false),
		undefineCase(true, id),
		undefineCase(false, other),
	})
	for _, c := range []struct{ do, undo typedCase }{
		{defineCase(map[string]string{"manual": "true"}, id), undefineCase(false, id)},
		{undefineCase(false, id), defineCase(nil, id)},
	} {
		req, err := c.do.build()
		if err != nil {
			t.Fatal(err)
		}
		v, err := ops.Run(context.Background(), opsEnvFor(t, dir), req)
		if err != nil {
			t.Fatalf("%v by the operation: %v", c.do.args, err)
		}
		var byOp bytes.Buffer
		if err := jsonindent.Encode(&byOp, v); err != nil {
			t.Fatal(err)
		}
		if out, code := run(t, append([]string{"--host-root", dir}, c.undo.args...)...); code != 0 {
			t.Fatalf("%v: exit %d\n%s", c.undo.args, code, out)
		}
		stdout, stderr, code := runVia(t, agentNever, append([]string{"--host-root", dir, "-o", "json"}, c.do.args...)...)
		if code != 0 || stdout != byOp.String() {
			t.Errorf("%v: exit %d (%s)\n%s\nthe operation's result:\n%s", c.do.args, code, stderr, stdout, byOp.String())
		}
		if back := c.do.back(t, byOp.Bytes()); back != byOp.String() {
			t.Errorf("%v: the result does not round-trip through JSON:\n%s\nwant\n%s", c.do.args, back, byOp.String())
		}
	}
}

// TestRenderOpIsTheCLIs: render, as an operation on a request built from flag values, answers
// what the command prints: on the lab snapshot (a GPU and its audio, a fallback), offline for
// every example spec, and usage and spec errors; a spec sent as content (as the agent gets
// it) renders the same as the file.
func TestRenderOpIsTheCLIs(t *testing.T) {
	t.Parallel()
	p := hosttest.RepoFile(t, "host/testdata/lab-snapshot.tar.gz")
	if p == "" {
		t.Fatal("host/testdata/lab-snapshot.tar.gz is missing: make lab-snapshot captures it")
	}
	lab := hosttest.Snapshot(t, p).Dir()
	ex, err := os.ReadFile(filepath.Join("..", "..", "examples", "passthrough.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	spec := filepath.Join(t.TempDir(), "vm.yaml")
	if err := os.WriteFile(spec, []byte(strings.ReplaceAll(string(ex), "0000:17:00.0", "0000:01:00.0")), 0o644); err != nil {
		t.Fatal(err)
	}
	renderCase := func(vals map[string]string, args ...string) typedCase {
		cl := []string{"render"}
		for _, k := range []string{"offline", "virt-type"} {
			if v, ok := vals[k]; ok {
				cl = append(cl, "--"+k+"="+v)
			}
		}
		ff := fakeFlags{vals: vals, operands: args}
		return typedCase{args: append(cl, args...), build: func() (ops.Request, error) { return asCommandBuilds[ops.RenderRequest](t, "render", ff) },
			back: roundTrip[ops.RenderResult]}
	}
	cases := []typedCase{
		renderCase(nil, spec),
		renderCase(map[string]string{"virt-type": "qemu"}, spec),
		renderCase(map[string]string{"virt-type": "xen"}, spec),
		renderCase(nil),
		renderCase(nil, spec, spec),
		renderCase(nil, filepath.Join(lab, "nosuch.yaml")),
	}
	examples, _ := filepath.Glob(filepath.Join("..", "..", "examples", "*.yaml"))
	for _, e := range examples {
		if !strings.HasSuffix(e, "host-layouts.yaml") {
			cases = append(cases, renderCase(map[string]string{"offline": "true"}, e))
		}
	}
	checkTypedCases(t, lab, cases)
	// The spec as content, as the agent gets it.
	data, _ := os.ReadFile(spec)
	v, err := ops.Run(context.Background(), opsEnvFor(t, lab), &ops.RenderRequest{Spec: ops.Spec{Path: spec, Data: data}})
	stdout, _, code := runVia(t, agentNever, "--host-root", lab, "-o", "json", "render", spec)
	var b bytes.Buffer
	if err != nil || code != 0 || jsonindent.Encode(&b, v) != nil || b.String() != stdout {
		t.Errorf("render of the spec's content: %v\n%s\nthe CLI (exit %d):\n%s", err, b.String(), code, stdout)
	}
}

// TestKubeVirtOpsAreTheCLIs: kubevirt config, labels and vm, as operations on requests built
// from flag values, answer what their commands print, warnings on stderr included: the
// example host, --config files good, bad and missing, --write, findings, --strict and usage
// errors.
func TestKubeVirtOpsAreTheCLIs(t *testing.T) {
	t.Parallel()
	tr := kubetest.ExampleHost(t)
	dir := tr.Dir()
	good := filepath.Join(t.TempDir(), "kube.yaml")
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(good, []byte("resourceNames:\n  \"10de:20b0\": nvidia.com/A100\n"), 0o644)
	os.WriteFile(bad, []byte("resourceNames:\n  \"10de:20b0\": A100\n"), 0o644)
	cl := func(cmd []string, vals map[string]string, keys []string, args []string) []string {
		for _, k := range keys {
			if v, ok := vals[k]; ok {
				cmd = append(cmd, "--"+k+"="+v)
			}
		}
		return append(cmd, args...)
	}
	configCase := func(vals map[string]string, args ...string) typedCase {
		ff := fakeFlags{vals: vals, operands: args}
		return typedCase{args: cl([]string{"kubevirt", "config"}, vals, []string{"config"}, args),
			build: func() (ops.Request, error) {
				return asCommandBuilds[ops.KubeVirtConfigRequest](t, "kubevirt config", ff)
			}, back: roundTrip[ops.KubeVirtConfigResult]}
	}
	labelsCase := func(vals map[string]string, args ...string) typedCase {
		ff := fakeFlags{vals: vals, operands: args}
		return typedCase{args: cl([]string{"kubevirt", "labels"}, vals, []string{"config", "write"}, args),
			build: func() (ops.Request, error) {
				return asCommandBuilds[ops.KubeVirtLabelsRequest](t, "kubevirt labels", ff)
			}, back: roundTrip[ops.KubeVirtLabelsResult]}
	}
	vmCase := func(vals map[string]string, args ...string) typedCase {
		ff := fakeFlags{vals: vals, operands: args}
		return typedCase{args: cl([]string{"kubevirt", "vm"}, vals, []string{"config", "container-disk", "strict"}, args),
			build: func() (ops.Request, error) { return asCommandBuilds[ops.KubeVirtVMRequest](t, "kubevirt vm", ff) },
			back:  roundTrip[ops.KubeVirtVMResult]}
	}
	spec := "../../examples/virgl-workstation.yaml"
	unknown := filepath.Join(t.TempDir(), "vm.yaml")
	os.WriteFile(unknown, []byte("apiVersion: vgpu-host/v1\nkind: VirtualMachine\nmetadata:\n  name: x\nspec:\n  vcpus: 1\n  memory: 1GiB\n  gpus:\n    - vgpu:\n        profile: A100-4C\n"), 0o644)
	checkTypedCases(t, dir, []typedCase{
		configCase(nil),
		configCase(nil, "x"),
		configCase(map[string]string{"config": good}),
		configCase(map[string]string{"config": bad}),
		configCase(map[string]string{"config": filepath.Join(dir, "nosuch.yaml")}),
		labelsCase(nil),
		labelsCase(map[string]string{"write": "true"}),
		labelsCase(map[string]string{"config": bad}),
		labelsCase(nil, "x"),
		vmCase(nil, spec),
		vmCase(map[string]string{"container-disk": "root=quay.io/containerdisks/debian:12", "config": good}, spec),
		vmCase(map[string]string{"strict": "true"}, spec),
		vmCase(map[string]string{"container-disk": "root"}, spec),
		vmCase(map[string]string{"container-disk": "nope=img"}, spec),
		vmCase(map[string]string{"config": bad}, spec),
		vmCase(nil, unknown),
		vmCase(nil),
	})
	// An empty host: the patch permits nothing, and says so.
	checkTypedCases(t, hosttest.New(t).Dir(), []typedCase{configCase(nil)})
}

// TestExportOpIsTheCLIs: image export, as an operation on a request built from flag values,
// answers what the command prints for what needs no real libvirtd (a VM not in the ledger,
// usage errors, a bad format); the export itself is held to the CLI by the real-libvirtd tests
// (TestStatusVerifyExportOutputsLibvirtd, TestExportFormatsLibvirtd), which run it through
// the operation.
func TestExportOpIsTheCLIs(t *testing.T) {
	f := fakeLibvirt(t)
	dir := t.TempDir()
	env := func() ops.Env {
		e := opsEnvFor(t, dir)
		e.OpenConn = func() (virt.Conn, error) { return f, nil }
		return e
	}
	exportCase := func(vals map[string]string, args ...string) typedCase {
		cl := []string{"image", "export"}
		for _, k := range []string{"to", "format", "no-compress", "seal", "force", "dry-run"} {
			if v, ok := vals[k]; ok {
				cl = append(cl, "--"+k+"="+v)
			}
		}
		ff := fakeFlags{vals: vals, operands: args}
		return typedCase{args: append(cl, args...), env: env,
			build: func() (ops.Request, error) { return asCommandBuilds[ops.ExportRequest](t, "image export", ff) }, back: roundTrip[ops.ExportResult]}
	}
	img := filepath.Join(dir, "out.qcow2")
	checkTypedCases(t, dir, []typedCase{
		exportCase(map[string]string{"to": img}, "nosuch"),
		exportCase(map[string]string{"to": img, "dry-run": "true", "seal": "true"}, "nosuch"),
		exportCase(map[string]string{"to": img, "format": "vmdk"}, "nosuch"),
		exportCase(map[string]string{"to": img, "format": "raw", "no-compress": "true"}, "nosuch"),
		exportCase(nil, "nosuch"),
		exportCase(map[string]string{"to": img}),
		exportCase(map[string]string{"to": img}, "a", "b"),
		exportCase(map[string]string{"to": img}, ""),
	})
}

// TestMigrateOpIsTheCLIs: migrate, as an operation on a request built from flag values,
// answers what the command prints between two fake hosts (the target's vgpu-host run by
// --target-cmd): usage errors, the dry run, and a migration made by the operation, brought
// back, and made by the command.
func TestMigrateOpIsTheCLIs(t *testing.T) {
	t.Parallel()
	bin := binary(t)
	dirA, dirB := hosttest.New(t).Dir(), hosttest.New(t).Dir()
	uriA, uriB := "vgpu-fake://"+filepath.Join(dirA, "libvirt.json"), "vgpu-fake://"+filepath.Join(dirB, "libvirt.json")
	name := "vgpuhost-test-migops"
	spec := deviceFreeVM(t, dirA, name)
	if out, code := runCLI(t, "--host-root", dirA, "apply", "--connect", uriA, spec); code != 0 {
		t.Fatalf("apply on A: exit %d\n%s", code, out)
	}
	targetCmd := func(dir, uri string) string {
		return strings.Join([]string{"env", "VGPU_HOST_CONNECT=" + uri, bin, "--host-root", dir, "--agent", "never"}, " ")
	}
	envOf := func(dir, uri string) func() ops.Env {
		return func() ops.Env {
			e := opsEnvFor(t, dir)
			e.OpenConn = func() (virt.Conn, error) { return testEnv().openConn(uri, remote.OpenOptions{}) }
			e.MigrationTarget = func(words []string, ssh bool) lifecycle.MigrationTarget {
				return &execTarget{words: words, ssh: ssh, stderr: io.Discard}
			}
			return e
		}
	}
	migrateCase := func(from, fromURI string, vals map[string]string, args ...string) typedCase {
		cl := []string{"migrate", "--connect", fromURI}
		for _, k := range []string{"to", "target-cmd", "migrate-uri", "copy-storage", "shared-storage", "dry-run"} {
			if v, ok := vals[k]; ok {
				cl = append(cl, "--"+k+"="+v)
			}
		}
		ff := fakeFlags{vals: vals, operands: args}
		return typedCase{args: append(cl, args...), env: envOf(from, fromURI),
			build: func() (ops.Request, error) { r, err := migrateRequest(ff); return &r, err }, back: roundTrip[ops.MigrateResult]}
	}
	toB := func(extra map[string]string) map[string]string {
		m := map[string]string{"to": uriB, "target-cmd": targetCmd(dirB, uriB), "shared-storage": "true"}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	checkTypedCases(t, dirA, []typedCase{
		migrateCase(dirA, uriA, toB(map[string]string{"dry-run": "true"}), name),
		migrateCase(dirA, uriA, toB(map[string]string{"copy-storage": "true"}), name),
		migrateCase(dirA, uriA, toB(map[string]string{"migrate-uri": "udp://x"}), name),
		migrateCase(dirA, uriA, map[string]string{"to": uriB}, name),
		migrateCase(dirA, uriA, map[string]string{"to": "qemu+ssh:///system"}, name),
		migrateCase(dirA, uriA, toB(map[string]string{"target-cmd": " "}), name),
		migrateCase(dirA, uriA, toB(nil), "nosuch"),
		migrateCase(dirA, uriA, toB(nil), "../x"),
		migrateCase(dirA, uriA, toB(nil)),
	})
	// The migration by the operation, back by the command, and again by the command.
	there := migrateCase(dirA, uriA, toB(nil), name)
	req, err := there.build()
	if err != nil {
		t.Fatal(err)
	}
	v, err := ops.Run(context.Background(), there.env(), req)
	if err != nil {
		t.Fatalf("migrate by the operation: %v", err)
	}
	var byOp bytes.Buffer
	if err := jsonindent.Encode(&byOp, v); err != nil {
		t.Fatal(err)
	}
	back := []string{"--host-root", dirB, "migrate", "--connect", uriB, name, "--to", uriA, "--target-cmd", targetCmd(dirA, uriA), "--shared-storage"}
	if out, code := runCLI(t, back...); code != 0 {
		t.Fatalf("back to A: exit %d\n%s", code, out)
	}
	stdout, stderr, code := runVia(t, agentNever, append([]string{"--host-root", dirA, "-o", "json"}, there.args...)...)
	if code != 0 || stdout != byOp.String() {
		t.Errorf("migrate: exit %d (%s)\n%s\nthe operation's result:\n%s", code, stderr, stdout, byOp.String())
	}
	if b := there.back(t, byOp.Bytes()); b != byOp.String() {
		t.Errorf("the result does not round-trip through JSON:\n%s\nwant\n%s", b, byOp.String())
	}
}

// TestAgentReadEndpointsAreTheCLIs: GET /v1/mdev/types, /v1/mdevs, /v1/vfs and /v1/host/health
// are served by their operations with no command line run, and answer byte for byte what the
// CLI prints with --output json, failures with the CLI's exit code and message.
func TestAgentReadEndpointsAreTheCLIs(t *testing.T) {
	t.Parallel()
	tr := agentHost(t) // a GPU and its audio, mbochs, an SR-IOV PF
	dir := tr.Dir()
	var cr *countingRunner
	startAgentWith(t, dir, func(s *agent.Server) {
		cr = &countingRunner{cliRunner: s.Runner.(*cliRunner)}
		s.Runner = cr
	})
	for _, c := range []struct {
		path string
		cli  []string
	}{
		{"/v1/mdev/types", []string{"mdev", "types"}},
		{"/v1/mdev/types?parent=mbochs", []string{"mdev", "types", "mbochs"}},
		{"/v1/mdev/types?parent=nosuch", []string{"mdev", "types", "nosuch"}},
		{"/v1/mdevs", []string{"mdev", "list"}},
		{"/v1/mdevs?parent=mbochs&defined=true", []string{"mdev", "list", "--defined", "mbochs"}},
		{"/v1/vfs", []string{"vf", "list"}},
		{"/v1/vfs?pf=0000:00:0a.0", []string{"vf", "list", "0000:00:0a.0"}},
		{"/v1/vfs?pf=0000:00:04.0", []string{"vf", "list", "0000:00:04.0"}},
		{"/v1/vfs?pf=nope", []string{"vf", "list", "nope"}},
		{"/v1/host/health", []string{"host", "health"}},
		{"/v1/host/health?address=0000:01:00.0", []string{"host", "health", "0000:01:00.0"}},
	} {
		status, code, body := rawCall(t, dir, "GET", c.path, nil)
		stdout, stderr, exit := runVia(t, agentNever, append([]string{"--host-root", dir, "-o", "json"}, c.cli...)...)
		if code != strconv.Itoa(exit) {
			t.Errorf("GET %s: exit code %q, the CLI's %d (%s)", c.path, code, exit, stderr)
			continue
		}
		if exit != 0 {
			var eb agentapi.ErrorBody
			if err := json.Unmarshal(body, &eb); err != nil || "vgpu-host: "+eb.Error+"\n" != stderr || status != agent.StatusOf(exit) {
				t.Errorf("GET %s: %d %s; the CLI exits %d: %s", c.path, status, body, exit, stderr)
			}
			continue
		}
		checked := regexp.MustCompile(`"checked_at": "[^"]*"`)
		if got, want := checked.ReplaceAllString(string(body), "-"), checked.ReplaceAllString(stdout, "-"); status != http.StatusOK || got != want {
			t.Errorf("GET %s: status %d, body:\n%s\nwant what %v prints:\n%s", c.path, status, body, c.cli, stdout)
		}
	}
	if n := cr.runs.Load(); n != 0 {
		t.Errorf("the read endpoints ran %d command line(s) through the command tree; want none", n)
	}
}

// TestMIGOpsWithoutNVML: with no NVML helper, mig show, plan and apply fail as their commands
// do (exit 7), a bad --profiles or --disable-mig included: NVML is asked first, as it always
// was.
func TestMIGOpsWithoutNVML(t *testing.T) {
	t.Parallel()
	setNVML(t, migremote.EnvHelper, filepath.Join(t.TempDir(), "no-such-helper"))
	dir := t.TempDir()
	planCase := func(vals map[string]string) typedCase {
		args := []string{"mig", "plan"}
		for _, k := range []string{"gpu", "profiles", "disable-mig"} {
			if v, ok := vals[k]; ok {
				args = append(args, "--"+k+"="+v)
			}
		}
		ff := fakeFlags{vals: vals}
		return typedCase{args: args, build: func() (ops.Request, error) { r, err := migPlanRequest(ff); return &r, err }, back: roundTrip[ops.MIGPlanResult]}
	}
	checkTypedCases(t, dir, []typedCase{
		{args: []string{"mig", "show"}, build: func() (ops.Request, error) { r := migShowRequest(fakeFlags{}); return &r, nil }, back: roundTrip[ops.MIGShowResult]},
		planCase(map[string]string{"gpu": "0", "profiles": "1g.5gb*x"}),
		planCase(map[string]string{"gpu": "0", "profiles": "1g.5gb", "disable-mig": "true"}),
	})
}

// TestInstallUnitOpIsTheCLIs: host install-unit, as an operation on requests built from flag
// values, answers what the command prints: the dry run, this binary's path by default, paths
// the unit cannot run refused (exit 2) with nothing written, the install done by the
// operation and then by the command, and the unit found installed already.
func TestInstallUnitOpIsTheCLIs(t *testing.T) {
	t.Parallel()
	dir := hosttest.New(t).Dir()
	unitCase := func(vals map[string]string) typedCase {
		args := []string{"host", "install-unit"}
		if v, ok := vals["exec"]; ok {
			args = append(args, "--exec", v)
		}
		if vals["dry-run"] == "true" {
			args = append(args, "--dry-run")
		}
		ff := fakeFlags{vals: vals}
		return typedCase{args: args, build: func() (ops.Request, error) { r, err := installUnitRequest(ff); return &r, err },
			back: roundTrip[ops.InstallUnitResult]}
	}
	exe := "/usr/local/bin/vgpu-host"
	dry := map[string]string{"exec": exe, "dry-run": "true"}
	checkTypedCases(t, dir, []typedCase{
		unitCase(dry),
		unitCase(map[string]string{"dry-run": "true"}),
		unitCase(map[string]string{"exec": "vgpu-host"}),
		unitCase(map[string]string{"exec": "./bin/vgpu-host", "dry-run": "true"}),
		unitCase(map[string]string{"exec": "/usr/bin/vgpu-host;reboot"}),
		unitCase(map[string]string{"exec": "/usr/bin/vgpu-host\rExecStart=/bin/sh"}),
	})
	unit := filepath.Join(dir, "etc", "systemd", "system", mdev.UnitName)
	if _, err := os.Lstat(unit); !os.IsNotExist(err) {
		t.Fatalf("a dry run or a refused path wrote %s (%v)", unit, err)
	}
	// Installed by the operation, removed, installed by the command: the same answer.
	req, err := installUnitRequest(fakeFlags{vals: map[string]string{"exec": exe}})
	if err != nil {
		t.Fatal(err)
	}
	byOp := opJSON(t, dir, &req)
	if b, err := os.ReadFile(unit); err != nil || string(b) != mdev.SystemdUnit(exe) {
		t.Fatalf("the operation wrote %q (%v)", b, err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "etc", "systemd")); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := runVia(t, agentNever, "--host-root", dir, "-o", "json", "host", "install-unit", "--exec", exe)
	if code != 0 || stdout != byOp.String() {
		t.Errorf("host install-unit: exit %d (%s)\n%s\nthe operation's result:\n%s", code, stderr, stdout, byOp.String())
	}
	checkTypedCases(t, dir, []typedCase{unitCase(map[string]string{"exec": exe}), unitCase(dry)})
	// A typed caller that skips the request builder is refused the same way.
	for _, p := range []string{"", "vgpu-host", "../vgpu-host", "/a b"} {
		_, err := ops.Run(context.Background(), opsEnvFor(t, dir), &ops.InstallUnitRequest{Exec: p})
		if exitCode(err) != exitUsage || !strings.Contains(fmt.Sprint(err), "must be absolute") {
			t.Errorf("exec %q: %v (exit %d); want the path refused, exit 2", p, err, exitCode(err))
		}
	}
}

// TestInstallUnitAgentOpensNoCallerPath: the agent takes host install-unit's --exec as text
// only. A relative path (the caller's CLI sends it as typed) is refused as the CLI refuses it, a FIFO is written into the unit without being opened (opened,
// it would block the request), and a link is written as given, not resolved.
func TestInstallUnitAgentOpensNoCallerPath(t *testing.T) {
	t.Parallel()
	tr := agentHost(t)
	dir := tr.Dir()
	startAgentWith(t, dir, nil)
	c := agentClient(t, dir)
	exec := func(exe string) agentapi.ExecResult {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		flags := map[string]json.RawMessage{"host-root": json.RawMessage(strconv.Quote(dir))}
		flags["exec"], _ = json.Marshal(exe)
		res, err := c.Exec(ctx, agentapi.ExecRequest{Command: "host install-unit", Flags: flags})
		if err != nil {
			t.Fatalf("exec %q: %v", exe, err)
		}
		return res
	}
	unit := filepath.Join(dir, "etc", "systemd", "system", mdev.UnitName)
	for _, p := range []string{"vgpu-host", "./vgpu-host", "bin/../vgpu-host"} {
		res := exec(p)
		_, stderr, code := runVia(t, agentNever, "--host-root", dir, "host", "install-unit", "--exec", p)
		if res.ExitCode != exitUsage || res.ExitCode != code || res.Stderr != stderr || res.Stdout != "" {
			t.Errorf("exec %q: the agent exits %d: %q%q; the CLI %d: %q", p, res.ExitCode, res.Stdout, res.Stderr, code, stderr)
		}
		if _, err := os.Lstat(unit); !os.IsNotExist(err) {
			t.Fatalf("exec %q: the refused request wrote %s (%v)", p, unit, err)
		}
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink("/bin/true", link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, link} {
		if res := exec(p); res.ExitCode != 0 {
			t.Fatalf("exec %s: exit %d: %s", p, res.ExitCode, res.Stderr)
		}
		if b, err := os.ReadFile(unit); err != nil || string(b) != mdev.SystemdUnit(p) {
			t.Errorf("exec %s: the unit is %q (%v)", p, b, err)
		}
	}
}

// TestInstallUnitAndMigrateTargetThroughAgent: POST /v1/exec runs host install-unit and
// migrate-target as their operations and answers what the CLI prints, each change made through
// the agent, undone, and made in-process; no request names a command without an operation.
func TestInstallUnitAndMigrateTargetThroughAgent(t *testing.T) {
	t.Parallel()
	tr := agentHost(t)
	dir := tr.Dir()
	var cr *cliRunner
	uri, _ := startAgentWith(t, dir, func(s *agent.Server) { cr = s.Runner.(*cliRunner) })
	same := func(args ...string) {
		t.Helper()
		in, inErr, inCode := runVia(t, agentNever, append([]string{"--host-root", dir}, args...)...)
		out, outErr, outCode := runVia(t, agentAlways, append([]string{"--host-root", dir}, args...)...)
		if in != out || inErr != outErr || inCode != outCode {
			t.Errorf("%v: through the agent exit %d:\n%s%s\nin-process exit %d:\n%s%s", args, outCode, out, outErr, inCode, in, inErr)
		}
	}
	// undone runs args through the agent and then in-process, running undo after each.
	undone := func(undo func(), args ...string) {
		t.Helper()
		out, outErr, outCode := runVia(t, agentAlways, append([]string{"--host-root", dir}, args...)...)
		undo()
		in, inErr, inCode := runVia(t, agentNever, append([]string{"--host-root", dir}, args...)...)
		undo()
		if in != out || inErr != outErr || inCode != outCode || inCode != 0 {
			t.Errorf("%v: through the agent exit %d:\n%s%s\nin-process exit %d:\n%s%s", args, outCode, out, outErr, inCode, in, inErr)
		}
	}
	plan := `{"op":"plan","vm":"x"}`
	for _, args := range [][]string{
		{"migrate-target"},
		{"migrate-target", "commit"},
		{"migrate-target", "pause", "x"},
		{"migrate-target", "--request", `{"op":"prepare","vm":"x","extra":1}`},
		{"migrate-target", "--request", `{"op":"prepare","vm":"x"} {}`},
		{"migrate-target", "--request", plan, "abort", "x"},
		{"migrate-target", "--connect", uri, "--request", plan},
		{"-o", "yaml", "migrate-target", "--connect", uri, "--request", plan},
		{"-o", "xml", "migrate-target", "--connect", uri, "--request", plan},
		{"migrate-target", "--connect", uri, "--request", `{"op":"plan","vm":"x","devices":[{"kind":"mdev","type":"mbochs-small","source":"00000000-0000-0000-0000-00000000000a"}]}`},
		{"migrate-target", "--connect", uri, "--request", `{"op":"plan","vm":"x","devices":[{"kind":"pci","type":"t","source":"s"}]}`},
		{"migrate-target", "--connect", uri, "abort", "../x"},
		{"migrate-target", "--connect", uri, "commit", "x"},
		{"migrate-target", "--connect", uri, "abort", "x"},
		{"host", "install-unit", "--dry-run", "--exec", "/usr/local/bin/vgpu-host"},
		{"-o", "yaml", "host", "install-unit", "--dry-run", "--exec", "/usr/local/bin/vgpu-host"},
		{"host", "install-unit", "--exec", "/usr/local/bin/vgpu host"},
		{"host", "install-unit", "--exec", "./bin/vgpu-host"},
		{"host", "install-unit", "--dry-run", "--exec", "vgpu-host"},
		{"-o", "xml", "host", "install-unit", "--exec", "/usr/local/bin/vgpu-host"},
	} {
		same(args...)
	}
	noUnit := func() {
		if err := os.RemoveAll(filepath.Join(dir, "etc", "systemd")); err != nil {
			t.Fatal(err)
		}
	}
	undone(noUnit, "host", "install-unit", "--exec", "/usr/local/bin/vgpu-host")
	undone(noUnit, "-o", "json", "host", "install-unit", "--exec", "/usr/local/bin/vgpu-host")
	abort := func() {
		if out, code := runCLI(t, "--host-root", dir, "migrate-target", "--connect", uri, "abort", "x"); code != 0 {
			t.Fatalf("abort: exit %d: %s", code, out)
		}
	}
	undone(abort, "migrate-target", "--connect", uri, "--request", `{"op":"prepare","vm":"x"}`)
	if n := cr.unserved.Load(); n != 0 {
		t.Errorf("the agent got %d request(s) for a command without an operation; want none", n)
	}
}

// TestMigrateTargetOpIsTheCLIs: migrate-target, as an operation on requests built from flag
// values, answers what the command prints (its one line of JSON, whatever --output says):
// malformed requests (exit 2), a plan, a prepare by the operation and then by the command,
// each undone by an abort, and a commit of a VM that does not run here.
func TestMigrateTargetOpIsTheCLIs(t *testing.T) {
	tr := hosttest.New(t)
	tr.Mbochs()
	dir := tr.Dir()
	fake := fakeLibvirt(t) // the CLI's --connect, from its environment
	env := opsEnvFor(t, dir)
	env.OpenConn = func() (virt.Conn, error) { return fake, nil }
	// check runs args and the request f builds: the same exit code, error and JSON line; it
	// returns the CLI's stdout.
	check := func(f fakeFlags, args ...string) string {
		t.Helper()
		stdout, stderr, code := runVia(t, agentNever, append([]string{"--host-root", dir}, args...)...)
		r, err := migrateTargetRequest(f)
		var v any
		if err == nil {
			v, err = ops.Run(context.Background(), env, &r)
		}
		want := ""
		if err != nil {
			want = "vgpu-host: " + err.Error() + "\n"
		}
		if exitCode(err) != code || stderr != want {
			t.Errorf("%v: the operation exits %d (%v), the CLI %d: %s", args, exitCode(err), err, code, stderr)
		}
		line := ""
		if v != nil && err == nil {
			b, merr := json.Marshal(v)
			if merr != nil {
				t.Fatal(merr)
			}
			line = string(b) + "\n"
			var back ops.MigrateTargetResult
			if err := json.Unmarshal(b, &back); err != nil {
				t.Errorf("%v: %v", args, err)
			} else if b2, _ := json.Marshal(&back); string(b2) != string(b) {
				t.Errorf("%v: the result does not round-trip through JSON:\n%s\nwant\n%s", args, b2, b)
			}
		}
		if line != stdout {
			t.Errorf("%v: the operation's result\n%s\nthe CLI's\n%s", args, line, stdout)
		}
		return stdout
	}
	req := func(s string) fakeFlags { return fakeFlags{vals: map[string]string{"request": s}} }
	ops2 := func(a ...string) fakeFlags { return fakeFlags{operands: a} }
	mbochs := `{"op":"plan","vm":"x","devices":[{"kind":"mdev","type":"mbochs-small","source":"00000000-0000-0000-0000-00000000000a"}]}`
	for _, c := range []struct {
		f    fakeFlags
		args []string
	}{
		{ops2(), nil},
		{ops2("commit"), []string{"commit"}},
		{ops2("pause", "x"), []string{"pause", "x"}},
		{ops2("abort", "../x"), []string{"abort", "../x"}},
		{req(`{"op":"prepare","vm":"x","extra":1}`), []string{"--request", `{"op":"prepare","vm":"x","extra":1}`}},
		{req(`{"op":"plan","vm":"x"} {}`), []string{"--request", `{"op":"plan","vm":"x"} {}`}},
		{req(`{"op":"plan","vm":"x","virt_type":"xen"}`), []string{"--request", `{"op":"plan","vm":"x","virt_type":"xen"}`}},
		{req(`{"op":"plan","vm":"x"}`), []string{"--request", `{"op":"plan","vm":"x"}`}},
		{req(mbochs), []string{"--request", mbochs}},
		{ops2("commit", "x"), []string{"commit", "x"}},
		{ops2("abort", "x"), []string{"abort", "x"}},
	} {
		check(c.f, append([]string{"migrate-target"}, c.args...)...)
	}
	if out := check(req(`{"op":"plan","vm":"x"}`), "-o", "yaml", "migrate-target", "--request", `{"op":"plan","vm":"x"}`); !strings.HasPrefix(out, `{"vm":"x",`) {
		t.Errorf("-o yaml: %q; want the JSON line", out)
	}
	// Prepared by the operation, aborted, prepared by the command: the same answer; and the
	// aborts alike.
	prepare := `{"op":"prepare","vm":"x"}`
	r, err := migrateTargetRequest(req(prepare))
	if err != nil {
		t.Fatal(err)
	}
	v, err := ops.Run(context.Background(), env, &r)
	if err != nil {
		t.Fatal(err)
	}
	byOp, _ := json.Marshal(v)
	abortOut := check(ops2("abort", "x"), "migrate-target", "abort", "x")
	if out, _, code := runVia(t, agentNever, "--host-root", dir, "migrate-target", "--request", prepare); code != 0 || out != string(byOp)+"\n" {
		t.Errorf("prepare: exit %d\n%s\nthe operation's\n%s", code, out, byOp)
	}
	r, _ = migrateTargetRequest(ops2("abort", "x"))
	v, err = ops.Run(context.Background(), env, &r)
	if b, _ := json.Marshal(v); err != nil || string(b)+"\n" != abortOut {
		t.Errorf("abort by the operation: %v\n%s\nthe command's\n%s", err, b, abortOut)
	}
}
