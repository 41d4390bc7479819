package ops

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/lifecycle"
	"github.com/vgpu-host/vgpu-host/virt"
)

// specOf is the example fallback VM, named name, its disk under dir.
func specOf(t *testing.T, dir, name string) []byte {
	t.Helper()
	ex, err := os.ReadFile(filepath.Join("..", "examples", "virtio-gpu-fallback.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(ex), "name: vgpu-fallback", "name: "+name, 1)
	return []byte(strings.Replace(s, "/var/lib/libvirt/images/vgpu-fallback.qcow2", filepath.Join(dir, name+".qcow2"), 1))
}

// TestSpecChecksInOrder: a spec's mistakes come first, then --virt-type, then --force, then
// libvirt, as the CLI always reported them; spec content is named by its Path.
func TestSpecChecksInOrder(t *testing.T) {
	tr := hosttest.New(t)
	env := fakeEnv(t, tr)
	opened := 0
	env.OpenConn = func() (virt.Conn, error) { opened++; return nil, fmt.Errorf("libvirt down: %w", host.ErrUnsupported) }
	good := specOf(t, tr.Dir(), "a")
	big := append([]byte("# "), make([]byte, host.MaxSpecSize)...)
	for _, c := range []struct {
		req   Request
		code  int
		words string
	}{
		{&ApplyRequest{}, ExitUsage, "apply needs at least one SPEC file"},
		{&PlanRequest{Specs: []Spec{{Path: "spec.yaml", Data: []byte("kind: nope\n")}}, VirtType: "xen"}, ExitUsage, "spec.yaml: "},
		{&ApplyRequest{Specs: []Spec{{Path: "spec.yaml", Data: big}}}, ExitUsage, "read spec: read spec.yaml: file too large: it is larger than the limit of 1 MiB"},
		{&ApplyRequest{Specs: []Spec{{Path: "x.yaml", Data: good}, {Path: "y.yaml", Data: good}}}, ExitUsage, `x.yaml and y.yaml both name VM "a"`},
		{&ApplyRequest{Specs: []Spec{{Path: "spec.yaml", Data: good}}, VirtType: "xen", Force: []string{"nope"}}, ExitUsage, `--virt-type "xen": use kvm or qemu`},
		{&PlanRequest{Specs: []Spec{{Path: "spec.yaml", Data: good}}, Force: []string{"boot-vga,nope"}}, ExitUsage, `--force "nope": name the check to go past`},
		{&ApplyRequest{Specs: []Spec{{Path: "spec.yaml", Data: good}}, VirtType: "qemu"}, ExitUnsupported, "libvirt down"},
	} {
		v, err := Run(context.Background(), env, c.req)
		if v != nil || ExitCode(err) != c.code || !strings.Contains(err.Error(), c.words) {
			t.Errorf("%s (case %q): %v, %v; want exit %d", c.req.Op(), c.words, v, err, c.code)
		}
	}
	if opened != 1 {
		t.Errorf("libvirt opened %d times; want once, by the last request only", opened)
	}
}

// TestPlanApplyDestroy on a fake host and libvirt: the plan's steps, the apply's as step
// events, and the destroy that undoes them.
func TestPlanApplyDestroy(t *testing.T) {
	tr := hosttest.New(t)
	var events []Event
	env := kernelEnv(t, tr, &events)
	spec := []Spec{{Path: "spec.yaml", Data: specOf(t, tr.Dir(), "b")}}
	ctx := context.Background()
	v, err := Run(ctx, env, &PlanRequest{Specs: spec, NoStart: true})
	plans, ok := v.([]*lifecycle.VMPlan)
	if err != nil || !ok || len(plans) != 1 || plans[0].VM != "b" || len(plans[0].Steps) == 0 || len(events) != 0 {
		t.Fatalf("plan: %#v, %v, events %v", v, err, events)
	}
	res, err := Apply(ctx, env, ApplyRequest{Specs: spec, NoStart: true})
	if err != nil || len(res) != 1 || res[0].VM != "b" || !res[0].Changed {
		t.Fatalf("apply: %+v, %v", res, err)
	}
	steps := 0
	for _, e := range events {
		if e.Kind == EventStep && e.Op == "apply" && strings.HasPrefix(e.Message, "b: ") && !e.Partial {
			steps++
		}
	}
	if steps == 0 {
		t.Errorf("apply sent no step events: %+v", events)
	}
	d, err := Destroy(ctx, env, DestroyRequest{Names: []string{"b"}})
	if err != nil || len(d) != 1 || d[0].VM != "b" || len(d[0].Undone) == 0 {
		t.Errorf("destroy: %+v, %v", d, err)
	}
	if _, err := Destroy(ctx, env, DestroyRequest{Names: []string{"b"}}); !errors.Is(err, host.ErrNotFound) {
		t.Errorf("destroy again: %v; want not found", err)
	}
}

func TestRequestLogShowsNoSpecContent(t *testing.T) {
	r := ApplyRequest{Specs: []Spec{{Path: "spec.yaml", Data: []byte("secret: 1")}}, NoStart: true}
	if s := fmt.Sprintf("%+v", r); strings.Contains(s, "secret") || !strings.Contains(s, "spec.yaml") {
		t.Errorf("%%+v of an apply request: %s; want the spec's path, not its content", s)
	}
}

func TestStepWriterLines(t *testing.T) {
	var got []Event
	w := &stepWriter{env: Env{Progress: func(e Event) { got = append(got, e) }}, op: "apply"}
	fmt.Fprint(w, "one\ntw")
	fmt.Fprint(w, "o\nthree")
	w.flush()
	if len(got) != 3 || got[0].Message != "one" || got[1].Message != "two" || got[2].Message != "three" || !got[2].Partial || got[1].Partial {
		t.Errorf("events %+v; want one, two and a partial three", got)
	}
}
