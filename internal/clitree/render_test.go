package clitree

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host/hosttest"
)

// runSplit executes the CLI in-process and returns stdout, stderr and the exit code.
func runSplit(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := runInTest(t, args, &out, &errOut)
	return out.String(), errOut.String(), exitCode(err)
}

// TestRenderCLI: stdout is the domain XML alone (it is piped to virsh define), a fallback is
// explained on stderr, -o json carries the resolution, and bad specs and unmatched selectors
// exit 2 and 6 with the field named.
func TestRenderCLI(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	tr.ConsumerGPU("0000:00:01.0", "0000:01:00.0", "nouveau")

	out, errOut, code := runSplit(t, "--host-root", tr.Dir(), "render", "../../examples/virtio-gpu-fallback.yaml")
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, out, errOut)
	}
	if !strings.HasPrefix(out, "<domain") || !strings.HasSuffix(out, "</domain>\n") {
		t.Errorf("stdout is not just the domain XML:\n%s", out)
	}
	// The fake host's GPU is NVIDIA (10de): no fallback, the GPU and its audio are attached.
	if !strings.Contains(out, `bus="0x01" slot="0x00" function="0x0"`) {
		t.Errorf("the host's GPU is not attached:\n%s", out)
	}

	out, errOut, code = runSplit(t, "render", "--offline", "../../examples/virtio-gpu-fallback.yaml")
	if code != 0 || !strings.HasPrefix(out, "<domain") {
		t.Fatalf("offline: exit %d: %s%s", code, out, errOut)
	}
	if !strings.Contains(errOut, "note: spec.gpus[0]: fell back to virtio-gpu:") || strings.Contains(out, "note:") {
		t.Errorf("the fallback is not explained on stderr (stderr %q)", errOut)
	}

	out, _, code = runSplit(t, "render", "--offline", "-o", "json", "../../examples/vgpu-desktop.yaml")
	var res struct {
		Name       string `json:"name"`
		XML        string `json:"xml"`
		Resolution struct {
			GPUs []struct {
				Mdevs []struct {
					Placeholder bool `json:"placeholder"`
				} `json:"mdevs"`
			} `json:"gpus"`
		} `json:"resolution"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != 0 {
		t.Fatalf("json: exit %d, %v:\n%s", code, err, out)
	}
	if res.Name != "desk-01" || !strings.Contains(res.XML, `type="mdev"`) || len(res.Resolution.GPUs) != 1 || !res.Resolution.GPUs[0].Mdevs[0].Placeholder {
		t.Errorf("json result: %+v", res)
	}

	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("apiVersion: vgpu-host/v1\nkind: VirtualMachine\nmetadata: {name: x}\nspec:\n  vcpus: 2\n  memory: -1GiB\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := runErr(t, "render", "--offline", bad); exitCode(err) != 2 || err == nil || !strings.Contains(err.Error(), bad+": invalid spec: line 6: spec.memory") {
		t.Errorf("bad spec: exit %d, want 2 and the file, line and field named: %v", exitCode(err), err)
	}
	nomatch := filepath.Join(dir, "nomatch.yaml")
	if err := os.WriteFile(nomatch, []byte("apiVersion: vgpu-host/v1\nkind: VirtualMachine\nmetadata: {name: x}\nspec:\n  vcpus: 2\n  memory: 1GiB\n  gpus:\n    - passthrough: {model: H100}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := runErr(t, "--host-root", tr.Dir(), "render", nomatch); exitCode(err) != 6 || err == nil || !strings.Contains(err.Error(), `spec.gpus[0].passthrough: no GPU matches selector model="H100"`) {
		t.Errorf("selector matching nothing: exit %d, want 6 and the selector named: %v", exitCode(err), err)
	}
}
