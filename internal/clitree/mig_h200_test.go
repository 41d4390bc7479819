package clitree

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/mig"
	migremote "github.com/vgpu-host/vgpu-host/mig/remote"
)

// h200NVML points vgpu-host at the NVML helper's test build replaying a real H200's NVML
// answers (../shared/fixtures/nvidia-h200/nvml-facts.json: one H200 at 0000:00:06.0, MIG
// off), with the replay's state carried across commands in a file of the test's.
func h200NVML(t *testing.T) {
	t.Helper()
	facts := hosttest.SharedFixture(t, "nvidia-h200/nvml-facts.json")
	mockNVML(t)
	setNVML(t, migremote.EnvMock, "")
	setNVML(t, migremote.EnvFacts, facts)
	setNVML(t, migremote.EnvMockState, filepath.Join(t.TempDir(), "nvml.json"))
}

// mig show, plan and apply on a real H200's numbers: the names and IDs nvidia-smi prints,
// placements in memory slices, and the lists planned and applied.
func TestMIGOnH200(t *testing.T) {
	t.Parallel()
	h200NVML(t)
	out, code := run(t, "mig", "show")
	if code != 0 {
		t.Fatalf("mig show: exit %d\n%s", code, out)
	}
	for _, want := range []string{"NVIDIA H200  MIG off\n  virtualization Pass-Through: this system is a VM the GPU is passed through to", "7 compute slices on 8 memory slices",
		"1g.18gb ", "1g.18gb+me ", "1g.35gb ", "2g.35gb ", "3g.71gb ", "4g.71gb ", "7g.141gb ", "{0,1,2,3,4,5,6}:1", "{0,2,4,6}:2", "{0}:8"} {
		if !strings.Contains(out, want) {
			t.Errorf("mig show lacks %q\n%s", want, out)
		}
	}
	for _, bad := range []string{"-me", "+me.all", "8g.", "1g.71gb", "1g.141gb"} {
		if strings.Contains(out, bad) {
			t.Errorf("mig show prints %q\n%s", bad, out)
		}
	}
	out, code = run(t, "mig", "show", "-o", "json")
	var view []MIGGPUView
	if err := json.Unmarshal([]byte(out), &view); code != 0 || err != nil || len(view) != 1 {
		t.Fatalf("mig show -o json: exit %d, %v\n%s", code, err, out)
	}
	ids := map[string]int{}
	for _, p := range view[0].Profiles {
		ids[p.Name] = p.ID
		if p.Name == "7g.141gb" && (p.ComputeSlices != 7 || p.MemorySlices != 8 || p.Index != mig.Profile7Slice) {
			t.Errorf("7g.141gb: %+v", p)
		}
	}
	if want := map[string]int{"1g.18gb": 19, "1g.18gb+me": 20, "1g.35gb": 15, "2g.35gb": 14, "3g.71gb": 9, "4g.71gb": 5, "7g.141gb": 0}; len(ids) != len(want) {
		t.Errorf("profiles %v, want %v", ids, want)
	} else {
		for n, id := range want {
			if ids[n] != id {
				t.Errorf("%s: ID %d, want %d", n, ids[n], id)
			}
		}
	}

	for _, tc := range []struct {
		profiles string
		want     []string
	}{
		{"3g.71gb*2", []string{"create a 3g.71gb GPU instance at slices 0-3", "create a 3g.71gb GPU instance at slices 4-7"}},
		{"1g.18gb*7", []string{"create a 1g.18gb GPU instance at slices 0 ", "create a 1g.18gb GPU instance at slices 6 "}},
		{"2g.35gb,1g.35gb*2", []string{"create a 2g.35gb GPU instance at slices 0-1", "create a 1g.35gb GPU instance at slices 2-3", "create a 1g.35gb GPU instance at slices 4-5"}},
		{"MIG 4g.71gb,9", []string{"create a 4g.71gb GPU instance at slices 0-3", "create a 3g.71gb GPU instance at slices 4-7"}},
	} {
		out, code := run(t, "mig", "plan", "--gpu", "0000:00:06.0", "--profiles", tc.profiles)
		if code != 0 || !strings.Contains(out, "1. enable MIG mode on 0000:00:06.0") {
			t.Errorf("mig plan %s: exit %d\n%s", tc.profiles, code, out)
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("mig plan %s lacks %q\n%s", tc.profiles, w, out)
			}
		}
	}
	out, code = run(t, "mig", "apply", "--gpu", "0", "--profiles", "1g.18gb*7", "--dry-run")
	if code != 0 || strings.Count(out, "would create a 1g.18gb GPU instance") != 7 {
		t.Errorf("mig apply --dry-run: exit %d\n%s", code, out)
	}
	if out, code := run(t, "mig", "plan", "--gpu", "0", "--profiles", "1g.18gb*7"); code != 0 || !strings.Contains(out, "enable MIG mode") {
		t.Errorf("the dry run changed the replay: exit %d\n%s", code, out)
	}
	for _, tc := range []struct {
		profiles string
		code     int
		msg      string
	}{
		{"1g.18gb*8", exitBusy, "8× 1g.18gb do not fit: it holds at most 7"},
		{"4g.71gb*2", exitBusy, "2× 4g.71gb do not fit: it holds at most 1"},
		{"3g.40gb", exitNotFound, "did you mean"},
	} {
		out, err := runErr(t, "mig", "plan", "--gpu", "0000:00:06.0", "--profiles", tc.profiles)
		if exitCode(err) != tc.code || err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("mig plan %s: exit %d (%v), want %d with %q\n%s", tc.profiles, exitCode(err), err, tc.code, tc.msg, out)
		}
	}

	// Applied through the helper, kept across commands, shown with nvidia-smi's names.
	if out, code := run(t, "mig", "apply", "--gpu", "0000:00:06.0", "--profiles", "2g.35gb,1g.35gb*2"); code != 0 {
		t.Fatalf("mig apply: exit %d\n%s", code, out)
	}
	out, code = run(t, "mig", "plan", "--gpu", "0000:00:06.0", "--profiles", "1g.35gb,MIG 2g.35gb,15")
	if code != 0 || !strings.Contains(out, "nothing to do: 3 GPU instance(s) already as wanted") {
		t.Errorf("plan after apply: exit %d\n%s", code, out)
	}
	out, code = run(t, "mig", "show", "0000:00:06.0")
	if code != 0 || !strings.Contains(out, "MIG on") || strings.Count(out, "1g.35gb  {") != 2 || !strings.Contains(out, "2g.35gb  {0}:2") {
		t.Errorf("show after apply: exit %d\n%s", code, out)
	}
	// Switch: the 2g.35gb stays, the two 1g.35gb give way to a 3g.71gb.
	out, code = run(t, "-o", "json", "mig", "apply", "--gpu", "0000:00:06.0", "--profiles", "2g.35gb,3g.71gb")
	var done mig.Changes
	if err := json.Unmarshal([]byte(out), &done); code != 0 || err != nil {
		t.Fatalf("switch: exit %d, %v\n%s", code, err, out)
	}
	if len(done.Kept) != 1 || done.Kept[0].Profile != "2g.35gb" || len(done.Steps) != 3 || done.Steps[2].Profile != "3g.71gb" || done.Steps[2].Placement.Start != 4 {
		t.Errorf("switch: kept %+v, steps %+v", done.Kept, done.Steps)
	}
}

const h200Layout = `apiVersion: vgpu-host/v1
kind: HostLayout
configs:
  small:
    default: true
    gpus:
      - select: {address: "0000:00:06.0"}
        mode: mig
        profiles: [{profile: 1g.18gb, count: 7}]
  halves:
    gpus:
      - select: {address: "0000:00:06.0"}
        mode: mig
        profiles: [{profile: "MIG 3g.71gb", count: 1}, {profile: "5", count: 1}]
  too-much:
    gpus:
      - select: {address: "0000:00:06.0"}
        mode: mig
        profiles: [{profile: 4g.71gb, count: 2}]
`

// A host layout with MIG on a real H200's numbers: planned, applied, planned again (nothing to
// do), switched by name and profile ID, and an impossible one refused by plan.
func TestLayoutMIGOnH200(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	tr.DatacenterGPU("0000:00:01.0", "0000:00:06.0", "nvidia", 0)
	withKernel(t, tr)
	h200NVML(t)
	f := filepath.Join(t.TempDir(), "layout.yaml")
	if err := os.WriteFile(f, []byte(h200Layout), 0o644); err != nil {
		t.Fatal(err)
	}
	g := []string{"--host-root", tr.Dir()}
	out, code := run(t, append(g, "host", "layout", "plan", f)...)
	if code != 0 || !strings.Contains(out, "0000:00:06.0") || !strings.Contains(out, "create a 1g.18gb GPU instance at slices 6") {
		t.Fatalf("layout plan: exit %d\n%s", code, out)
	}
	// The layout's dry run lists sysfs writes only (not the MIG steps plan prints); it must
	// leave NVML alone.
	if out, code := run(t, append(g, "host", "layout", "apply", f, "--dry-run")...); code != 0 {
		t.Fatalf("layout apply --dry-run: exit %d\n%s", code, out)
	}
	if out, code := run(t, append(g, "host", "layout", "plan", f)...); code != 0 || !strings.Contains(out, "create a 1g.18gb GPU instance at slices 0 ") {
		t.Fatalf("layout plan after the dry run: exit %d\n%s", code, out)
	}
	if out, code := run(t, append(g, "host", "layout", "apply", f)...); code != 0 {
		t.Fatalf("layout apply: exit %d\n%s", code, out)
	}
	if out, code := run(t, append(g, "host", "layout", "plan", f)...); code != 0 || !strings.Contains(out, "nothing to do") {
		t.Fatalf("layout plan after apply: exit %d\n%s", code, out)
	}
	if out, code := run(t, append(g, "host", "layout", "apply", f, "--config", "halves")...); code != 0 {
		t.Fatalf("layout apply halves: exit %d\n%s", code, out)
	}
	out, code = run(t, "-o", "json", "mig", "show", "0000:00:06.0")
	var view []MIGGPUView
	if err := json.Unmarshal([]byte(out), &view); code != 0 || err != nil || len(view) != 1 {
		t.Fatalf("mig show: exit %d, %v\n%s", code, err, out)
	}
	var got []string
	for _, in := range view[0].Instances {
		got = append(got, in.Profile+"@"+in.Placement.String())
	}
	if strings.Join(got, " ") != "3g.71gb@4-7 4g.71gb@0-3" && strings.Join(got, " ") != "4g.71gb@0-3 3g.71gb@4-7" {
		t.Errorf("after halves NVML holds %v", got)
	}
	_, err := runErr(t, append(g, "host", "layout", "plan", f, "--config", "too-much")...)
	if exitCode(err) != exitBusy || !strings.Contains(err.Error(), "2× 4g.71gb do not fit") {
		t.Errorf("too-much: exit %d: %v", exitCode(err), err)
	}
}

// inspect's DEVICE cell on the real H200 host's capture, whose pci.ids (Debian 12's) does not
// list the H200: lspci's "NVIDIA Corporation Device 2335" without NVML, and the name NVML gives
// the GPU ("NVIDIA H200", from the replay of its answers) once NVML is there, with --mig and
// from the MIG state cache a run left, in the table and in `inspect ADDR`.
func TestInspectNamesTheH200(t *testing.T) {
	t.Parallel()
	dir := hosttest.RealGPUSnapshot(t, "nvidia-h200/sysfs-snapshot.tar.gz").Dir()
	row := func(args ...string) string {
		t.Helper()
		out, code := run(t, append([]string{"--host-root", dir, "inspect"}, args...)...)
		if code != 0 {
			t.Fatalf("inspect %v: exit %d\n%s", args, code, out)
		}
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "0000:00:06.0 ") {
				return l
			}
		}
		t.Fatalf("inspect %v: no row of 0000:00:06.0\n%s", args, out)
		return ""
	}
	if l := row(); !strings.Contains(l, "  NVIDIA Corporation Device 2335  nvidia  ") {
		t.Errorf("without NVML: %q", l)
	}
	// check names the GPU as inspect's table does: lspci's words until NVML's name is in the
	// MIG state cache, then NVML's (from the cache only: check never starts the helper).
	checkNames := func(want string) {
		t.Helper()
		out, code := run(t, "--host-root", dir, "check")
		line := ""
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "gpu 0000:00:06.0 ") {
				line = l
			}
		}
		if code != exitNotReady || !strings.Contains(line, "  "+want+" [paravirtual-only]") {
			t.Errorf("check: exit %d, want the GPU named %q\n%s", code, want, out)
		}
	}
	checkNames("NVIDIA Corporation Device 2335")
	h200NVML(t)
	checkNames("NVIDIA Corporation Device 2335") // NVML is there, but no cache yet
	if l := row("--mig"); !strings.Contains(l, "  NVIDIA H200  nvidia  ") {
		t.Errorf("with --mig: %q", l)
	}
	if l := row(); !strings.Contains(l, "  NVIDIA H200  nvidia  ") {
		t.Errorf("from the MIG cache: %q", l)
	}
	checkNames("NVIDIA H200")
	// inspect ADDR: the same name and the GPU's part of the MIG section, from the cache and
	// from NVML now; in JSON, device_name stays pci.ids' (none) and "mig" has the one GPU.
	for _, args := range [][]string{nil, {"--mig"}} {
		out, code := run(t, append([]string{"--host-root", dir, "inspect", "0000:00:06.0"}, args...)...)
		if code != 0 || !strings.Contains(out, "10de:2335 NVIDIA H200\n") ||
			!strings.Contains(out, "\n  0000:00:06.0  NVIDIA H200  MIG off  instances: -  room for: 7×1g.18gb ") {
			t.Errorf("inspect 0000:00:06.0 %v: exit %d\n%s", args, code, out)
		}
		if src := map[bool]string{false: "(cached ", true: "(NVML;"}[len(args) > 0]; !strings.Contains(out, "\nMIG "+src) {
			t.Errorf("inspect 0000:00:06.0 %v: no MIG section from %q\n%s", args, src, out)
		}
	}
	out, code := run(t, "--host-root", dir, "-o", "json", "inspect", "0000:00:06.0")
	var rep struct {
		Device struct {
			DeviceName string `json:"device_name"`
		} `json:"device"`
		MIG *struct {
			Source string       `json:"source"`
			GPUs   []MIGGPUView `json:"gpus"`
		} `json:"mig"`
	}
	if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil || rep.Device.DeviceName != "" || rep.MIG == nil ||
		rep.MIG.Source != "cache" || len(rep.MIG.GPUs) != 1 || rep.MIG.GPUs[0].Name != "NVIDIA H200" || rep.MIG.GPUs[0].Address != "0000:00:06.0" {
		t.Errorf("inspect -o json 0000:00:06.0: exit %d, %v: %+v\n%s", code, err, rep, out)
	}
	// Any other function of the host has no MIG section.
	out, code = run(t, "--host-root", dir, "-o", "json", "inspect", "0000:00:00.0")
	if code != 0 || strings.Contains(out, `"mig"`) {
		t.Errorf("inspect -o json 0000:00:00.0: exit %d\n%s", code, out)
	}
}
