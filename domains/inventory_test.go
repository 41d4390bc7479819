package domains_test

import (
	"github.com/vgpu-host/vgpu-host/host"
)

// testInventory is a host with every kind of GPU the examples ask for, built in code:
//
//	0000:0a:00.0 RTX 3090 (+ 0a:00.1 HDMI audio)    consumer card, node 0
//	0000:17:00.0 A100 80GB (128 GiB BAR1)           data-center card, node 1, cpus 16-31
//	0000:3b:00.0 Tesla T4, mdev parent of GRID T4-2Q (nvidia-222, 4 free)
//	0000:41:00.0 L40S PF with VF 0000:41:00.4 (vendor-VFIO, creatable 557 NVIDIA L40S-4Q)
func testInventory() *host.Inventory {
	a := host.MustParseAddress
	pf := a("0000:41:00.0")
	t4 := a("0000:3b:00.0")
	return &host.Inventory{
		Root:  "/nonexistent-root",
		IOMMU: true,
		Devices: []host.Device{
			{Address: a("0000:0a:00.0"), VendorID: "10de", DeviceID: "2204", DeviceName: "GA102 [GeForce RTX 3090]", Class: "030000", IsGPU: true,
				Driver: "vfio-pci", IOMMUGroup: 12, NUMANode: 0, LocalCPUs: "0-15", Companions: []host.Address{a("0000:0a:00.1")},
				BARs: []host.BAR{{Index: 0, Size: 16 << 20}, {Index: 1, Size: 32 << 30, Is64: true, Prefetch: true}, {Index: 3, Size: 32 << 20, Is64: true, Prefetch: true}}},
			{Address: a("0000:0a:00.1"), VendorID: "10de", DeviceID: "1aef", DeviceName: "GA102 High Definition Audio Controller", Class: "040300",
				Driver: "vfio-pci", IOMMUGroup: 12, NUMANode: 0, BARs: []host.BAR{{Index: 0, Size: 16 << 10}}},
			{Address: a("0000:17:00.0"), VendorID: "10de", DeviceID: "20b5", DeviceName: "GA100 [A100 PCIe 80GB]", Class: "030200", IsGPU: true,
				Driver: "vfio-pci", IOMMUGroup: 30, NUMANode: 1, LocalCPUs: "16-31",
				BARs: []host.BAR{{Index: 0, Size: 16 << 20}, {Index: 1, Size: 128 << 30, Is64: true, Prefetch: true}, {Index: 3, Size: 32 << 20, Is64: true, Prefetch: true}}},
			{Address: t4, VendorID: "10de", DeviceID: "1eb8", DeviceName: "TU104GL [Tesla T4]", Class: "030200", IsGPU: true,
				Driver: "nvidia", IOMMUGroup: 40, NUMANode: 0, LocalCPUs: "0-15"},
			{Address: pf, VendorID: "10de", DeviceID: "26b9", DeviceName: "AD102GL [L40S]", Class: "030200", IsGPU: true,
				Driver: "nvidia", IOMMUGroup: 50, NUMANode: 1, LocalCPUs: "16-31", SRIOV: &host.SRIOV{TotalVFs: 32, NumVFs: 1, VFs: []host.Address{a("0000:41:00.4")}}},
			{Address: a("0000:41:00.4"), VendorID: "10de", DeviceID: "26b9", DeviceName: "AD102GL [L40S]", Class: "030200", IsGPU: true,
				Driver: "nvidia", IOMMUGroup: 51, NUMANode: 1, LocalCPUs: "16-31", PhysFn: &pf,
				BARs:       []host.BAR{{Index: 0, Size: 16 << 20}, {Index: 1, Size: 8 << 30, Is64: true, Prefetch: true}},
				VendorVGPU: &host.VendorVGPU{Creatable: []host.VendorVGPUType{{ID: 557, Name: "NVIDIA L40S-4Q"}, {ID: 558, Name: "NVIDIA L40S-8Q"}}}},
		},
		MdevParents: []host.MdevParent{{
			Parent: t4.String(), Address: &t4,
			Types: []host.MdevType{
				{ID: "nvidia-222", Name: "GRID T4-2Q", DeviceAPI: "vfio-pci", AvailableInstances: 4},
				{ID: "nvidia-223", Name: "GRID T4-4Q", DeviceAPI: "vfio-pci", AvailableInstances: 0},
			},
		}},
	}
}
