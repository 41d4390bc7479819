package clitree

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host/hosttest"
)

// TestHotplugCLI drives attach and detach on the in-memory fake libvirt: usage errors exit 2,
// a live virtio-gpu exits 7 naming --config, the JSON has no nulls, a dry run prints the
// device XML and changes nothing, and a second attach or detach says it did nothing.
func TestHotplugCLI(t *testing.T) {
	f := fakeLibvirt(t)
	tr := hosttest.New(t)
	spec := deviceFreeVM(t, tr.Dir(), "hpcli")
	g := []string{"--host-root", tr.Dir()}
	if out, code := runCLI(t, append(g, "apply", spec)...); code != 0 {
		t.Fatalf("apply: exit %d\n%s", code, out)
	}
	for _, args := range [][]string{
		{"attach", "hpcli"},
		{"attach", "hpcli", "--virtio", "--gpu", "0000:01:00.0"},
		{"attach", "../etc", "--virtio"},
		{"detach", "hpcli"},
		{"detach", "hpcli", "virtio-gpu", "--timeout", "0s"},
	} {
		if out, code := runCLI(t, append(g, args...)...); code != 2 {
			t.Errorf("%v: exit %d, want 2\n%s", args, code, out)
		}
	}
	if out, code := runCLI(t, append(g, "attach", "hpcli", "--virtio")...); code != 7 {
		t.Fatalf("live virtio: exit %d, want 7\n%s", code, out)
	}
	if out, code := runCLI(t, append(g, "attach", "nosuch", "--virtio", "--config")...); code != 6 {
		t.Fatalf("unknown VM: exit %d, want 6\n%s", code, out)
	}
	before, _ := f.DomainXML(t.Context(), "hpcli")
	out, code := runCLI(t, append(g, "attach", "hpcli", "--virtio", "--config", "--dry-run")...)
	if code != 0 || !strings.Contains(out, "# dry run") || !strings.Contains(out, "<video>") {
		t.Fatalf("dry run: exit %d\n%s", code, out)
	}
	if after, _ := f.DomainXML(t.Context(), "hpcli"); after != before {
		t.Fatal("the dry run changed the domain")
	}
	for i, want := range []string{`"changed": true`, `already attached`} {
		out, code := runCLI(t, append(g, "-o", "json", "attach", "hpcli", "--virtio", "--config")...)
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("attach %d: exit %d, want %s\n%s", i, code, want, out)
		}
		if n := nulls(t, out); len(n) > 0 {
			t.Errorf("attach: null at %s\n%s", strings.Join(n, ", "), out)
		}
	}
	out, code = runCLI(t, append(g, "-o", "json", "detach", "hpcli", "virtio-gpu")...)
	var r map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r["changed"] != true {
		t.Fatalf("detach: exit %d\n%s", code, out)
	}
	if out, code := runCLI(t, append(g, "detach", "hpcli", "virtio-gpu")...); code != 0 || !strings.Contains(out, "detached already") {
		t.Fatalf("second detach: exit %d\n%s", code, out)
	}
	if out, code := runCLI(t, append(g, "detach", "hpcli", "0000:01:00.0")...); code != 6 {
		t.Fatalf("detach of nothing attached: exit %d, want 6\n%s", code, out)
	}
}
