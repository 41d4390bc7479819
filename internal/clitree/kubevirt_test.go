package clitree

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/internal/kubetest"
	"github.com/vgpu-host/vgpu-host/internal/testenv"
	"github.com/vgpu-host/vgpu-host/kube"
)

// TestMainBinaryHasNoKubernetes: vgpu-host's start-up is a benchmarked goal; the Kubernetes,
// KubeVirt and gRPC packages (heavy init) live in the helper vgpu-host-kube and in tests only.
func TestMainBinaryHasNoKubernetes(t *testing.T) {
	t.Parallel()
	out, err := exec.Command(testenv.GoTool(), "list", "-deps", "../../cmd/vgpu-host").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		for _, bad := range []string{"k8s.io/", "kubevirt.io/", "google.golang.org/grpc", "google.golang.org/protobuf", "sigs.k8s.io/"} {
			if strings.HasPrefix(p, bad) {
				t.Errorf("vgpu-host links %s", p)
			}
		}
	}
	if !strings.Contains(string(out), "github.com/vgpu-host/vgpu-host/kube\n") {
		t.Error("go list does not show package kube: the check looks at the wrong binary")
	}
}

// yamlToJSON converts the CLI's YAML output to JSON for the upstream judge.
func yamlToJSON(t *testing.T, y string) []byte {
	t.Helper()
	var v any
	if err := yaml.Unmarshal([]byte(y), &v); err != nil {
		t.Fatalf("%v\n%s", err, y)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestKubevirtConfigCLI(t *testing.T) {
	t.Parallel()
	tr := kubetest.ExampleHost(t)
	out, errOut, code := runAll(t, "--host-root", tr.Dir(), "kubevirt", "config")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if err := kubetest.StrictRoundTrip[kubevirtv1.KubeVirt](yamlToJSON(t, out)); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	jout, _, code := runAll(t, "--host-root", tr.Dir(), "kubevirt", "config", "-o", "json")
	if code != 0 || !json.Valid([]byte(jout)) {
		t.Fatalf("json: exit %d: %s", code, jout)
	}
	if err := kubetest.StrictRoundTrip[kubevirtv1.KubeVirt]([]byte(jout)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "mdevNameSelector: GRID T4-2Q") || !strings.Contains(out, "resourceName: nvidia.com/GA100_A100_SXM4_40GB") ||
		strings.Contains(out, "mediatedDevicesConfiguration") {
		t.Errorf("patch:\n%s", out)
	}
	// A resource name from the config file under the host root.
	tr.WriteFile(kube.DefaultConfigPath, "resourceNames:\n  \"10de:20b0\": nvidia.com/A100\n")
	out, _, _ = runAll(t, "--host-root", tr.Dir(), "kubevirt", "config")
	if !strings.Contains(out, "resourceName: nvidia.com/A100\n") {
		t.Errorf("config override not used:\n%s", out)
	}
	tr.WriteFile(kube.DefaultConfigPath, "resourceNames:\n  \"10de:20b0\": A100\n")
	if _, errOut, code := runAll(t, "--host-root", tr.Dir(), "kubevirt", "config"); code != exitUsage || !strings.Contains(errOut, "DOMAIN/NAME") {
		t.Errorf("bad config: exit %d: %s", code, errOut)
	}
}

func TestKubevirtVMCLI(t *testing.T) {
	t.Parallel()
	tr := kubetest.ExampleHost(t)
	spec := "../../examples/virgl-workstation.yaml"
	out, errOut, code := runAll(t, "--host-root", tr.Dir(), "kubevirt", "vm", spec)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if err := kubetest.StrictRoundTrip[kubevirtv1.VirtualMachine](yamlToJSON(t, out)); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	// Each finding on its own stderr line, field first; none on stdout (it is piped to kubectl).
	for _, f := range []string{"spec.gpus[0].virtioGpu.virgl (true):", "spec.graphics.type (egl-headless):", "spec.graphics.renderNode (/dev/dri/renderD128):"} {
		if !strings.Contains(errOut, "vgpu-host: not in the KubeVirt manifest: "+f) {
			t.Errorf("stderr lacks %q:\n%s", f, errOut)
		}
	}
	if strings.Contains(out, "not in the KubeVirt manifest") {
		t.Error("findings on stdout")
	}
	jout, _, code := runAll(t, "--host-root", tr.Dir(), "-o", "json", "kubevirt", "vm", spec, "--container-disk", "root=quay.io/containerdisks/debian:12")
	if code != 0 {
		t.Fatalf("json: exit %d", code)
	}
	if err := kubetest.StrictRoundTrip[kubevirtv1.VirtualMachine]([]byte(jout)); err != nil {
		t.Fatal(err)
	}
	var vm kubevirtv1.VirtualMachine
	json.Unmarshal([]byte(jout), &vm)
	if cd := vm.Spec.Template.Spec.Volumes[0].ContainerDisk; cd == nil || cd.Image != "quay.io/containerdisks/debian:12" {
		t.Errorf("container disk %+v", vm.Spec.Template.Spec.Volumes[0])
	}
	if !strings.Contains(vm.Annotations[kube.AnnotationUnsupported], `"field":"spec.gpus[0].virtioGpu.virgl"`) {
		t.Errorf("annotation %q", vm.Annotations[kube.AnnotationUnsupported])
	}
	if _, errOut, code := runAll(t, "--host-root", tr.Dir(), "kubevirt", "vm", spec, "--strict"); code != exitUnsupported || !strings.Contains(errOut, "cannot express") {
		t.Errorf("--strict: exit %d: %s", code, errOut)
	}
	for _, bad := range [][]string{{"--container-disk", "root"}, {"--container-disk", "nope=img"}} {
		if _, errOut, code := runAll(t, append([]string{"--host-root", tr.Dir(), "kubevirt", "vm", spec}, bad...)...); code != exitUsage {
			t.Errorf("%v: exit %d: %s", bad, code, errOut)
		}
	}
	// A vGPU type this host does not offer: not found.
	p := filepath.Join(t.TempDir(), "vm.yaml")
	os.WriteFile(p, []byte("apiVersion: vgpu-host/v1\nkind: VirtualMachine\nmetadata:\n  name: x\nspec:\n  vcpus: 1\n  memory: 1GiB\n  gpus:\n    - vgpu:\n        profile: A100-4C\n"), 0o644)
	if _, errOut, code := runAll(t, "--host-root", tr.Dir(), "kubevirt", "vm", p); code != exitNotFound || !strings.Contains(errOut, "spec.gpus[0]") {
		t.Errorf("unknown profile: exit %d: %s", code, errOut)
	}
}

func TestKubevirtLabelsCLI(t *testing.T) {
	t.Parallel()
	tr := kubetest.ExampleHost(t)
	out, errOut, code := runAll(t, "--host-root", tr.Dir(), "kubevirt", "labels", "--write")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "feature.node.kubernetes.io/vgpu-host.vgpu.GRID_T4-2Q=1\n") {
		t.Errorf("labels:\n%s", out)
	}
	b, err := os.ReadFile(filepath.Join(tr.Dir(), "etc", kube.FeaturesFile))
	if err != nil || !strings.Contains(string(b), "\nvgpu-host.vgpu.GRID_T4-2Q=1\n") {
		t.Errorf("feature file: %v\n%s", err, b)
	}
}

func TestDevicePluginHelperMissing(t *testing.T) {
	t.Setenv(kubeHelperEnv, filepath.Join(t.TempDir(), "none"))
	_, errOut, code := runAll(t, "--host-root", hostRootForTest(t), "device-plugin")
	if code != exitUnsupported || !strings.Contains(errOut, kubeHelperName+" not found") {
		t.Errorf("exit %d: %s", code, errOut)
	}
}

func hostRootForTest(t *testing.T) string {
	t.Helper()
	r, err := host.NewRoot(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return r.Dir()
}

// TestDevicePluginExecsHelper: the installed pair as make build lays it out — vgpu-host finds
// vgpu-host-kube beside itself, replaces itself with it (same pid, so signals reach the
// plugin), and the plugin scans the host: with --nfd the feature file appears, and it goes
// when the plugin is stopped.
func TestDevicePluginExecsHelper(t *testing.T) {
	t.Parallel()
	bin := binary(t)
	helper := filepath.Join(filepath.Dir(bin), kubeHelperName)
	if out, err := exec.Command(testenv.GoTool(), "build", "-o", helper, "../../cmd/vgpu-host-kube").CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", kubeHelperName, err, out)
	}
	tr := kubetest.ExampleHost(t)
	kdir := t.TempDir()
	cmd := exec.Command(bin, "--host-root", tr.Dir(), "device-plugin", "--kubelet-dir", kdir, "--interval", "100ms", "--nfd")
	cmd.Env = append(os.Environ(), kubeHelperEnv+"=") // found beside vgpu-host, not through the environment
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	features := filepath.Join(tr.Dir(), "etc", kube.FeaturesFile)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if b, err := os.ReadFile(features); err == nil && strings.Contains(string(b), "vgpu-host.vgpu.GRID_T4-2Q=1") {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("no feature file from the plugin; stderr:\n%s", stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("plugin exit: %v\n%s", err, stderr.String())
	}
	if _, err := os.Stat(features); !os.IsNotExist(err) {
		t.Errorf("feature file left after the plugin stopped: %v", err)
	}
	if !strings.Contains(stderr.String(), "vgpu-host-kube: ") {
		t.Errorf("stderr is not the helper's:\n%s", stderr.String())
	}
}
