package clitree

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/internal/testenv"
	migremote "github.com/vgpu-host/vgpu-host/mig/remote"
)

// releaseNVML points the test's trees (setNVML) at the NVML helper built as `make build-nvml`
// does (no build tags; once for the test binary, nvmlHelper) and returns its path.
func releaseNVML(t *testing.T) string {
	t.Helper()
	helper := nvmlHelper(t, "")
	setNVML(t, migremote.EnvHelper, helper)
	setNVML(t, migremote.EnvMock, "")
	setNVML(t, migremote.EnvMockState, "")
	return helper
}

// The release helper links the replay of a capture (it touches no GPU) but not go-nvml's
// dgxa100 mock nor the test build's state file.
func TestReleaseHelperHasNoMock(t *testing.T) {
	t.Parallel()
	out, err := exec.Command(testenv.GoTool(), "list", "-deps", "../../cmd/vgpu-host-nvml").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := string(out)
	for _, bad := range []string{"go-nvml/pkg/nvml/mock/dgxa100", "vgpu-host/mig/nvmlmig/mocknvml"} {
		if strings.Contains(deps, bad) {
			t.Errorf("the release NVML helper links %s", bad)
		}
	}
	if !strings.Contains(deps, "github.com/vgpu-host/vgpu-host/mig/nvmlmig/nvmlfacts\n") {
		t.Error("the release NVML helper does not link the facts replay (mig/nvmlmig/nvmlfacts)")
	}
}

// VGPU_HOST_NVML_FACTS works with the release helper: mig show answers from a real H200's
// capture, with a note on stderr that no GPU answered; the dgxa100 mock is not served; and
// `--facts` writes the capture back.
func TestReleaseHelperReplaysFacts(t *testing.T) {
	t.Parallel()
	helper := releaseNVML(t)
	facts := hosttest.SharedFixture(t, "nvidia-h200/nvml-facts.json")

	setNVML(t, migremote.EnvMock, "dgxa100")
	if out, code := run(t, "mig", "show"); code != exitUnsupported || strings.Contains(out, "A100") {
		t.Errorf("release helper with VGPU_HOST_NVML_MOCK=dgxa100: exit %d, want %d (no NVML here)\n%s", code, exitUnsupported, out)
	}
	setNVML(t, migremote.EnvMock, "")

	setNVML(t, migremote.EnvFacts, facts)
	out, code := run(t, "mig", "show")
	if code != 0 || !strings.Contains(out, "NVIDIA H200  MIG off") || !strings.Contains(out, "7g.141gb") {
		t.Fatalf("release helper replaying the H200: exit %d\n%s", code, out)
	}

	cmd := exec.Command(helper, "--facts")
	cmd.Env = nvmlOf(t).Environ()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s --facts: %v\n%s", helper, err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "not from a GPU") {
		t.Errorf("--facts on a replay says nothing on stderr about it: %q", stderr.String())
	}
	raw, err := os.ReadFile(facts)
	if err != nil {
		t.Fatal(err)
	}
	var want, got any
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
		t.Fatalf("--facts: not JSON: %v\n%s", err, stdout.String())
	}
	if !reflect.DeepEqual(want, got) {
		t.Errorf("--facts of the H200 replay is not the H200 capture:\n%s", stdout.String())
	}
}
