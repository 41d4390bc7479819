// Command fakehost writes the fake host roots test/k8s/run.sh gives vgpu-host-kube, and prints
// (JSON, on stdout) what the real kubelet must then show for each: the resource name, the
// KubeVirt env variable, every device with the /dev/vfio nodes its container must get, and a
// group node whose removal makes one device unhealthy. The expectations are written here from
// what was built (the names as literals, the groups from the tree), not computed by kube.
//
//	go run ./test/k8s/fakehost [-host consumer|lab|nvidia] [-snapshot FILE] DIR
//
// Hosts:
//
//	consumer  two GeForce RTX 3080 (10de:2206) on vfio-pci — the first with its HDMI audio
//	          function in the same IOMMU group, the second with its audio function in a group
//	          of its own — the consumer host of kube/deviceplugin's tests
//	lab       the real-kernel lab snapshot (host/testdata/lab-snapshot.tar.gz: Debian's 6.1
//	          under QEMU q35) with its real names, both ATI Rage 128 (1002:5046) bound to
//	          vfio-pci as `vgpu-host bind` leaves them — 0000:01:00.0 with the ICH6 HDA
//	          function that shares its group 10, 0000:02:00.0 alone in group 11 — and the
//	          machine's Debian pci.ids copied in, as the lab (test/e2e/run.sh) does
//	nvidia    a generated NVIDIA vendor-VFIO host (hosttest.NvidiaSRIOVGPU): an L40S with four
//	          SR-IOV VFs, two of them given vGPU type 1160 (NVIDIA L40S-8Q) through the fake
//	          kernel's current_vgpu_type, the way the vendor-VFIO tests set them
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/host/snapshot"
	"github.com/vgpu-host/vgpu-host/internal/kubetest"
)

// Expect is what run.sh checks against the real kubelet, scheduler and CRI for one host.
type Expect struct {
	Host     string `json:"host"`
	Resource string `json:"resource"`
	Env      string `json:"env"`
	// Devices maps each device ID (PCI address) to the /dev/vfio nodes its container gets.
	Devices map[string][]string `json:"devices"`
	// DRADevices maps each device ID to its device name in the DRA driver's ResourceSlice.
	DRADevices map[string]string `json:"dra_devices"`
	// UnhealthyNode is a /dev/vfio/N (relative to the root) whose removal leaves one device
	// of the resource unhealthy.
	UnhealthyNode string `json:"unhealthy_node"`
}

func main() {
	kind := flag.String("host", "consumer", "which host: consumer, lab or nvidia")
	snapshot := flag.String("snapshot", "host/testdata/lab-snapshot.tar.gz", "the lab snapshot (-host lab)")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: fakehost [-host consumer|lab|nvidia] [-snapshot FILE] DIR")
		os.Exit(2)
	}
	dir := flag.Arg(0)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fail(err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) > 0 {
		fail(fmt.Errorf("%s is not empty", dir))
	}
	tb := hosttest.ProgramTB("fakehost", dir)
	var e Expect
	switch *kind {
	case "consumer":
		e = consumer(hosttest.New(tb))
	case "lab":
		e = lab(tb, dir, *snapshot)
	case "nvidia":
		e = nvidia(hosttest.New(tb))
	default:
		fmt.Fprintf(os.Stderr, "fakehost: unknown -host %q: use consumer, lab or nvidia\n", *kind)
		os.Exit(2)
	}
	e.Host = *kind
	e.DRADevices = draNames(*kind, e.Devices)
	if err := json.NewEncoder(os.Stdout).Encode(e); err != nil {
		fail(err)
	}
}

// draNames is each device's name in the DRA driver's ResourceSlice: kube/dra names a whole GPU
// pci-<address>, a vendor-VFIO VF vf-<address>.
func draNames(kind string, devices map[string][]string) map[string]string {
	prefix := "pci-"
	if kind == "nvidia" {
		prefix = "vf-"
	}
	out := map[string]string{}
	for id := range devices {
		out[id] = prefix + strings.NewReplacer(":", "-", ".", "-").Replace(id)
	}
	return out
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "fakehost:", err)
	os.Exit(1)
}

// nodes is the /dev/vfio nodes of a device whose functions sit in groups: the container node
// and one per group.
func nodes(groups ...int) []string {
	out := []string{"/dev/vfio/vfio"}
	for _, g := range groups {
		out = append(out, "/dev/vfio/"+strconv.Itoa(g))
	}
	return out
}

func consumer(tr *hosttest.Tree) Expect {
	tr.WriteFile("usr/share/misc/pci.ids", kubetest.PCIIDs)
	gpu, audio := tr.ConsumerGPU("0000:00:01.0", "0000:01:00.0", "vfio-pci")
	tr.Bind(audio, "vfio-pci")
	tr.RootPort("0000:00:02.0")
	b := tr.AddPCI(hosttest.PCI{Addr: "0000:02:00.0", Parent: "0000:00:02.0", Vendor: hosttest.VendorNVIDIA, Device: 0x2206,
		Class: 0x030000, Driver: "vfio-pci", NativeDriver: "nouveau", Group: tr.NewGroup()})
	bAudio := tr.AddPCI(hosttest.PCI{Addr: "0000:02:00.1", Parent: "0000:00:02.0", Vendor: hosttest.VendorNVIDIA, Device: 0x1aef,
		Class: 0x040300, Driver: "vfio-pci", NativeDriver: "snd_hda_intel", Group: tr.NewGroup()})
	return Expect{
		Resource: "nvidia.com/GA102_GEFORCE_RTX_3080",
		Env:      "PCI_RESOURCE_NVIDIA_COM_GA102_GEFORCE_RTX_3080",
		Devices: map[string][]string{
			gpu.String(): nodes(tr.Group(gpu)),
			b.String():   nodes(tr.Group(b), tr.Group(bAudio)),
		},
		UnhealthyNode: "dev/vfio/" + strconv.Itoa(tr.Group(gpu)),
	}
}

func lab(tb testing.TB, dir, tarball string) Expect {
	if err := hosttest.UnpackSnapshot(tarball, dir); err != nil {
		fail(fmt.Errorf("unpack %s: %w", tarball, err))
	}
	// The lab guest's names come from this machine's Debian pci.ids (test/e2e/run.sh copies
	// it in); without one the names would be PCI_1002_5046 and the run would not be the lab's.
	ids, err := os.ReadFile("/usr/share/misc/pci.ids")
	if err != nil {
		fail(fmt.Errorf("the lab's names come from Debian's pci.ids (package pci.ids): %w", err))
	}
	tr := hosttest.Adopt(tb, dir)
	tr.WriteFile("usr/share/misc/pci.ids", string(ids))
	// The snapshot lists /dev/vfio (`ls -l`, dev/vfio.list) rather than carrying its nodes:
	// each character device listed becomes an empty file, as host/snapshot writes them now.
	list, err := os.ReadFile(filepath.Join(dir, snapshot.VFIOList))
	if err != nil {
		fail(fmt.Errorf("the lab snapshot has no /dev/vfio listing: %w", err))
	}
	for _, l := range strings.Split(string(list), "\n") {
		if f := strings.Fields(l); len(f) > 0 && strings.HasPrefix(f[0], "c") {
			tr.WriteFile(filepath.Join("dev/vfio", filepath.Base(f[len(f)-1])), "")
		}
	}
	gpu1, hda := host.MustParseAddress("0000:01:00.0"), host.MustParseAddress("0000:01:00.1")
	gpu2 := host.MustParseAddress("0000:02:00.0")
	if tr.Group(gpu1) != tr.Group(hda) {
		fail(fmt.Errorf("the snapshot changed: %s and %s are not in one group", gpu1, hda))
	}
	for _, a := range []host.Address{gpu1, hda, gpu2} {
		tr.Unbind(a)
		tr.Bind(a, "vfio-pci")
	}
	if _, err := os.Stat(filepath.Join(dir, "dev/vfio", strconv.Itoa(tr.Group(gpu2)))); err != nil {
		fail(fmt.Errorf("binding %s made no group node: %w", gpu2, err))
	}
	return Expect{
		Resource: "amd.com/RAGE_4_RAGE_128_PRO_AGP_4X",
		Env:      "PCI_RESOURCE_AMD_COM_RAGE_4_RAGE_128_PRO_AGP_4X",
		Devices: map[string][]string{
			gpu1.String(): nodes(tr.Group(gpu1)),
			gpu2.String(): nodes(tr.Group(gpu2)),
		},
		UnhealthyNode: "dev/vfio/" + strconv.Itoa(tr.Group(gpu1)),
	}
}

func nvidia(tr *hosttest.Tree) Expect {
	tr.WriteFile("usr/share/misc/pci.ids", kubetest.PCIIDs)
	pf := tr.NvidiaSRIOVGPU("0000:80:01.0", "0000:81:00.0", 1, 4, nil)
	k := hosttest.NewKernel(tr)
	e := Expect{
		Resource: "nvidia.com/NVIDIA_L40S-8Q",
		Env:      "PCI_RESOURCE_NVIDIA_COM_NVIDIA_L40S-8Q",
		Devices:  map[string][]string{},
	}
	for i := 0; i < 2; i++ {
		vf := tr.VFAddress(pf, i)
		if err := k.Write(context.Background(), tr.Root.PCIDevice(vf, "nvidia", "current_vgpu_type"), "1160"); err != nil {
			fail(err)
		}
		e.Devices[vf.String()] = nodes(tr.Group(vf))
		if i == 0 {
			e.UnhealthyNode = "dev/vfio/" + strconv.Itoa(tr.Group(vf))
		}
	}
	return e
}
