package mdev

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/internal/testenv"
)

// TestMdevctlReadsDefinitions lets the real mdevctl judge the files Define writes. mdevctl
// 1.2.0 always reads /etc/mdevctl.d (no root override), so the test bind-mounts the fake
// tree's directory over it inside a private mount namespace (unshare -m): the machine's own
// /etc/mdevctl.d is never touched.
func TestMdevctlReadsDefinitions(t *testing.T) {
	testenv.RequireRoot(t)
	for _, tool := range []string{"mdevctl", "unshare"} {
		testenv.RequireTool(t, tool, map[string]string{"mdevctl": "mdevctl", "unshare": "util-linux"}[tool])
	}
	tr := hosttest.New(t)
	tr.IntelGVTg()
	tr.Mbochs()
	m, _ := newMgr(tr)
	if _, err := m.Define(Definition{UUID: "83c32df7-d52e-4ec1-9668-1f3c7e4df107", Parent: "0000:00:02.0", Type: "GVTg_V5_4"}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Define(Definition{UUID: "5cf14a12-a437-4c82-a13f-70e945782d7b", Parent: "mbochs", Type: "mbochs-small", Start: "manual"}); err != nil {
		t.Fatal(err)
	}
	dir := tr.Root.Etc("mdevctl.d")
	for _, d := range []string{"scripts.d/callouts", "scripts.d/notifiers"} { // mdevctl insists on them
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c",
		`mount --bind "$1" /etc/mdevctl.d && exec mdevctl list --defined --dumpjson`, "sh", dir).CombinedOutput()
	if err != nil {
		testenv.SkipOrFail(t, fmt.Sprintf("cannot run mdevctl in a private mount namespace here: %v: %s", err, out))
	}
	// [{"PARENT": [{"UUID": {"mdev_type": ..., "start": ..., "attrs": [...]}}]}]
	var got []map[string][]map[string]mdevctlFile
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("mdevctl output: %v\n%s", err, out)
	}
	seen := map[string]mdevctlFile{}
	for _, byParent := range got {
		for parent, devs := range byParent {
			for _, d := range devs {
				for id, f := range d {
					seen[parent+"/"+id] = f
				}
			}
		}
	}
	if f := seen["0000:00:02.0/83c32df7-d52e-4ec1-9668-1f3c7e4df107"]; f.MdevType != "i915-GVTg_V5_4" || f.Start != "auto" {
		t.Fatalf("mdevctl sees %+v\n%s", seen, out)
	}
	if f := seen["mbochs/5cf14a12-a437-4c82-a13f-70e945782d7b"]; f.MdevType != "mbochs-small" || f.Start != "manual" {
		t.Fatalf("mdevctl sees %+v\n%s", seen, out)
	}
}

// attrKernel is a Kernel whose mdev instances take writes to any attribute file (the sample
// parents have none; NVIDIA's and GVT-g's do) and records them as NAME=VALUE, except fail,
// which the driver rejects with EINVAL.
type attrKernel struct {
	*hosttest.Kernel
	fail  string
	attrs *[]string
}

func (a attrKernel) Write(ctx context.Context, path, value string) error {
	if strings.Contains(path, "/sys/bus/mdev/devices/") && !strings.HasSuffix(path, "/remove") {
		if _, err := os.Stat(filepath.Dir(path)); err != nil {
			return &os.PathError{Op: "write", Path: path, Err: syscall.ENOENT}
		}
		*a.attrs = append(*a.attrs, filepath.Base(path)+"="+value)
		if filepath.Base(path) == a.fail {
			return &os.PathError{Op: "write", Path: path, Err: syscall.EINVAL}
		}
		return nil
	}
	return a.Kernel.Write(ctx, path, value)
}

// mdevctlIn runs mdevctl with /etc/mdevctl.d bind-mounted from dir in a private mount
// namespace (the machine's own /etc/mdevctl.d is never touched), or skips the test.
func mdevctlIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	testenv.RequireRoot(t)
	for _, tool := range []string{"mdevctl", "unshare"} {
		testenv.RequireTool(t, tool, map[string]string{"mdevctl": "mdevctl", "unshare": "util-linux"}[tool])
	}
	for _, d := range []string{"scripts.d/callouts", "scripts.d/notifiers"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command("unshare", append([]string{"-m", "--propagation", "private", "sh", "-c",
		`d=$1; shift; mount --bind "$d" /etc/mdevctl.d && exec mdevctl "$@"`, "sh", dir}, args...)...).CombinedOutput()
	if err != nil {
		testenv.SkipOrFail(t, fmt.Sprintf("cannot run mdevctl %v in a private mount namespace here: %v: %s", args, err, out))
	}
	return string(out)
}

// TestRestoreStartsMdevctlDefinitions: definitions the real mdevctl wrote (define --auto, and
// modify --addattr) are listed by 'mdev list' with their start policy, and host restore
// creates the auto ones and writes their attributes in order; a manual one is skipped. An
// attribute the driver rejects removes the instance again and fails the step, so the next
// restore retries instead of calling an instance without its attributes "already" there.
func TestRestoreStartsMdevctlDefinitions(t *testing.T) {
	tr := hosttest.New(t)
	tr.Mbochs()
	dir := tr.Root.Etc("mdevctl.d")
	const auto, manual = "83c32df7-d52e-4ec1-9668-1f3c7e4df107", "5cf14a12-a437-4c82-a13f-70e945782d7b"
	mdevctlIn(t, dir, "define", "-u", auto, "-p", "mbochs", "-t", "mbochs-small", "--auto")
	mdevctlIn(t, dir, "modify", "-u", auto, "--addattr=first", "--value=1")
	mdevctlIn(t, dir, "modify", "-u", auto, "--addattr=second", "--value=two")
	mdevctlIn(t, dir, "define", "-u", manual, "-p", "mbochs", "-t", "mbochs-medium")

	m, _ := newMgr(tr)
	ins, err := m.Instances()
	if err != nil || len(ins) != 2 {
		t.Fatalf("instances from mdevctl's files: %v %+v", err, ins)
	}
	for _, in := range ins {
		want := map[string]string{auto: "auto mbochs-small", manual: "manual mbochs-medium"}[in.UUID]
		if got := in.Start + " " + in.Type; got != want || in.Active || !in.Defined {
			t.Fatalf("%s: %q active=%v defined=%v, want %q defined", in.UUID, got, in.Active, in.Defined, want)
		}
	}

	k := hosttest.NewKernel(tr)
	var attrs []string
	m.W = attrKernel{Kernel: k, fail: "second", attrs: &attrs}
	steps, err := m.Restore(context.Background())
	res := map[string]string{}
	for _, s := range steps {
		res[s.Target] = s.Result
	}
	if err == nil || res[auto] != "failed" || res[manual] != "skipped" || !strings.Contains(err.Error(), "second=two") {
		t.Fatalf("restore with a rejected attribute: %v %+v", err, steps)
	}
	if _, ok := m.activeMdev(auto); ok {
		t.Fatal("an instance whose attribute failed was left active")
	}
	attrs = nil
	m.W = attrKernel{Kernel: k, attrs: &attrs}
	steps, err = m.Restore(context.Background())
	if err != nil {
		t.Fatalf("restore: %v %+v", err, steps)
	}
	for _, s := range steps {
		res[s.Target] = s.Result
	}
	if res[auto] != "applied" || res[manual] != "skipped" {
		t.Fatalf("restore steps %+v", steps)
	}
	if a, ok := m.activeMdev(auto); !ok || a.Type != "mbochs-small" {
		t.Fatalf("auto definition not started: %+v %v", a, ok)
	}
	if got := strings.Join(attrs, ","); got != "first=1,second=two" {
		t.Fatalf("attribute writes %s, want first=1,second=two", got)
	}
	if _, ok := m.activeMdev(manual); ok {
		t.Fatal("a start=manual definition was created")
	}
}
