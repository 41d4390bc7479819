package kube_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/vgpu-host/vgpu-host/domains"
	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/internal/kubetest"
	"github.com/vgpu-host/vgpu-host/kube"
)

func scan(t *testing.T, root host.Root) *host.Inventory {
	t.Helper()
	inv, err := host.Scan(root)
	if err != nil {
		t.Fatal(err)
	}
	return inv
}

func TestNames(t *testing.T) {
	// The prefixes are KubeVirt's own constants.
	if kube.PCIResourcePrefix != kubevirtv1.PCIResourcePrefix || kube.MdevResourcePrefix != kubevirtv1.MDevResourcePrefix {
		t.Fatalf("prefixes %s %s differ from KubeVirt's %s %s", kube.PCIResourcePrefix, kube.MdevResourcePrefix, kubevirtv1.PCIResourcePrefix, kubevirtv1.MDevResourcePrefix)
	}
	for _, c := range []struct{ got, want string }{
		// KubeVirt's util.ResourceNameToEnvVar: upper-case, "/" and "." to "_", "-" kept.
		{kube.EnvVar(kube.PCIResourcePrefix, "nvidia.com/GA100_A100_PCIE_80GB"), "PCI_RESOURCE_NVIDIA_COM_GA100_A100_PCIE_80GB"},
		{kube.EnvVar(kube.MdevResourcePrefix, "nvidia.com/GRID_A100-4C"), "MDEV_PCI_RESOURCE_NVIDIA_COM_GRID_A100-4C"},
		{kube.EnvVar(kube.PCIResourcePrefix, "vgpu-host.io/mbochs-small"), "PCI_RESOURCE_VGPU-HOST_IO_MBOCHS-SMALL"},
		// NVIDIA's kubevirt-gpu-device-plugin spelling of pci.ids names.
		{kube.PCIName(&host.Device{DeviceName: "GA100 [A100 PCIe 80GB]"}), "GA100_A100_PCIE_80GB"},
		{kube.PCIName(&host.Device{DeviceName: "GA102GL [RTX A6000 / A40]"}), "GA102GL_RTX_A6000___A40"},
		{kube.PCIName(&host.Device{DeviceName: "AD102GL [L40S]"}), "AD102GL_L40S"},
		{kube.PCIName(&host.Device{VendorID: "10de", DeviceID: "2331"}), "PCI_10DE_2331"},
		{kube.TypeName("GRID A100-4C", "nvidia-471"), "GRID_A100-4C"},
		{kube.TypeName("NVIDIA L40S-8Q", "1160"), "NVIDIA_L40S-8Q"},
		{kube.TypeName("", "mbochs-small"), "mbochs-small"},
		{kube.Domain("10DE"), "nvidia.com"},
		{kube.Domain("1234"), kube.DefaultDomain},
		{kube.Quantity(64 << 30), "64Gi"},
		{kube.Quantity(512 << 20), "512Mi"},
		{kube.Quantity(1000), "1000"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

func TestConfig(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "k.yaml")
	os.WriteFile(p, []byte("resourceNames:\n  \"10de:20b0\": nvidia.com/A100\n  GRID T4-2Q: example.com/T4_2Q\n"), 0o644)
	cfg, err := kube.LoadConfig(p, true)
	if err != nil {
		t.Fatal(err)
	}
	tr := kubetest.ExampleHost(t)
	cat := kube.Offered(scan(t, tr.Root), cfg)
	for _, n := range []string{"nvidia.com/A100", "example.com/T4_2Q", "nvidia.com/GRID_T4-1Q"} {
		if _, ok := cat.Resource(n); !ok {
			t.Errorf("no resource %s", n)
		}
	}
	if _, ok := cat.Resource("nvidia.com/GA100_A100_SXM4_40GB"); ok {
		t.Error("the overridden name is still offered")
	}
	for _, bad := range []string{"resourceNames:\n  x: NoDomain\n", "resourceName:\n  x: a.com/b\n"} {
		os.WriteFile(p, []byte(bad), 0o644)
		if _, err := kube.LoadConfig(p, true); !errors.Is(err, host.ErrInvalid) {
			t.Errorf("%q: %v, want ErrInvalid", bad, err)
		}
	}
	if _, err := kube.LoadConfig(filepath.Join(dir, "none"), false); err != nil {
		t.Errorf("a missing default config: %v", err)
	}
	if _, err := kube.LoadConfig(filepath.Join(dir, "none"), true); err == nil {
		t.Error("a missing named config is not an error")
	}
}

// TestPermittedUpstream: the KubeVirt CR patch decodes strictly into v1.KubeVirt, survives a
// round trip, permits every resource (vGPU types without instances too) with
// externalResourceProvider, and leaves KubeVirt's own mdev configuration alone.
func TestPermittedUpstream(t *testing.T) {
	tr := kubetest.ExampleHost(t)
	patch := kube.Permitted(kube.Offered(scan(t, tr.Root), kube.Config{}))
	b, err := json.Marshal(patch)
	if err != nil {
		t.Fatal(err)
	}
	if err := kubetest.StrictRoundTrip[kubevirtv1.KubeVirt](b); err != nil {
		t.Fatal(err)
	}
	var kv kubevirtv1.KubeVirt
	json.Unmarshal(b, &kv)
	c := kv.Spec.Configuration
	if c.MediatedDevicesConfiguration != nil || c.PermittedHostDevices == nil {
		t.Fatalf("configuration %+v", c)
	}
	var pci, md []string
	for _, d := range c.PermittedHostDevices.PciHostDevices {
		if !d.ExternalResourceProvider {
			t.Errorf("%+v is not externalResourceProvider", d)
		}
		pci = append(pci, d.PCIVendorSelector+"="+d.ResourceName)
	}
	for _, d := range c.PermittedHostDevices.MediatedDevices {
		if !d.ExternalResourceProvider {
			t.Errorf("%+v is not externalResourceProvider", d)
		}
		md = append(md, d.MDEVNameSelector+"="+d.ResourceName)
	}
	slices.Sort(pci)
	slices.Sort(md)
	// L40S-1Q is not offered: the L40S runs 4Q on a VF, and the driver lists only the running
	// type on its other VFs (one type per GPU).
	wantPCI := []string{"10DE:20B0=nvidia.com/GA100_A100_SXM4_40GB", "10DE:2206=nvidia.com/GA102_GEFORCE_RTX_3080",
		"10DE:26B9=nvidia.com/NVIDIA_L40S-4Q"}
	wantMdev := []string{"GRID T4-1Q=nvidia.com/GRID_T4-1Q", "GRID T4-2Q=nvidia.com/GRID_T4-2Q"}
	if !slices.Equal(pci, wantPCI) || !slices.Equal(md, wantMdev) {
		t.Errorf("pci %v\nwant %v\nmdev %v\nwant %v", pci, wantPCI, md, wantMdev)
	}
}

// TestTranslateExamplesUpstream translates every example spec on a host where each resolves:
// each manifest is judged by the upstream type, the GPUs get the device plugin's resource
// names, and what KubeVirt cannot express is reported field by field and kept in the
// annotation.
func TestTranslateExamplesUpstream(t *testing.T) {
	tr := kubetest.ExampleHost(t)
	inv := scan(t, tr.Root)
	cat := kube.Offered(inv, kube.Config{})
	type want struct {
		gpus     []string
		findings []string // fields
		check    func(t *testing.T, vm *kubevirtv1.VirtualMachine)
	}
	wants := map[string]want{
		"passthrough.yaml": {gpus: []string{"nvidia.com/GA100_A100_SXM4_40GB"},
			findings: []string{"spec.disks[0].image", "spec.gpus[0].passthrough.address", "spec.gpus[0].passthrough.rom"},
			check: func(t *testing.T, vm *kubevirtv1.VirtualMachine) {
				d := vm.Spec.Template.Spec.Domain
				if d.Memory.Guest.String() != "64Gi" || d.Memory.Hugepages.PageSize != "1Gi" || d.CPU.Cores != 16 ||
					!d.CPU.DedicatedCPUPlacement || d.CPU.NUMA == nil || d.CPU.NUMA.GuestMappingPassthrough == nil {
					t.Errorf("cpu/memory/numa: %+v %+v", d.CPU, d.Memory)
				}
				if d.Firmware.Bootloader.EFI == nil || *d.Firmware.Bootloader.EFI.SecureBoot {
					t.Errorf("firmware %+v", d.Firmware.Bootloader)
				}
				v := vm.Spec.Template.Spec.Volumes
				if len(v) != 2 || v[0].DataVolume == nil || v[0].DataVolume.Name != "train-01-root" || v[1].CloudInitNoCloud == nil ||
					!strings.Contains(v[1].CloudInitNoCloud.UserData, "hostname: train-01") {
					t.Errorf("volumes %+v", v)
				}
				dv := vm.Spec.DataVolumeTemplates
				if len(dv) != 1 || dv[0].Spec.Source.Upload == nil || dv[0].Spec.Storage.Resources.Requests.Storage().String() != "200Gi" {
					t.Errorf("data volumes %+v", dv)
				}
			}},
		"vgpu-desktop.yaml": {gpus: []string{"nvidia.com/GRID_T4-2Q"},
			findings: []string{"spec.disks[0].image", "spec.gpus[0].fallback"},
			check: func(t *testing.T, vm *kubevirtv1.VirtualMachine) {
				g := vm.Spec.Template.Spec.Domain.Devices.GPUs[0]
				if g.VirtualGPUOptions == nil || !*g.VirtualGPUOptions.Display.Enabled || !*g.VirtualGPUOptions.Display.RamFB.Enabled {
					t.Errorf("display %+v", g.VirtualGPUOptions)
				}
			}},
		"vendor-vfio.yaml": {gpus: []string{"nvidia.com/NVIDIA_L40S-4Q"},
			findings: []string{"spec.disks[0].image", "spec.gpus[0].vgpu.vfs", "spec.network.bridge", "spec.numa"}},
		"virgl-workstation.yaml": {findings: []string{"spec.disks[0].image", "spec.gpus[0].virtioGpu.virgl", "spec.graphics.renderNode", "spec.graphics.type"},
			check: func(t *testing.T, vm *kubevirtv1.VirtualMachine) {
				if v := vm.Spec.Template.Spec.Domain.Devices.Video; v == nil || v.Type != "virtio" {
					t.Errorf("video %+v", v)
				}
			}},
		"virtio-gpu-fallback.yaml": {gpus: []string{"nvidia.com/GA100_A100_SXM4_40GB"},
			findings: []string{"spec.disks[0].format", "spec.disks[0].path", "spec.gpus[0]", "spec.gpus[0].fallback", "spec.gpus[0].passthrough.companions"},
			check: func(t *testing.T, vm *kubevirtv1.VirtualMachine) {
				d := vm.Spec.Template.Spec.Domain
				if d.Firmware.Bootloader.BIOS == nil || *d.Devices.AutoattachPodInterface || vm.Spec.Template.Spec.Volumes[0].HostDisk == nil {
					t.Errorf("bios/network/hostDisk: %+v %+v", d.Firmware, d.Devices)
				}
			}},
		// Issue 18's keys: every one KubeVirt cannot take is reported, none dropped.
		"windows11-gaming.yaml": {gpus: []string{"nvidia.com/GA100_A100_SXM4_40GB"},
			findings: []string{"spec.boot", "spec.cpu.pin", "spec.cpu.topology", "spec.devices.evdev[0]", "spec.devices.evdev[1]",
				"spec.devices.lookingGlass", "spec.devices.sound", "spec.devices.usbController", "spec.disks[0].blank", "spec.disks[1].path",
				"spec.gpus[0].passthrough.address", "spec.graphics.type", "spec.os", "spec.virtioWin"}},
		"workstation-installer.yaml": {findings: []string{"spec.boot", "spec.cpu.topology", "spec.devices.nics[0]", "spec.disks[0].blank", "spec.disks[1].path"},
			check: func(t *testing.T, vm *kubevirtv1.VirtualMachine) {
				v := vm.Spec.Template.Spec.Volumes
				if len(v) == 0 || v[0].EmptyDisk == nil || v[0].EmptyDisk.Capacity.IsZero() {
					t.Errorf("blank disk: want an emptyDisk with its capacity: %+v", v)
				}
			}},
		"image-builder.yaml": {findings: []string{"spec.cloudInit.metaData", "spec.disks[0].image"},
			check: func(t *testing.T, vm *kubevirtv1.VirtualMachine) {
				if a := vm.Spec.Template.Spec.Domain.Devices.AutoattachGraphicsDevice; a == nil || *a {
					t.Errorf("graphics none: autoattachGraphicsDevice %v", a)
				}
			}},
	}
	all, _ := filepath.Glob("../examples/*.yaml")
	var files []string
	for _, f := range all {
		if b, err := os.ReadFile(f); err == nil && !bytes.Contains(b, []byte("\nkind: HostLayout\n")) {
			files = append(files, f) // host layouts are not VM specs (package layout checks them)
		}
	}
	if len(files) != len(wants) {
		t.Fatalf("examples %v; this test knows %d: add the new one", files, len(wants))
	}
	for _, f := range files {
		w, ok := wants[filepath.Base(f)]
		if !ok {
			t.Errorf("%s: no expectations", f)
			continue
		}
		vm, err := domains.Load(f)
		if err != nil {
			t.Fatal(err)
		}
		res, err := kube.TranslateVM(vm, inv, cat, kube.TranslateOptions{})
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		b, err := json.Marshal(res.VM)
		if err != nil {
			t.Fatal(err)
		}
		if err := kubetest.StrictRoundTrip[kubevirtv1.VirtualMachine](b); err != nil {
			t.Errorf("%s: %v\n%s", f, err, b)
			continue
		}
		var up kubevirtv1.VirtualMachine
		json.Unmarshal(b, &up)
		var gpus []string
		for _, g := range up.Spec.Template.Spec.Domain.Devices.GPUs {
			gpus = append(gpus, g.DeviceName)
		}
		if !slices.Equal(gpus, w.gpus) {
			t.Errorf("%s: gpus %v, want %v", f, gpus, w.gpus)
		}
		var fields []string
		for _, fd := range res.Findings {
			fields = append(fields, fd.Field)
			if fd.Reason == "" {
				t.Errorf("%s: finding %s has no reason", f, fd.Field)
			}
		}
		slices.Sort(fields)
		fields = slices.Compact(fields)
		if !slices.Equal(fields, w.findings) {
			t.Errorf("%s: findings %v, want %v", f, fields, w.findings)
		}
		var ann []kube.Finding
		if err := json.Unmarshal([]byte(up.Annotations[kube.AnnotationUnsupported]), &ann); err != nil || len(ann) != len(res.Findings) {
			t.Errorf("%s: annotation %q: %v", f, up.Annotations[kube.AnnotationUnsupported], err)
		}
		if up.Spec.RunStrategy == nil || *up.Spec.RunStrategy != kubevirtv1.RunStrategyAlways || up.Name != vm.Metadata.Name {
			t.Errorf("%s: runStrategy/name %v %s", f, up.Spec.RunStrategy, up.Name)
		}
		if w.check != nil {
			w.check(t, &up)
		}
	}
}

func TestTranslateContainerDiskAndUnmatched(t *testing.T) {
	tr := kubetest.ExampleHost(t)
	inv := scan(t, tr.Root)
	cat := kube.Offered(inv, kube.Config{})
	vm, err := domains.Load("../examples/image-builder.yaml")
	if err != nil {
		t.Fatal(err)
	}
	res, err := kube.TranslateVM(vm, inv, cat, kube.TranslateOptions{ContainerDisks: map[string]string{"root": "quay.io/containerdisks/debian:12"}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(res.VM)
	if err := kubetest.StrictRoundTrip[kubevirtv1.VirtualMachine](b); err != nil {
		t.Fatal(err)
	}
	v := res.VM.Spec.Template.Spec.Volumes[0]
	if v.ContainerDisk == nil || v.ContainerDisk.Image != "quay.io/containerdisks/debian:12" || len(res.VM.Spec.DataVolumeTemplates) != 0 {
		t.Errorf("container disk: %+v %+v", v, res.VM.Spec.DataVolumeTemplates)
	}
	// A profile no resource offers, without fallback: not found, naming the gpu.
	vm.Spec.GPUs = []domains.GPU{{VGPU: &domains.VGPU{Profile: "A100-4C"}}}
	if _, err := kube.TranslateVM(vm, inv, cat, kube.TranslateOptions{}); !errors.Is(err, host.ErrNotFound) || !strings.Contains(err.Error(), "spec.gpus[0]") {
		t.Errorf("unmatched profile: %v", err)
	}
}

// TestLabels: labels are valid Kubernetes labels, follow the host's state, and the feature
// file is what NFD's local source reads.
func TestLabels(t *testing.T) {
	tr := kubetest.ExampleHost(t)
	labels := func() map[string]string {
		inv := scan(t, tr.Root)
		ls, skipped := kube.Labels(inv, kube.Build(inv, kube.Config{}))
		if len(skipped) > 0 {
			t.Errorf("skipped %v", skipped)
		}
		m := map[string]string{}
		for _, l := range ls {
			if errs := validation.IsQualifiedName(kube.LabelPrefix + l.Name); len(errs) > 0 {
				t.Errorf("label name %s: %v", l.Name, errs)
			}
			if errs := validation.IsValidLabelValue(l.Value); len(errs) > 0 {
				t.Errorf("label value %s=%s: %v", l.Name, l.Value, errs)
			}
			m[l.Name] = l.Value
		}
		return m
	}
	m := labels()
	for k, v := range map[string]string{
		"vgpu-host.iommu": "true", "vgpu-host.mode.passthrough": "true", "vgpu-host.mode.mdev": "true", "vgpu-host.mode.vendor-vfio": "true",
		"vgpu-host.gpu.GA100_A100_SXM4_40GB": "1", "vgpu-host.gpu.GA102_GEFORCE_RTX_3080": "1",
		"vgpu-host.model.GA100_A100_SXM4_40GB": "1", "vgpu-host.model.TU104GL_TESLA_T4": "1", "vgpu-host.model.AD102GL_L40S": "1",
		"vgpu-host.vgpu.GRID_T4-2Q": "1", "vgpu-host.vgpu.NVIDIA_L40S-4Q": "1", "vgpu-host.vgpu-free.GRID_T4-2Q": "7",
	} {
		if m[k] != v {
			t.Errorf("label %s=%q, want %q (all: %v)", k, m[k], v, m)
		}
	}
	// The host takes the A100 back: its label goes, the model stays.
	a100 := kubetest.Addr("0000:17:00.0")
	tr.Unbind(a100)
	tr.Bind(a100, "nvidia")
	m = labels()
	if _, ok := m["vgpu-host.gpu.GA100_A100_SXM4_40GB"]; ok || m["vgpu-host.model.GA100_A100_SXM4_40GB"] != "1" {
		t.Errorf("after rebinding the A100: %v", m)
	}

	exp := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	p, err := kube.WriteFeatures(tr.Root, []kube.Label{{Name: "vgpu-host.iommu", Value: "true"}}, exp)
	if err != nil {
		t.Fatal(err)
	}
	if p != filepath.Join(tr.Dir(), "etc", kube.FeaturesFile) {
		t.Errorf("path %s", p)
	}
	b, _ := os.ReadFile(p)
	if !strings.Contains(string(b), "\n# +expiry-time=2030-01-02T03:04:05Z\nvgpu-host.iommu=true\n") {
		t.Errorf("feature file:\n%s", b)
	}
	if err := kube.RemoveFeatures(tr.Root); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Error("feature file not removed")
	}
	// A tree whose features.d is a link out of the host root (features.d -> the real host's)
	// gets no file there and loses none: the write and the removal are refused.
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, filepath.Base(kube.FeaturesFile)), []byte("the real host's\n"), 0o644)
	if err := os.Remove(filepath.Dir(p)); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Dir(p)); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.WriteFeatures(tr.Root, []kube.Label{{Name: "vgpu-host.iommu", Value: "true"}}, exp); !errors.Is(err, host.ErrRefused) {
		t.Errorf("WriteFeatures through a link out of the root: %v", err)
	}
	if err := kube.RemoveFeatures(tr.Root); !errors.Is(err, host.ErrRefused) {
		t.Errorf("RemoveFeatures through a link out of the root: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(outside, filepath.Base(kube.FeaturesFile))); string(b) != "the real host's\n" {
		t.Errorf("the file outside the root now reads %q", b)
	}
}

// TestPreferVGPUFragmentation: vGPU instances are pooled by parent GPU; a request goes to the
// parent with the fewest free instances that still fits it, so a roomy parent stays roomy,
// and a request no parent fits alone starts with the roomiest.
func TestPreferVGPUFragmentation(t *testing.T) {
	r := &kube.Resource{Name: "nvidia.com/GRID_A100-4C", Kind: kube.KindMdev}
	add := func(parent string, numa int, ids ...string) {
		for _, id := range ids {
			r.Devices = append(r.Devices, kube.Device{ID: id, Parent: parent, NUMA: numa, Healthy: true})
		}
	}
	add("0000:41:00.0", 0, "a1", "a2", "a3")
	add("0000:81:00.0", 1, "b1")
	r.Devices = append(r.Devices, kube.Device{ID: "sick", Parent: "0000:81:00.0", NUMA: 1, Healthy: false, Reason: "gone"})
	all := []string{"a1", "a2", "a3", "b1", "sick"}
	for _, c := range []struct {
		must []string
		size int
		want []string
	}{
		{nil, 1, []string{"b1"}},                        // the single free slot on 81:00.0, not one of 41:00.0's three
		{nil, 2, []string{"a1", "a2"}},                  // only 41:00.0 fits two
		{nil, 4, []string{"a1", "a2", "a3", "b1"}},      // nothing fits four: the roomiest first
		{[]string{"a3"}, 2, []string{"a3", "a1"}},       // the parent's NUMA node of a must-include first
		{[]string{"b1"}, 2, []string{"b1", "a1"}},       // node 1 has nothing more: node 0
		{[]string{"a1", "b1"}, 2, []string{"a1", "b1"}}, // must-includes only
	} {
		got, err := kube.Prefer(r, all, c.must, c.size)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("must %v size %d: %v %v, want %v", c.must, c.size, got, err, c.want)
		}
	}
	if _, err := kube.Prefer(r, all, nil, 5); !errors.Is(err, host.ErrBusy) {
		t.Errorf("more than the healthy devices: %v, want ErrBusy", err)
	}
}

// On the real H200 host's capture, with the pci.ids that host had (no H200 in it), a KubeVirt
// VM asking for `model: H200` finds no resource and the error says why, with the IDs to ask
// for instead; those IDs find the H200's resource (named by its IDs, PCI_10DE_2335).
func TestTranslateModelOnH200(t *testing.T) {
	t.Parallel()
	inv := scan(t, hosttest.RealGPUSnapshot(t, "nvidia-h200/sysfs-snapshot.tar.gz"))
	cat := kube.Offered(inv, kube.Config{})
	vm, err := domains.Load("../examples/image-builder.yaml")
	if err != nil {
		t.Fatal(err)
	}
	vm.Spec.GPUs = []domains.GPU{{Passthrough: &domains.Passthrough{Model: "H200"}}}
	_, err = kube.TranslateVM(vm, inv, cat, kube.TranslateOptions{})
	if !errors.Is(err, host.ErrNotFound) || !strings.Contains(err.Error(), `pci.ids names no device for 0000:00:06.0 (10de:2335), so no model matches it: select by ID (vendor: "10de", device: "2335")`) {
		t.Errorf("model H200: %v", err)
	}
	vm.Spec.GPUs = []domains.GPU{{Passthrough: &domains.Passthrough{Vendor: "10de", Device: "2335"}}}
	res, err := kube.TranslateVM(vm, inv, cat, kube.TranslateOptions{})
	if err != nil {
		t.Fatalf("vendor/device: %v", err)
	}
	if g := res.VM.Spec.Template.Spec.Domain.Devices.GPUs; len(g) != 1 || !strings.HasSuffix(g[0].DeviceName, "/PCI_10DE_2335") {
		t.Errorf("vendor/device: GPUs %+v", g)
	}
}
