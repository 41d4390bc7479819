package clitree

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/virt"
)

// fakeLibvirt makes every libvirt command of this test talk to an in-memory virt.Fake instead
// of the helper vgpu-host-libvirt.
func fakeLibvirt(t *testing.T) *virt.Fake {
	t.Helper()
	f := virt.NewFake("qemu")
	withConn(t, f.URI(), f)
	// A fake --host-root must name its libvirt: this one.
	t.Setenv("VGPU_HOST_CONNECT", f.URI())
	return f
}

// deviceFreeVM writes a spec for a VM that gets no host device on a host without a GPU: the
// fallback example, named name, with its disk path inside the test's root.
func deviceFreeVM(t *testing.T, dir, name string) string {
	t.Helper()
	ex, err := os.ReadFile(filepath.Join("..", "..", "examples", "virtio-gpu-fallback.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(ex), "name: vgpu-fallback", "name: "+name, 1)
	s = strings.Replace(s, "/var/lib/libvirt/images/vgpu-fallback.qcow2", filepath.Join(dir, name+".qcow2"), 1)
	p := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// nulls lists every JSON path in doc whose value is null: the documented arrays must be []
// when empty, and no field of these outputs is documented as nullable.
func nulls(t *testing.T, doc string) []string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(doc), &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, doc)
	}
	var out []string
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case nil:
			out = append(out, path)
		case []any:
			for i, e := range x {
				walk(fmt.Sprintf("%s[%d]", path, i), e)
			}
		case map[string]any:
			for k, e := range x {
				walk(path+"."+k, e)
			}
		}
	}
	walk("$", v)
	sort.Strings(out)
	return out
}

// A VM without host devices: every array of plan, apply (first run and unchanged re-run),
// status and destroy is an array, never null; destroy's released is [].
func TestLifecycleJSONArraysNeverNull(t *testing.T) {
	fakeLibvirt(t)
	tr := hosttest.New(t)
	spec := deviceFreeVM(t, tr.Dir(), "nodev")
	g := []string{"--host-root", tr.Dir(), "-o", "json"}

	for _, c := range []struct {
		what string
		args []string
		keys []string // array keys of the (first) record that must be present
	}{
		{"plan", []string{"plan", spec}, []string{"claims", "steps"}},
		{"apply", []string{"apply", spec}, []string{"claims", "steps"}},
		{"apply unchanged", []string{"apply", spec}, []string{"claims", "steps"}},
		{"status", []string{"status"}, []string{"claims"}},
		{"destroy", []string{"destroy", "nodev"}, []string{"undone", "released"}},
	} {
		out, code := runCLI(t, append(g, c.args...)...)
		if code != 0 {
			t.Fatalf("%s: exit %d\n%s", c.what, code, out)
		}
		if n := nulls(t, out); len(n) > 0 {
			t.Errorf("%s: null at %s\n%s", c.what, strings.Join(n, ", "), out)
		}
		var recs []map[string]any
		if err := json.Unmarshal([]byte(out), &recs); err != nil || len(recs) != 1 {
			t.Fatalf("%s: want a list of one record: %v\n%s", c.what, err, out)
		}
		for _, k := range c.keys {
			if _, ok := recs[0][k].([]any); !ok {
				t.Errorf("%s: %q is %#v, want an array", c.what, k, recs[0][k])
			}
		}
		switch c.what {
		case "apply unchanged":
			if recs[0]["changed"] != false {
				t.Errorf("re-apply of an unchanged spec: changed = %v", recs[0]["changed"])
			}
		case "destroy":
			if rel := recs[0]["released"].([]any); len(rel) != 0 {
				t.Errorf("destroy of a VM without devices released %v", rel)
			}
			if u, _ := recs[0]["undone"].([]any); len(u) == 0 {
				t.Errorf("destroy undid nothing: %s", out)
			}
		}
	}
	// With no VM left, status is an empty list.
	if out, code := runCLI(t, append(g, "status")...); code != 0 || strings.TrimSpace(out) != "[]" {
		t.Errorf("status with no VM: exit %d, %q, want []", code, out)
	}
}

// A destroy or apply that fails prints nothing on stdout: the error goes to stderr and the
// exit code says what happened. Records are printed only for VMs that succeeded.
func TestLifecycleJSONNothingOnFailure(t *testing.T) {
	f := fakeLibvirt(t)
	tr := hosttest.New(t)
	spec := deviceFreeVM(t, tr.Dir(), "fails")
	other := deviceFreeVM(t, tr.Dir(), "other")
	g := []string{"--host-root", tr.Dir(), "-o", "json"}

	if out, code := runCLI(t, append(g, "destroy", "nosuchvm")...); code != exitNotFound || out != "" {
		t.Errorf("destroy of an unknown VM: exit %d, stdout %q; want %d and nothing", code, out, exitNotFound)
	}

	f.Fail("Define", errors.New("injected"))
	if out, code := runCLI(t, append(g, "apply", spec)...); code != exitFailure || out != "" {
		t.Errorf("failed apply: exit %d, stdout %q; want %d and nothing", code, out, exitFailure)
	}
	f.Fail("Define", nil)

	for _, s := range []string{spec, other} {
		if out, code := runCLI(t, append(g, "apply", s)...); code != 0 {
			t.Fatalf("apply %s: exit %d\n%s", s, code, out)
		}
	}
	f.Fail("Undefine", errors.New("injected"))
	out, code := runCLI(t, append(g, "destroy", "fails")...)
	if code != exitFailure || out != "" {
		t.Errorf("failed destroy: exit %d, stdout %q; want %d and nothing", code, out, exitFailure)
	}
	// table output too: a failed destroy is not reported as destroyed.
	if out, _ := runCLI(t, "--host-root", tr.Dir(), "destroy", "fails"); strings.Contains(out, "destroyed") {
		t.Errorf("failed destroy printed %q", out)
	}
	f.Fail("Undefine", nil)

	// Two VMs, one unknown: the destroyed one is reported, the error decides the exit code.
	out, code = runCLI(t, append(g, "destroy", "fails", "nosuchvm")...)
	var recs []map[string]any
	if code != exitNotFound || json.Unmarshal([]byte(out), &recs) != nil || len(recs) != 1 || recs[0]["vm"] != "fails" {
		t.Errorf("destroy fails nosuchvm: exit %d, stdout %q; want %d and the record of fails only", code, out, exitNotFound)
	}
	if n := nulls(t, out); len(n) > 0 {
		t.Errorf("null at %s", strings.Join(n, ", "))
	}
	if out, code := runCLI(t, append(g, "destroy", "other")...); code != 0 || len(nulls(t, out)) > 0 {
		t.Errorf("destroy other: exit %d\n%s", code, out)
	}
}
