package clitree

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/vgpu-host/vgpu-host/domains"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/lifecycle"
	"github.com/vgpu-host/vgpu-host/mdev"
	"github.com/vgpu-host/vgpu-host/vgpu"
)

// The one vGPU vocabulary, seen from the two ways a user names a vGPU: `mdev create --type`
// on the command line and `profile:` in a VM spec. Both go through vgpu.LookupProfile and
// vgpu.InstanceUUID, so on the same host they must pick the same type and the same UUIDs.

// planSpec writes a spec named name with the given gpus block and returns `plan -o json`'s
// first plan, resolved against the fake host under root with libvirt's test driver.
func planSpec(t *testing.T, root, name, gpus string) *lifecycle.VMPlan {
	t.Helper()
	binary(t) // the libvirt helper plan starts
	s := "apiVersion: vgpu-host/v1\nkind: VirtualMachine\nmetadata:\n  name: " + name +
		"\nspec:\n  vcpus: 1\n  memory: 256MiB\n  firmware: bios\n  graphics:\n    type: vnc\n  network:\n    type: none\n  gpus:\n" + gpus
	p := filepath.Join(t.TempDir(), name+".yaml")
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code := runCLI(t, "--host-root", root, "-o", "json", "plan", "--connect", "test:///default", "--virt-type", "qemu", p)
	var plans []*lifecycle.VMPlan
	if code != 0 || json.Unmarshal([]byte(out), &plans) != nil || len(plans) != 1 {
		t.Fatalf("plan exit %d:\n%s", code, out)
	}
	return plans[0]
}

// createOut runs `mdev create ... -o json` and returns the instances it reports.
func createOut(t *testing.T, args ...string) []mdev.Instance {
	t.Helper()
	out, code := runCLI(t, append([]string{"-o", "json", "mdev", "create"}, args...)...)
	var ins []mdev.Instance
	if err := json.Unmarshal([]byte(out), &ins); err != nil { // --dry-run wraps them with its writes
		var dry struct {
			Result []mdev.Instance `json:"result"`
		}
		_ = json.Unmarshal([]byte(out), &dry)
		ins = dry.Result
	}
	if code != 0 || len(ins) == 0 {
		t.Fatalf("mdev create %v: exit %d:\n%s", args, code, out)
	}
	return ins
}

func TestProfileSameOnCommandLineAndSpecMdev(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	gpu := tr.DatacenterGPU("0000:20:01.0", "0000:22:00.0", "nvidia", 0)
	tr.A100Mdev(gpu)
	for _, profile := range []string{"A100-4C", "a100-4c", "GRID A100-4C", "nvidia-471"} {
		p := planSpec(t, tr.Dir(), "prof", "    - vgpu:\n        profile: "+profile+"\n")
		g := p.Alloc.GPUs[0]
		if g.Kind != vgpu.Mdev || len(g.Mdevs) != 1 {
			t.Fatalf("spec profile %q: resolved to %+v (fallbacks: %v)", profile, g, p.Fallback)
		}
		ins := createOut(t, "--host-root", tr.Dir(), "--dry-run", "--parent", gpu.String(), "--type", profile)
		if ins[0].Type != g.Mdevs[0].Type || ins[0].Type != "nvidia-471" {
			t.Errorf("profile %q: command line picks %s, spec picks %s; want nvidia-471 both", profile, ins[0].Type, g.Mdevs[0].Type)
		}
	}
}

func TestProfileSameOnCommandLineAndSpecVendorVFIO(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	pf := tr.NvidiaSRIOVGPU("0000:40:01.0", "0000:41:00.0", 0, 4, nil)
	withKernel(t, tr)
	for _, profile := range []string{"L40S-8Q", "nvidia l40s-8q", "1160"} {
		p := planSpec(t, tr.Dir(), "prof", "    - vgpu:\n        mode: vendor-vfio\n        profile: "+profile+"\n")
		g := p.Alloc.GPUs[0]
		if g.Kind != vgpu.VendorVFIO || len(g.Slots) != 1 {
			t.Fatalf("spec profile %q: resolved to %+v (fallbacks: %v)", profile, g, p.Fallback)
		}
		ins := createOut(t, "--host-root", tr.Dir(), "--dry-run", "--parent", pf.String(), "--type", profile)
		if ins[0].Type != "1160" || g.Slots[0].VGPUType != 1160 {
			t.Errorf("profile %q: command line picks %s, spec picks %d; want 1160 both", profile, ins[0].Type, g.Slots[0].VGPUType)
		}
	}
}

// TestInstanceUUIDsSameOnCommandLineAndApply: the UUIDs of VM demo's instances are the same
// whether `mdev create --name demo` made them or apply of a spec named demo would, also when
// the spec spreads them over two gpus[] entries (the numbering runs across the VM).
func TestInstanceUUIDsSameOnCommandLineAndApply(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	tr.Mbochs()
	withKernel(t, tr)
	cli := createOut(t, "--host-root", tr.Dir(), "--parent", "mbochs", "--type", "small", "--count", "3", "--name", "demo")
	one := planSpec(t, tr.Dir(), "demo", "    - vgpu:\n        profile: small\n        count: 3\n")
	two := planSpec(t, tr.Dir(), "demo", "    - vgpu:\n        profile: small\n    - vgpu:\n        profile: mbochs-small\n        count: 2\n")
	var spread []domains.MdevAllocation
	for _, g := range two.Alloc.GPUs {
		spread = append(spread, g.Mdevs...)
	}
	if len(cli) != 3 || len(one.Alloc.GPUs[0].Mdevs) != 3 || len(spread) != 3 {
		t.Fatalf("instances: cli %d, one entry %d, two entries %d", len(cli), len(one.Alloc.GPUs[0].Mdevs), len(spread))
	}
	for i := range cli {
		if cli[i].UUID != one.Alloc.GPUs[0].Mdevs[i].UUID || cli[i].UUID != spread[i].UUID {
			t.Errorf("instance %d: mdev create %s, apply (one entry) %s, apply (two entries) %s", i, cli[i].UUID, one.Alloc.GPUs[0].Mdevs[i].UUID, spread[i].UUID)
		}
		// The instances mdev create made are the ones apply finds and reuses.
		if !one.Alloc.GPUs[0].Mdevs[i].Exists {
			t.Errorf("instance %d (%s): apply would create it again", i, cli[i].UUID)
		}
	}
}
