package clitree

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/internal/testenv"
	"github.com/vgpu-host/vgpu-host/mig"
	migremote "github.com/vgpu-host/vgpu-host/mig/remote"
)

// mockNVML points the test's trees (setNVML) at the NVML helper's test build (tag nvmlmock)
// serving go-nvml's dgxa100 mock, built once for the test binary (nvmlHelper). Each command
// starts its own helper, so each starts from the mock's fresh state (all eight A100-40GB with
// MIG off and no instances) unless the test sets migremote.EnvMockState.
func mockNVML(t *testing.T) {
	t.Helper()
	setNVML(t, migremote.EnvHelper, nvmlHelper(t, "nvmlmock"))
	setNVML(t, migremote.EnvMock, "dgxa100")
}

// nvmlHelpers are the builds of the NVML helper the tests share, by build tags ("" is the
// release build): every test of it starts its own process of the same file. TestMain removes
// them.
var nvmlHelpers = &testenv.Builds{Pkg: "../../cmd/vgpu-host-nvml", Name: migremote.HelperName}

// nvmlHelper returns the NVML helper built with tags, building it on first use.
func nvmlHelper(t *testing.T, tags string) string {
	t.Helper()
	return nvmlHelpers.Get(t, tags)
}

func TestMIGCommands(t *testing.T) {
	t.Parallel()
	mockNVML(t)
	out, code := run(t, "mig", "show", "0000:01:00.0")
	if code != 0 || !strings.Contains(out, "MIG off") || !strings.Contains(out, "3g.20gb") || !strings.Contains(out, "{0,4}:4") {
		t.Fatalf("mig show: exit %d\n%s", code, out)
	}
	if strings.Contains(out, "virtualization") { // the DGX A100 mock is bare metal: "None", not shown
		t.Errorf("mig show on the DGX A100 mock names a virtualization mode:\n%s", out)
	}
	out, code = run(t, "mig", "show", "-o", "json")
	var view []MIGGPUView
	if err := json.Unmarshal([]byte(out), &view); code != 0 || err != nil || len(view) != 8 {
		t.Fatalf("mig show -o json: exit %d, %v\n%s", code, err, out)
	}
	for _, f := range view[0].Free {
		if f.Profile == "1g.5gb" && (f.Fits != 7 || len(f.Placements) != 7) {
			t.Errorf("1g.5gb free on an empty A100: %+v, want 7 fitting", f)
		}
	}

	out, code = run(t, "mig", "plan", "--gpu", "0000:01:00.0", "--profiles", "3g.20gb,4g.20gb")
	if code != 0 || !strings.Contains(out, "1. enable MIG mode on 0000:01:00.0") ||
		!strings.Contains(out, "create a 3g.20gb GPU instance at slices 4-7") || !strings.Contains(out, "create a 4g.20gb GPU instance at slices 0-3") {
		t.Errorf("mig plan: exit %d\n%s", code, out)
	}
	out, code = run(t, "mig", "apply", "--gpu", "0", "--profiles", "1g.5gb*7", "--dry-run")
	if code != 0 || strings.Count(out, "would create a 1g.5gb") != 7 {
		t.Errorf("mig apply --dry-run: exit %d\n%s", code, out)
	}
	out, code = run(t, "-o", "json", "mig", "apply", "--gpu", "0000:00:00.0", "--profiles", "1g.5gb×7")
	var done mig.Changes
	if err := json.Unmarshal([]byte(out), &done); code != 0 || err != nil || len(done.Steps) != 8 {
		t.Fatalf("mig apply: exit %d, %v\n%s", code, err, out)
	}
	seen := map[int]bool{}
	for _, s := range done.Steps[1:] {
		if s.Op != mig.OpCreate || seen[s.Placement.Start] {
			t.Errorf("apply step %+v", s)
		}
		seen[s.Placement.Start] = true
	}

	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"--profiles", "4g.20gb,4g.20gb"}, exitBusy, "2× 4g.20gb do not fit: it holds at most 1"},
		{[]string{"--profiles", "1g.5gb*8"}, exitBusy, "8× 1g.5gb do not fit: it holds at most 7"},
		{[]string{"--profiles", "3g.40gb,4g.40gb"}, exitNotFound, "did you mean"},
		{[]string{"--profiles", "1g.5gb*x"}, exitUsage, "NAME*COUNT"},
	} {
		out, err := runErr(t, append([]string{"mig", "apply", "--gpu", "0000:02:00.0"}, tc.args...)...)
		if code := exitCode(err); code != tc.code || err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("mig apply %v: exit %d (%v), want %d with %q\n%s", tc.args, exitCode(err), err, tc.code, tc.msg, out)
		}
	}
	if out, code := run(t, "mig", "plan", "--gpu", "0000:63:00.0", "--profiles", "1g.5gb"); code != exitNotFound {
		t.Errorf("unknown GPU: exit %d\n%s", code, out)
	}
}

func TestMIGWithoutNVML(t *testing.T) {
	t.Parallel()
	setNVML(t, migremote.EnvHelper, filepath.Join(t.TempDir(), "none"))
	_, err := runErr(t, "mig", "show")
	if exitCode(err) != exitUnsupported || !strings.Contains(err.Error(), "vgpu-host-nvml not found") {
		t.Errorf("mig show without the helper: exit %d: %v", exitCode(err), err)
	}
}

// inspect reports MIG when the host has an NVIDIA GPU on NVIDIA's driver and NVML answers, and
// says quietly why not otherwise, exiting 0 either way. With every NVIDIA GPU on another driver
// (vfio-pci, nouveau) NVML has nothing to say: no helper is started and there is no section.
func TestInspectReportsMIG(t *testing.T) {
	t.Parallel()
	tr := fakeHost(t) // has an A100-like NVIDIA GPU at 0000:41:00.0 on vfio-pci, an RTX on nouveau
	setNVML(t, migremote.EnvHelper, filepath.Join(t.TempDir(), "none"))
	setNVML(t, migremote.EnvMock, "dgxa100") // ask even under --host-root
	out, code := run(t, "--host-root", tr.Dir(), "inspect")
	if code != 0 || strings.Contains(out, "\nMIG") {
		t.Errorf("inspect with no GPU on nvidia: exit %d, and a MIG section (a helper was asked)\n%s", code, out)
	}
	if out, code := run(t, "--host-root", tr.Dir(), "inspect", "-o", "json"); code != 0 || strings.Contains(out, `"mig"`) {
		t.Errorf("inspect -o json with no GPU on nvidia: exit %d, and a mig section\n%s", code, out)
	}
	tr.Bind(host.MustParseAddress("0000:41:00.0"), "nvidia")
	out, code = run(t, "--host-root", tr.Dir(), "inspect")
	if code != 0 || !strings.Contains(out, "MIG: ") || !strings.Contains(out, "vgpu-host-nvml not found") {
		t.Errorf("inspect without the helper: exit %d\n%s", code, out)
	}
	mockNVML(t)
	out, code = run(t, "--host-root", tr.Dir(), "inspect", "-o", "json")
	var rep struct {
		Devices []json.RawMessage `json:"devices"`
		MIG     struct {
			Available bool         `json:"available"`
			GPUs      []MIGGPUView `json:"gpus"`
		} `json:"mig"`
	}
	if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil {
		t.Fatalf("inspect -o json: exit %d, %v\n%s", code, err, out)
	}
	if !rep.MIG.Available || len(rep.MIG.GPUs) != 8 || len(rep.Devices) == 0 || !rep.MIG.GPUs[0].Capable || len(rep.MIG.GPUs[0].Free) == 0 {
		t.Errorf("inspect's mig: %+v", rep.MIG)
	}
	out, code = run(t, "--host-root", tr.Dir(), "inspect")
	if code != 0 || !strings.Contains(out, "0000:07:00.0  Mock NVIDIA A100-SXM4-40GB  MIG off  instances: -  room for: 7×1g.5gb") {
		t.Errorf("inspect table: exit %d\n%s", code, out)
	}
}

// With VGPU_HOST_NVML_MOCK_STATE the mock's state carries from one command (one helper
// process) to the next: apply, then plan has nothing to do and show lists the instances; a
// switch destroys only what must go, keeping instance ids.
func TestMIGStateAcrossCommands(t *testing.T) {
	t.Parallel()
	mockNVML(t)
	setNVML(t, migremote.EnvMockState, filepath.Join(t.TempDir(), "nvml.json"))
	if out, code := run(t, "mig", "apply", "--gpu", "0000:01:00.0", "--profiles", "3g.20gb,4g.20gb"); code != 0 {
		t.Fatalf("apply: exit %d\n%s", code, out)
	}
	out, code := run(t, "mig", "plan", "--gpu", "0000:01:00.0", "--profiles", "4g.20gb,3g.20gb")
	if code != 0 || !strings.Contains(out, "nothing to do: 2 GPU instance(s) already as wanted") {
		t.Errorf("plan after apply: exit %d\n%s", code, out)
	}
	out, code = run(t, "-o", "json", "mig", "show", "1")
	var view []MIGGPUView
	if err := json.Unmarshal([]byte(out), &view); code != 0 || err != nil || len(view) != 1 || len(view[0].Instances) != 2 || !view[0].Enabled {
		t.Fatalf("show after apply: exit %d, %v\n%s", code, err, out)
	}
	var id4g int
	for _, in := range view[0].Instances {
		if in.Profile == "4g.20gb" {
			id4g = in.ID
		}
	}
	out, code = run(t, "-o", "json", "mig", "apply", "--gpu", "1", "--profiles", "4g.20gb,2g.10gb,1g.5gb")
	var done mig.Changes
	if err := json.Unmarshal([]byte(out), &done); code != 0 || err != nil {
		t.Fatalf("switch: exit %d, %v\n%s", code, err, out)
	}
	if len(done.Kept) != 1 || done.Kept[0].ID != id4g || len(done.Steps) != 3 || done.Steps[0].Op != mig.OpDestroy || done.Steps[0].Profile != "3g.20gb" {
		t.Errorf("switch: kept %+v, steps %+v; want the 4g.20gb (id %d) kept, the 3g.20gb destroyed, two creates", done.Kept, done.Steps, id4g)
	}
}

// mdev place counts a MIG-backed type by NVML's view when the helper answers: GPU 1 of the mock
// holds 1g.5gb at 0 and 1 and a 3g.20gb at 4-7, so one A100-3-20C fits, where NVIDIA's
// documented geometry alone would say two.
func TestMdevPlaceUsesNVML(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	pf := tr.NvidiaSRIOVGPU("0000:00:01.0", "0000:01:00.0", 0, 4, []hosttest.NvidiaVGPUType{
		{ID: 1300, Name: "NVIDIA A100-1-5C", MaxPerGPU: 7, MIGProfile: "1g.5gb"},
		{ID: 1302, Name: "NVIDIA A100-3-20C", MaxPerGPU: 2, MIGProfile: "3g.20gb"},
	})
	mockNVML(t)
	setNVML(t, migremote.EnvMockState, filepath.Join(t.TempDir(), "nvml.json"))
	if out, code := run(t, "mig", "apply", "--gpu", "1", "--profiles", "1g.5gb,1g.5gb,3g.20gb"); code != 0 {
		t.Fatalf("mig apply: exit %d\n%s", code, out)
	}
	tr.SetMIGInstances(pf, []string{"1g.5gb", "1g.5gb", "3g.20gb"})
	_, err := runErr(t, "--host-root", tr.Dir(), "mdev", "place", "--type", "A100-3-20C", "--count", "2")
	if exitCode(err) != exitBusy || !strings.Contains(err.Error(), "1 free 3g.20gb GPU instance(s), room for 0 more") {
		t.Errorf("place 2× A100-3-20C with NVML: exit %d: %v", exitCode(err), err)
	}
	setNVML(t, migremote.EnvMock, "") // NVML does not describe a fake root: the documented geometry
	if out, code := run(t, "--host-root", tr.Dir(), "mdev", "place", "--type", "A100-3-20C", "--count", "2"); code != 0 {
		t.Errorf("place 2× A100-3-20C without NVML: exit %d\n%s", code, out)
	}
}

// vgpu-host stays static and free of cgo: go-nvml (cgo) is linked only into vgpu-host-nvml,
// while the MIG logic and the helper's client are in vgpu-host.
func TestMainBinaryHasNoNVML(t *testing.T) {
	t.Parallel()
	out, err := exec.Command(testenv.GoTool(), "list", "-deps", "../../cmd/vgpu-host").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "github.com/NVIDIA/go-nvml") || strings.Contains(string(out), "vgpu-host/mig/nvmlmig") {
		t.Error("vgpu-host links go-nvml")
	}
	if !strings.Contains(string(out), "github.com/vgpu-host/vgpu-host/mig/remote\n") {
		t.Error("go list does not show package mig/remote: the check looks at the wrong binary")
	}
}

// TestMIGCommandsRefuseAFakeRoot: mig show, plan and apply under a --host-root that NVML does
// not describe (no mock, no replayed capture) are refused before any NVML helper starts. They
// started one: on a machine with NVIDIA GPUs, mig apply --host-root SNAPSHOT would have changed
// this machine's MIG under the snapshot's name (host layout and host restore already refused).
func TestMIGCommandsRefuseAFakeRoot(t *testing.T) {
	t.Parallel()
	tr := fakeHost(t)
	// The real H200 host's capture too: an NVIDIA GPU on nvidia, as on the machines this guards.
	h200 := hosttest.RealGPUSnapshot(t, "nvidia-h200/sysfs-snapshot.tar.gz").Dir()
	dir := t.TempDir()
	marker := filepath.Join(dir, "started")
	helper := filepath.Join(dir, migremote.HelperName)
	if err := os.WriteFile(helper, []byte("#!/bin/sh\ntouch "+marker+"\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	setNVML(t, migremote.EnvHelper, helper)
	for root, gpu := range map[string]string{tr.Dir(): "0000:41:00.0", h200: "0000:00:06.0"} {
		for _, args := range [][]string{
			{"mig", "show"},
			{"mig", "plan", "--gpu", gpu, "--profiles", "3g.71gb"},
			{"mig", "apply", "--gpu", gpu, "--profiles", "3g.71gb"},
		} {
			_, err := runErr(t, append([]string{"--host-root", root}, args...)...)
			if exitCode(err) != exitUnsupported || !strings.Contains(fmt.Sprint(err), "NVML describes this machine, not --host-root "+root+" (set VGPU_HOST_NVML_FACTS") {
				t.Errorf("%v under the fake root %s: exit %d: %v", args, root, exitCode(err), err)
			}
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("an NVML helper was started for a root NVML does not describe")
	}
}
