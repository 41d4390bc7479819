package domains_test

import (
	"errors"
	"strings"
	"testing"

	"libvirt.org/go/libvirtxml"

	"github.com/vgpu-host/vgpu-host/domains"
	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/vgpu"
)

const minimal = `apiVersion: vgpu-host/v1
kind: VirtualMachine
metadata:
  name: vm1
spec:
  vcpus: 2
  memory: 2GiB
`

func TestBadSpecs(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		yaml string
		want []string // substrings of the error
	}{
		{"malformed", "apiVersion: [\n", []string{"parse spec", "line"}},
		{"empty", "", []string{"empty document"}},
		{"unknown top key", minimal + "colour: red\n", []string{"line 8", `unknown field "colour"`}},
		{"unknown nested key", minimal + "  gpus:\n    - passthrough:\n        adress: 0000:01:00.0\n", []string{"line 10", `unknown field "adress"`, "spec.gpus[0].passthrough.adress"}},
		{"wrong type", strings.Replace(minimal, "vcpus: 2", "vcpus: many", 1), []string{"line 6", "spec.vcpus", "want an integer"}},
		{"list for string", minimal + "  firmware: [uefi]\n", []string{"line 8", "spec.firmware"}},
		{"two documents", minimal + "---\n" + minimal, []string{"more than one YAML document"}},
		{"bad apiVersion", strings.Replace(minimal, "vgpu-host/v1", "v2", 1), []string{"line 1: apiVersion", `want "vgpu-host/v1"`}},
		{"negative memory", strings.Replace(minimal, "2GiB", "-2GiB", 1), []string{"line 7: spec.memory", "non-negative"}},
		{"no unit", strings.Replace(minimal, "2GiB", "2048", 1), []string{"spec.memory", "missing unit"}},
		{"absurd memory", strings.Replace(minimal, "2GiB", "900TiB", 1), []string{"spec.memory", "too large"}},
		{"huge number", strings.Replace(minimal, "2GiB", "99999999999999999999999GiB", 1), []string{"spec.memory", "too large"}},
		{"zero vcpus", strings.Replace(minimal, "vcpus: 2", "vcpus: 0", 1), []string{"line 6: spec.vcpus", "out of range"}},
		{"bad name", strings.Replace(minimal, "name: vm1", `name: "a<b>&c"`, 1), []string{"line 4: metadata.name", "not a valid domain name"}},
		{"slash name", strings.Replace(minimal, "name: vm1", `name: "../etc"`, 1), []string{"metadata.name"}},
		{"hugepages", minimal + "  hugepages: 3MiB\n", []string{"spec.hugepages", "2MiB or 1GiB"}},
		{"bad address", minimal + "  gpus:\n    - passthrough:\n        address: 0000:01:00\n", []string{"line 10: spec.gpus[0].passthrough.address", "parse PCI address"}},
		{"no selector", minimal + "  gpus:\n    - passthrough: {}\n", []string{"spec.gpus[0].passthrough", "give an address"}},
		{"two kinds", minimal + "  gpus:\n    - passthrough: {vendor: \"10de\"}\n      virtioGpu: {}\n", []string{"spec.gpus[0]", "exactly one"}},
		{"bad fallback", minimal + "  gpus:\n    - passthrough: {vendor: \"10de\"}\n      fallback: cpu\n", []string{"spec.gpus[0].fallback"}},
		{"virgl without gl", minimal + "  gpus:\n    - virtioGpu: {virgl: true}\n", []string{"spec.gpus[0].virtioGpu.virgl", "egl-headless"}},
		{"vendor display", minimal + "  gpus:\n    - vgpu: {profile: x, mode: vendor-vfio, display: true}\n", []string{"spec.gpus[0].vgpu.display", "only on mdev"}},
		{"bad uuid", minimal + "  gpus:\n    - vgpu: {profile: x, uuids: [nope]}\n", []string{"spec.gpus[0].vgpu.uuids[0]", "not a UUID"}},
		{"disk both", minimal + "  disks:\n    - {image: /a.qcow2, path: /b.raw, size: 1GiB}\n", []string{"spec.disks[0]", "not both"}},
		{"relative disk", minimal + "  disks:\n    - {path: disk.raw}\n", []string{"spec.disks[0].path", "absolute"}},
		{"root as disk", minimal + "  disks:\n    - {path: /}\n", []string{"line 9: spec.disks[0].path", `"/" names a directory`}},
		{"directory as image", minimal + "  disks:\n    - {image: /var/lib/images/, size: 10GiB}\n", []string{"spec.disks[0].image", "names a directory"}},
		{"vendor id", minimal + "  gpus:\n    - passthrough: {vendor: nvidia}\n", []string{"spec.gpus[0].passthrough.vendor", "hex"}},
		{"hyperv id", minimal + "  quirks: {hypervVendorId: \"way too long for it\"}\n", []string{"spec.quirks.hypervVendorId"}},
		{"mac", minimal + "  network: {mac: \"zz:00\"}\n", []string{"spec.network.mac"}},
		{"mmio", minimal + "  mmio64: 3GiB\n", []string{"spec.mmio64", "power of two"}},
		{"size mapping", minimal + "  hugepages: {size: 2MiB}\n", []string{"line 8", "want a size"}},
		{"duplicate address", minimal + "  gpus:\n    - passthrough: {address: \"0000:0a:00.0\"}\n    - passthrough: {address: \"0a:00.0\"}\n",
			[]string{"line 10: spec.gpus[1].passthrough.address", "0000:0a:00.0 is also assigned by spec.gpus[0].passthrough"}},
		{"duplicate uuid", minimal + "  gpus:\n    - vgpu: {profile: x, uuids: [\"6f0b6b0e-0a4e-4b8e-9d1a-1f2e3d4c5b6a\"]}\n    - vgpu: {profile: x, uuids: [\"6F0B6B0E-0A4E-4B8E-9D1A-1F2E3D4C5B6A\"]}\n",
			[]string{"line 10: spec.gpus[1].vgpu.uuids[0]", "also used by spec.gpus[0].vgpu.uuids[0]"}},
		{"display without graphics", minimal + "  graphics: {type: none}\n  gpus:\n    - vgpu: {profile: x, display: true}\n",
			[]string{"line 10: spec.gpus[0].vgpu.display", "needs graphics"}},
		{"ramfb without display", minimal + "  gpus:\n    - vgpu: {profile: x, ramfb: true}\n", []string{"spec.gpus[0].vgpu.ramfb", "only with display"}},
		{"spice gl listen", minimal + "  graphics: {type: spice, gl: true, listen: 0.0.0.0}\n", []string{"spec.graphics.listen", "local clients only"}},
		{"control char in path", minimal + "  disks:\n    - {path: \"/var/lib/a\\x01b.raw\"}\n", []string{"line 9: spec.disks[0].path", "control character U+0001"}},
		{"newline in path", minimal + "  disks:\n    - {path: \"/var/lib/a\\nb.raw\"}\n", []string{"spec.disks[0].path", "control character U+000A"}},
		{"control char in description", strings.Replace(minimal, "name: vm1", "name: vm1\n  description: \"bell\\a\"", 1), []string{"line 5: metadata.description", "U+0007"}},
		{"non-character", minimal + "  graphics: {type: egl-headless, renderNode: \"/dev/dri/\\uFFFE\"}\n", []string{"spec.graphics.renderNode", "non-character"}},
		{"control char in user-data", minimal + "  cloudInit: {userData: \"#cloud-config\\x1b[0m\"}\n", []string{"spec.cloudInit.userData", "U+001B"}},
		{"same file twice", minimal + "  disks:\n    - {path: /var/lib/a.raw}\n    - {path: /var/lib/a.raw}\n", []string{"line 10: spec.disks[1]", "also the file of spec.disks[0]"}},
		{"overlay is the image", minimal + "  disks:\n    - {image: /i/base.qcow2, size: 10GiB, overlay: /i/base.qcow2}\n", []string{"spec.disks[0].overlay", "base image itself"}},
		{"negative count", minimal + "  gpus:\n    - passthrough: {model: A100, count: -2}\n", []string{"line 9: spec.gpus[0].passthrough.count", "out of range"}},
		{"absurd count", minimal + "  gpus:\n    - vgpu: {profile: x, count: 1000000}\n", []string{"spec.gpus[0].vgpu.count", "out of range"}},
		{"count as string", minimal + "  gpus:\n    - passthrough: {model: A100, count: two}\n", []string{"line 9: spec.gpus[0].passthrough.count: want an integer"}},
		{"long value in flow mapping", minimal + "  gpus:\n    - passthrough: {model: A100, count: twenty-three}\n", []string{"line 9: spec.gpus[0].passthrough.count: want an integer"}},
		{"bool as list", minimal + "  gpus:\n    - vgpu: {profile: x, display: [on]}\n", []string{"line 9", "spec.gpus[0].vgpu.display", "want true or false"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			vm, err := domains.Parse([]byte(c.yaml))
			if err == nil {
				err = vm.Validate()
			}
			if err == nil {
				t.Fatalf("accepted:\n%s", c.yaml)
			}
			if !errors.Is(err, host.ErrInvalid) {
				t.Errorf("error does not wrap host.ErrInvalid: %v", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// TestValidateReportsEveryProblem: one pass names all problems, not just the first.
func TestValidateReportsEveryProblem(t *testing.T) {
	t.Parallel()
	y := strings.Replace(strings.Replace(minimal, "vcpus: 2", "vcpus: -1", 1), "2GiB", "2XB", 1) + "  firmware: coreboot\n"
	vm, err := domains.Parse([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	var ve *domains.InvalidSpecError
	if err := vm.Validate(); !errors.As(err, &ve) {
		t.Fatalf("want *InvalidSpecError, got %v", err)
	}
	paths := map[string]int{}
	for _, p := range ve.Problems {
		paths[p.Path] = p.Line
	}
	for path, line := range map[string]int{"spec.vcpus": 6, "spec.memory": 7, "spec.firmware": 8} {
		if paths[path] != line {
			t.Errorf("problem at %s: line %d, want %d (problems: %v)", path, paths[path], line, ve.Problems)
		}
	}
}

func TestSizes(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]uint64{"32GiB": 32 << 30, "512MiB": 512 << 20, "1G": 1 << 30, "500MB": 500e6, "4 KiB": 4096, "1TiB": 1 << 40} {
		s, err := domains.ParseSize(in)
		if err != nil || s.Bytes != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, s.Bytes, err, want)
		}
	}
	for _, in := range []string{"", "GiB", "1.5GiB", "-1GiB", "12", "3 parsecs", "0x10GiB"} {
		if _, err := domains.ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) accepted", in)
		}
	}
}

// TestEscaping: XML-special characters in the description and in cloud-init data end up as
// data, not markup, and survive a round trip through libvirtxml.
func TestEscaping(t *testing.T) {
	t.Parallel()
	evil := `</description><devices><hostdev/></devices> & "quotes" 'x' ]]>`
	y := minimal[:strings.Index(minimal, "spec:")] + "  description: " + yamlQuote(evil) + "\n" + minimal[strings.Index(minimal, "spec:"):] +
		"  cloudInit:\n    userData: |\n      #cloud-config\n      runcmd: [\"echo '<b>&amp;</b>' > /tmp/x\"]\n"
	vm, err := domains.Parse([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	if err := vm.Validate(); err != nil {
		t.Fatal(err)
	}
	alloc, err := domains.Resolve(vm, nil, domains.ResolveOptions{Offline: true})
	if err != nil {
		t.Fatal(err)
	}
	x, err := domains.Render(vm, alloc, domains.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(x, "<hostdev") {
		t.Fatalf("description injected markup:\n%s", x)
	}
	var back libvirtxml.Domain
	if err := back.Unmarshal(x); err != nil {
		t.Fatal(err)
	}
	if back.Description != evil {
		t.Errorf("description after round trip = %q, want %q", back.Description, evil)
	}
}

func yamlQuote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

func TestResolveSelectors(t *testing.T) {
	t.Parallel()
	parse := func(body string) *domains.VM {
		t.Helper()
		vm, err := domains.Parse([]byte(minimal + body))
		if err != nil {
			t.Fatal(err)
		}
		if err := vm.Validate(); err != nil {
			t.Fatal(err)
		}
		return vm
	}
	inv := testInventory()

	// Nothing matches: an error naming the selector, host.ErrNotFound.
	_, err := domains.Resolve(parse("  gpus:\n    - passthrough: {model: \"H100\"}\n"), inv, domains.ResolveOptions{})
	if !errors.Is(err, host.ErrNotFound) || !strings.Contains(err.Error(), `model="H100"`) || !strings.Contains(err.Error(), "spec.gpus[0]") {
		t.Errorf("unmatched selector: %v", err)
	}
	// Same, with fallback: virtio-gpu and the reason.
	a, err := domains.Resolve(parse("  gpus:\n    - passthrough: {model: \"H100\"}\n      fallback: virtio-gpu\n"), inv, domains.ResolveOptions{})
	if err != nil || a.GPUs[0].Kind != vgpu.VirtioGPU || !a.GPUs[0].FellBack || !strings.Contains(a.GPUs[0].Reason, "H100") {
		t.Errorf("fallback: %+v, %v", a, err)
	}
	// Model selector with companions, count 1, NUMA auto and MMIO sizing.
	a, err = domains.Resolve(parse("  numa: auto\n  gpus:\n    - passthrough: {vendor: \"10DE\", model: \"rtx 3090\"}\n"), inv, domains.ResolveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s := a.GPUs[0].Slots[0]
	if len(s.Functions) != 2 || s.Functions[1] != host.MustParseAddress("0000:0a:00.1") {
		t.Errorf("companions: %v", s.Functions)
	}
	if a.NUMANode != 0 || a.CPUSet != "0-15" {
		t.Errorf("numa: node %d cpus %q", a.NUMANode, a.CPUSet)
	}
	if a.MMIO64MiB != 64<<10 { // 32 GiB + 32 MiB + ... -> 64 GiB
		t.Errorf("mmio64 = %d MiB, want 65536", a.MMIO64MiB)
	}
	// Count larger than what's there.
	_, err = domains.Resolve(parse("  gpus:\n    - passthrough: {vendor: \"10de\", model: A100, count: 2}\n"), inv, domains.ResolveOptions{})
	if !errors.Is(err, host.ErrNotFound) || !strings.Contains(err.Error(), "count=2") {
		t.Errorf("count 2: %v", err)
	}
	// In-use devices are skipped.
	_, err = domains.Resolve(parse("  gpus:\n    - passthrough: {model: A100}\n"), inv, domains.ResolveOptions{InUse: []host.Address{host.MustParseAddress("0000:17:00.0")}})
	if !errors.Is(err, host.ErrNotFound) {
		t.Errorf("in use: %v", err)
	}
	// vGPU by name and by type id; an unknown profile lists what the host has.
	a, err = domains.Resolve(parse("  gpus:\n    - vgpu: {profile: \"grid t4-2q\", count: 2}\n"), inv, domains.ResolveOptions{})
	if err != nil || len(a.GPUs[0].Mdevs) != 2 || a.GPUs[0].Mdevs[0].Type != "nvidia-222" || a.GPUs[0].Mdevs[0].UUID != vgpu.InstanceUUID("vm1", 0) {
		t.Errorf("vgpu by name: %+v %v", a, err)
	}
	_, err = domains.Resolve(parse("  gpus:\n    - vgpu: {profile: nvidia-223}\n"), inv, domains.ResolveOptions{})
	if !errors.Is(err, host.ErrNotFound) {
		t.Errorf("vgpu with no free instances: %v", err)
	}
	_, err = domains.Resolve(parse("  gpus:\n    - vgpu: {profile: \"GRID A100-4C\"}\n"), inv, domains.ResolveOptions{})
	if !errors.Is(err, host.ErrNotFound) || !strings.Contains(err.Error(), "GRID T4-2Q") {
		t.Errorf("unknown profile: %v", err)
	}
	// Vendor-VFIO by profile picks the VF that can create it.
	a, err = domains.Resolve(parse("  gpus:\n    - vgpu: {profile: \"NVIDIA L40S-8Q\", mode: vendor-vfio}\n"), inv, domains.ResolveOptions{})
	if err != nil || a.GPUs[0].Slots[0].Functions[0] != host.MustParseAddress("0000:41:00.4") {
		t.Errorf("vendor-vfio: %+v %v", a, err)
	}
	// The allocation carries the type the VF gets (by short name too), for apply to write.
	a, err = domains.Resolve(parse("  gpus:\n    - vgpu: {profile: \"l40s-8q\", mode: vendor-vfio}\n"), inv, domains.ResolveOptions{})
	if err != nil || a.GPUs[0].Slots[0].VGPUType != 558 || a.GPUs[0].Slots[0].VGPUTypeName != "NVIDIA L40S-8Q" || a.GPUs[0].Slots[0].VGPUTypeSet {
		t.Errorf("vendor-vfio type: %+v %v", a, err)
	}
	// A pinned VF that does not offer the profile: not found (fallback applies) and busy.
	_, err = domains.Resolve(parse("  gpus:\n    - vgpu: {profile: \"L40S-48Q\", mode: vendor-vfio, vfs: [\"0000:41:00.4\"]}\n"), inv, domains.ResolveOptions{})
	if !errors.Is(err, host.ErrNotFound) || !errors.Is(err, host.ErrBusy) || !strings.Contains(err.Error(), "558 (NVIDIA L40S-8Q)") {
		t.Errorf("pinned VF without the profile: %v", err)
	}
	// A pinned address that is no vendor-VFIO VF here: not found, with where to look.
	_, err = domains.Resolve(parse("  gpus:\n    - vgpu: {profile: \"L40S-8Q\", mode: vendor-vfio, vfs: [\"0000:99:00.4\"]}\n"), inv, domains.ResolveOptions{})
	if !errors.Is(err, host.ErrNotFound) || !strings.Contains(err.Error(), "0000:99:00.4 is not a VF with NVIDIA vendor-VFIO vGPU support on the host (vgpu-host mdev types lists the VFs that offer vGPU types)") {
		t.Errorf("pinned address that is no VF: %v", err)
	}
	// Offline: a selector without fallback cannot be resolved.
	_, err = domains.Resolve(parse("  gpus:\n    - passthrough: {model: A100}\n"), nil, domains.ResolveOptions{Offline: true})
	if err == nil || !strings.Contains(err.Error(), "give an address") {
		t.Errorf("offline selector: %v", err)
	}
}

func TestPhysBits(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		ram, win uint64
		want     uint
	}{
		{4 << 30, 64 << 30, 40},   // 2^40/8 = 128 GiB >= 64 GiB
		{64 << 30, 256 << 30, 41}, // window 256 GiB needs 2^41
		{1 << 40, 512 << 30, 42},  // 1 TiB RAM: window at 1 TiB..1.5 TiB, and 2^42/8 = 512 GiB
		{16 << 30, 8 << 40, 46},   // the largest OVMF does
	} {
		got, err := domains.PhysBits(c.ram, c.win)
		if err != nil || got != c.want {
			t.Errorf("PhysBits(%d GiB, %d GiB) = %d, %v; want %d", c.ram>>30, c.win>>30, got, err, c.want)
		}
	}
	if _, err := domains.PhysBits(16<<30, 16<<40); err == nil {
		t.Errorf("16 TiB window accepted")
	}
}
