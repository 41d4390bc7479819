package domains_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"libvirt.org/go/libvirtxml"

	"github.com/vgpu-host/vgpu-host/domains"
)

var update = flag.Bool("update", false, "rewrite testdata/*.xml from the current builder")

// exampleFiles lists examples/*.yaml; the test fails if there are none.
func exampleFiles(t testing.TB) []string {
	t.Helper()
	all, err := filepath.Glob("../examples/*.yaml")
	var files []string
	for _, f := range all {
		// Host layouts (kind: HostLayout) live beside the VM specs; package layout checks them.
		if b, err := os.ReadFile(f); err == nil && !bytes.Contains(b, []byte("\nkind: HostLayout\n")) {
			files = append(files, f)
		}
	}
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples found: %v", err)
	}
	return files
}

// rendering is one example rendered one way (offline, or against testInventory).
type rendering struct {
	name string // golden file stem: passthrough.offline
	vm   *domains.VM
	dom  *libvirtxml.Domain
	xml  string
}

// renderExamples renders every example offline and against testInventory.
func renderExamples(t testing.TB) []rendering {
	t.Helper()
	var out []rendering
	for _, f := range exampleFiles(t) {
		vm, err := domains.Load(f)
		if err != nil {
			t.Fatalf("load %s: %v", f, err)
		}
		stem := strings.TrimSuffix(filepath.Base(f), ".yaml")
		for _, mode := range []string{"offline", "host"} {
			opts := domains.ResolveOptions{Offline: mode == "offline"}
			if mode == "host" {
				opts.VirtType = "kvm" // testInventory's root has no /dev/kvm
			}
			alloc, err := domains.Resolve(vm, testInventory(), opts)
			if err != nil {
				t.Fatalf("resolve %s (%s): %v", f, mode, err)
			}
			dom, err := domains.Build(vm, alloc, domains.BuildOptions{})
			if err != nil {
				t.Fatalf("build %s (%s): %v", f, mode, err)
			}
			xml, err := dom.Marshal()
			if err != nil {
				t.Fatalf("marshal %s (%s): %v", f, mode, err)
			}
			out = append(out, rendering{name: stem + "." + mode, vm: vm, dom: dom, xml: xml})
		}
	}
	return out
}

func TestExamplesParseAndValidate(t *testing.T) {
	t.Parallel()
	for _, f := range exampleFiles(t) {
		vm, err := domains.Load(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if !strings.HasPrefix(filepath.Base(f), strings.SplitN(vm.Metadata.Name, "-", 2)[0][:1]) && vm.Metadata.Name == "" {
			t.Errorf("%s: empty name", f)
		}
	}
}

func TestGolden(t *testing.T) {
	t.Parallel()
	for _, r := range renderExamples(t) {
		path := filepath.Join("testdata", r.name+".xml")
		if *update {
			if err := os.WriteFile(path, []byte(r.xml+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test ./domains -update to create it)", err)
		}
		if string(want) != r.xml+"\n" {
			t.Errorf("%s differs from the builder's output; review and run go test ./domains -update\n--- got:\n%s", path, r.xml)
		}
	}
}

// TestRoundTrip: marshal -> unmarshal -> marshal gives the same document, so nothing the
// builder sets is lost on the way through libvirtxml.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	for _, r := range renderExamples(t) {
		var back libvirtxml.Domain
		if err := back.Unmarshal(r.xml); err != nil {
			t.Fatalf("%s: unmarshal: %v", r.name, err)
		}
		again, err := back.Marshal()
		if err != nil {
			t.Fatalf("%s: marshal: %v", r.name, err)
		}
		if again != r.xml {
			t.Errorf("%s: round trip changed the XML:\n%s\n---\n%s", r.name, r.xml, again)
		}
	}
}

// TestExampleExpectations pins what each example must contain, independent of goldens.
func TestExampleExpectations(t *testing.T) {
	t.Parallel()
	got := map[string]string{}
	for _, r := range renderExamples(t) {
		got[r.name] = r.xml
	}
	want := map[string][]string{
		"passthrough.offline": {`<driver name="vfio">`, `managed="no"`, `bus="0x17"`, `<rom bar="off">`},
		"passthrough.host": {`bus="0x17"`, `<pcihole64 unit="KiB">268435456</pcihole64>`,
			`<maxphysaddr mode="passthrough">`, `cpuset="16-31"`, `<memory mode="strict" nodeset="1">`, `<page size="1048576" unit="KiB">`},
		"vgpu-desktop.offline":        {`type="mdev"`, `model="vfio-pci"`, `display="on"`, `ramfb="on"`, `<uuid>`, `<model type="none">`},
		"vgpu-desktop.host":           {`type="mdev"`, `display="on"`},
		"vendor-vfio.offline":         {`managed="no"`, `bus="0x41" slot="0x00" function="0x4"`, `<driver name="vfio">`},
		"vendor-vfio.host":            {`managed="no"`, `function="0x4"`, `cpuset="16-31"`},
		"virtio-gpu-fallback.offline": {`<model type="virtio" heads="1" primary="yes">`, `fellBack="true"`},
		"virtio-gpu-fallback.host":    {`multifunction="on"`, `bus="0x0a" slot="0x00" function="0x1"`},
		"virgl-workstation.offline":   {`accel3d="yes"`, `type="egl-headless"`, `rendernode="/dev/dri/renderD128"`},
		"image-builder.offline":       {`-cidata.iso`, `<backingStore type="file">`},
	}
	for name, subs := range want {
		x, ok := got[name]
		if !ok {
			t.Errorf("no rendering %s", name)
			continue
		}
		for _, s := range subs {
			if !strings.Contains(x, s) {
				t.Errorf("%s: missing %s", name, s)
			}
		}
	}
	for name, x := range got {
		if strings.Contains(x, "qemu:commandline") {
			t.Errorf("%s: uses qemu:commandline (taints the domain)", name)
		}
	}
	for name, x := range got {
		if strings.Contains(x, "opt/ovmf/") {
			t.Errorf("%s: libvirt's qemu driver refuses fw_cfg names under opt/ovmf/", name)
		}
	}
	if strings.Contains(got["passthrough.offline"], "pcihole64") {
		t.Errorf("offline render sized MMIO without BAR data")
	}
	if strings.Contains(got["virtio-gpu-fallback.offline"], "<hostdev") {
		t.Errorf("fallback example attached a hostdev offline")
	}
}

// TestRenderMatchesMarshal: Render's pooled encoder writes exactly what libvirtxml's own
// Marshal (xml.MarshalIndent) writes, for every example, offline and online, on the first use
// of a pooled writer and on every reuse after it, with failed builds in between.
func TestRenderMatchesMarshal(t *testing.T) {
	t.Parallel()
	want := renderExamples(t)
	for round := 0; round < 3; round++ {
		for _, r := range want {
			opts := domains.ResolveOptions{Offline: strings.HasSuffix(r.name, ".offline")}
			if !opts.Offline {
				opts.VirtType = "kvm"
			}
			alloc, err := domains.Resolve(r.vm, testInventory(), opts)
			if err != nil {
				t.Fatal(err)
			}
			got, err := domains.Render(r.vm, alloc, domains.BuildOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got != r.xml {
				t.Fatalf("round %d, %s: Render differs from Domain.Marshal:\n%s\n---\n%s", round, r.name, got, r.xml)
			}
			// A build that fails between renders must not disturb the next one.
			if _, err := domains.Render(r.vm, &domains.Allocation{GPUs: make([]domains.GPUAllocation, len(r.vm.Spec.GPUs)+1)}, domains.BuildOptions{}); err == nil {
				t.Fatalf("%s: render with a mismatched allocation succeeded", r.name)
			}
		}
	}
}
