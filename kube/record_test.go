package kube_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/internal/kubetest"
	"github.com/vgpu-host/vgpu-host/kube"
)

// build is what the device plugin does each turn: the catalog with the recorded names, and the
// record extended.
func build(t *testing.T, root host.Root, cfg kube.Config) *kube.Catalog {
	t.Helper()
	inv, err := host.Scan(root)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err = cfg.WithRecorded(root)
	if err != nil {
		t.Fatal(err)
	}
	cat := kube.Build(inv, cfg)
	if err := cat.RecordNames(root, cfg); err != nil {
		t.Fatal(err)
	}
	return cat
}

// fillL40S gives every VF of ExampleHost's L40S a vGPU type: every creatable list is empty then.
func fillL40S(t *testing.T, tr *hosttest.Tree) {
	t.Helper()
	k := hosttest.NewKernel(tr)
	pf := kubetest.Addr("0000:41:00.0")
	for i := 1; i < 4; i++ {
		if err := k.Write(t.Context(), tr.Root.PCIDevice(tr.VFAddress(pf, i), "nvidia", "current_vgpu_type"), "1157"); err != nil {
			t.Fatal(err)
		}
	}
	inv, _ := host.Scan(tr.Root)
	for _, d := range inv.Devices {
		if d.VendorVGPU != nil && len(d.VendorVGPU.Creatable) != 0 {
			t.Fatalf("%s still lists %v", d.Address, d.VendorVGPU.Creatable)
		}
	}
}

// vendorNames lists the names of the vendor-VFIO resources of cat.
func vendorNames(cat *kube.Catalog) []string {
	var out []string
	for _, r := range cat.Resources {
		if r.Kind == kube.KindVendorVFIO {
			out = append(out, r.Name)
		}
	}
	return out
}

// TestVendorVFIONameSurvivesFullGPU: a vendor-VFIO type keeps its resource name when every VF
// of the GPU holds a type and no creatable list shows the name any more, across a restart (the
// record is re-read from the host), and in `kubevirt config`'s Offered catalog. Before, the
// resource became nvidia.com/1157, its devices reappeared healthy under that name, and
// KubeVirt's permittedHostDevices no longer matched.
func TestVendorVFIONameSurvivesFullGPU(t *testing.T) {
	tr := kubetest.ExampleHost(t)
	const want = "nvidia.com/NVIDIA_L40S-4Q"
	if got := vendorNames(build(t, tr.Root, kube.Config{})); len(got) != 1 || got[0] != want {
		t.Fatalf("before filling: %v", got)
	}
	fillL40S(t, tr)
	cat := build(t, tr.Root, kube.Config{}) // a fresh process: only the record remembers
	if got := vendorNames(cat); len(got) != 1 || got[0] != want {
		t.Fatalf("full GPU: vendor-VFIO resources %v, want [%s]", got, want)
	}
	if r, _ := cat.Resource(want); len(r.Devices) != 4 || r.Model != "NVIDIA L40S-4Q" {
		t.Errorf("full GPU: %+v", r)
	}
	inv, _ := host.Scan(tr.Root)
	cfg, _ := kube.Config{}.WithRecorded(tr.Root)
	for _, r := range kube.Offered(inv, cfg).Resources {
		if r.Kind == kube.KindVendorVFIO && r.Name != want {
			t.Errorf("kubevirt config offers %s", r.Name)
		}
	}
	// An override by the type's name still applies on the full GPU (the name is recorded).
	over := kube.Config{ResourceNames: map[string]string{"NVIDIA L40S-4Q": "nvidia.com/L40S-4Q"}}
	if got := vendorNames(build(t, tr.Root, over)); len(got) != 1 || got[0] != "nvidia.com/L40S-4Q" {
		t.Errorf("override on a full GPU: %v", got)
	}
}

// TestVendorVFIONameFullAtFirstSight: a GPU already full when vgpu-host first sees it gets a
// name from the type number, recorded, and kept when the type's name shows up later.
func TestVendorVFIONameFullAtFirstSight(t *testing.T) {
	tr := kubetest.ExampleHost(t)
	fillL40S(t, tr)
	const want = "nvidia.com/VGPU_TYPE_1157"
	if got := vendorNames(build(t, tr.Root, kube.Config{})); len(got) != 1 || got[0] != want {
		t.Fatalf("full at first sight: %v, want [%s]", got, want)
	}
	k := hosttest.NewKernel(tr)
	if err := k.Write(t.Context(), tr.Root.PCIDevice(tr.VFAddress(kubetest.Addr("0000:41:00.0"), 3), "nvidia", "current_vgpu_type"), "0"); err != nil {
		t.Fatal(err)
	}
	got := vendorNames(build(t, tr.Root, kube.Config{}))
	if len(got) != 1 || got[0] != want {
		t.Errorf("after a VF was freed: %v, want [%s]", got, want)
	}
	if b := tr.ReadFile("var/lib/vgpu-host/" + kube.NamesFile); !strings.Contains(b, `"NVIDIA L40S-4Q"`) {
		t.Errorf("type name not recorded once seen: %s", b)
	}
}

// TestNamesFileNotFollowed: the record is a state file: a symlink there is not followed, read
// or written through, and a FIFO is not waited on.
func TestNamesFileNotFollowed(t *testing.T) {
	for _, kind := range []string{"symlink", "fifo"} {
		tr := kubetest.ExampleHost(t)
		outside := filepath.Join(t.TempDir(), "precious")
		os.WriteFile(outside, []byte("{}\n"), 0o600)
		p := tr.Root.StateDir(kube.NamesFile)
		os.MkdirAll(filepath.Dir(p), 0o755)
		var err error
		if kind == "symlink" {
			err = os.Symlink(outside, p)
		} else {
			err = syscall.Mkfifo(p, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { _, err := kube.LoadNames(tr.Root); done <- err }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), p) {
				t.Errorf("%s: LoadNames: %v", kind, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: LoadNames waits", kind)
		}
		inv, _ := host.Scan(tr.Root)
		if err := kube.Build(inv, kube.Config{}).RecordNames(tr.Root, kube.Config{}); err == nil {
			t.Errorf("%s: RecordNames wrote over it", kind)
		}
		if b, _ := os.ReadFile(outside); string(b) != "{}\n" {
			t.Errorf("%s: the file outside was written: %q", kind, b)
		}
	}
}
