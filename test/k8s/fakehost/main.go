// Command fakehost writes the fake host root test/k8s/run.sh gives vgpu-host-kube: two
// GeForce RTX 3080 (10de:2206) on vfio-pci — the first with its HDMI audio function in the
// same IOMMU group, the second with its audio function in a group of its own — the same
// consumer host as kube/deviceplugin's tests, so the real kubelet sees two devices of
// nvidia.com/GA102_GEFORCE_RTX_3080.
//
//	go run ./test/k8s/fakehost DIR
package main

import (
	"fmt"
	"os"

	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/internal/kubetest"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: fakehost DIR")
		os.Exit(2)
	}
	dir := os.Args[1]
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "fakehost:", err)
		os.Exit(1)
	}
	tr := hosttest.New(hosttest.ProgramTB("fakehost", dir))
	tr.WriteFile("usr/share/misc/pci.ids", kubetest.PCIIDs)
	_, audio := tr.ConsumerGPU("0000:00:01.0", "0000:01:00.0", "vfio-pci")
	tr.Bind(audio, "vfio-pci")
	tr.RootPort("0000:00:02.0")
	tr.AddPCI(hosttest.PCI{Addr: "0000:02:00.0", Parent: "0000:00:02.0", Vendor: hosttest.VendorNVIDIA, Device: 0x2206,
		Class: 0x030000, Driver: "vfio-pci", NativeDriver: "nouveau", Group: tr.NewGroup()})
	tr.AddPCI(hosttest.PCI{Addr: "0000:02:00.1", Parent: "0000:00:02.0", Vendor: hosttest.VendorNVIDIA, Device: 0x1aef,
		Class: 0x040300, Driver: "vfio-pci", NativeDriver: "snd_hda_intel", Group: tr.NewGroup()})
	fmt.Println(dir)
}
