package clitree

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
	migremote "github.com/vgpu-host/vgpu-host/mig/remote"
)

// inspectMIG is inspect -o json's mig section.
type inspectMIG struct {
	Available bool         `json:"available"`
	Note      string       `json:"note"`
	Source    string       `json:"source"`
	ReadAt    string       `json:"read_at"`
	GPUs      []MIGGPUView `json:"gpus"`
}

func inspectMIGOf(t *testing.T, root []string, flags ...string) inspectMIG {
	t.Helper()
	out, code := run(t, append(append(append([]string(nil), root...), "inspect", "-o", "json"), flags...)...)
	var rep struct {
		MIG inspectMIG `json:"mig"`
	}
	if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil {
		t.Fatalf("inspect -o json: exit %d, %v\n%s", code, err, out)
	}
	return rep.MIG
}

// TestInspectMIGFromCache: on a real NVIDIA host the NVML helper's start (~30 ms of nvmlInit)
// made inspect 3.7× lspci -nnk. inspect now shows MIG from the state cache that every NVML
// read (and the agent) writes, with its age, and starts no helper: here the helper is gone
// and the section is still there. inspect --mig asks NVML now; a mig apply refreshes the
// cache with what it made.
func TestInspectMIGFromCache(t *testing.T) {
	t.Parallel()
	tr := fakeHost(t)
	tr.Bind(host.MustParseAddress("0000:41:00.0"), "nvidia") // what NVML sees
	root := []string{"--host-root", tr.Dir()}
	mockNVML(t)
	setNVML(t, migremote.EnvMockState, filepath.Join(t.TempDir(), "nvml.json"))
	if m := inspectMIGOf(t, root); !m.Available || m.Source != "nvml" || len(m.GPUs) != 8 {
		t.Fatalf("first inspect (no cache): source %q, available %v, %d GPUs", m.Source, m.Available, len(m.GPUs))
	}
	if _, err := os.Stat(tr.Root.Path("run", "vgpu-host", "mig-state.json")); err != nil {
		t.Fatalf("inspect did not cache NVML's answer: %v", err)
	}
	helper := nvmlOf(t).Getenv(migremote.EnvHelper)
	setNVML(t, migremote.EnvHelper, filepath.Join(t.TempDir(), "none")) // no NVML from here on
	m := inspectMIGOf(t, root)
	if !m.Available || m.Source != "cache" || m.ReadAt == "" || len(m.GPUs) != 8 || !m.GPUs[0].Capable {
		t.Fatalf("inspect without the helper, from the cache: source %q, available %v, read_at %q, %d GPUs: %s", m.Source, m.Available, m.ReadAt, len(m.GPUs), m.Note)
	}
	out, code := run(t, append(root, "inspect")...)
	if code != 0 || !strings.Contains(out, "MIG (cached ") || !strings.Contains(out, "inspect --mig asks NVML now") ||
		!strings.Contains(out, "0000:07:00.0  Mock NVIDIA A100-SXM4-40GB  MIG off") {
		t.Errorf("inspect table from the cache: exit %d\n%s", code, out)
	}
	if m := inspectMIGOf(t, root, "--mig"); m.Available || !strings.Contains(m.Note, "vgpu-host-nvml not found") {
		t.Errorf("inspect --mig asks NVML (here: no helper): source %q, note %q", m.Source, m.Note)
	}

	setNVML(t, migremote.EnvHelper, helper)
	if out, code := run(t, append(root, "mig", "apply", "--gpu", "0000:07:00.0", "--profiles", "3g.20gb")...); code != 0 {
		t.Fatalf("mig apply: exit %d\n%s", code, out)
	}
	setNVML(t, migremote.EnvHelper, filepath.Join(t.TempDir(), "none"))
	m = inspectMIGOf(t, root)
	var g *MIGGPUView
	for i := range m.GPUs {
		if m.GPUs[i].Address == "0000:07:00.0" {
			g = &m.GPUs[i]
		}
	}
	if m.Source != "cache" || g == nil || !g.Enabled || len(g.Instances) != 1 || g.Instances[0].Profile != "3g.20gb" {
		t.Fatalf("after mig apply the cache shows %+v", g)
	}
}
