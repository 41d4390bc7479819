package host

import (
	"fmt"
	"strings"
)

// Title is how a person names the function, as lspci -nn does: pci.ids' vendor and device
// names ("NVIDIA Corporation GA100 [A100 PCIe 80GB]"); for a device pci.ids does not list, the
// vendor's name and "Device" and the device ID ("NVIDIA Corporation Device 2335": Debian 12's
// pci.ids lacks the H200 of ../shared/fixtures/nvidia-h200); with no vendor name either, the
// IDs ("10de:2335").
func (d *Device) Title() string {
	switch {
	case d.VendorName != "" && d.DeviceName != "":
		return d.VendorName + " " + d.DeviceName
	case d.VendorName != "":
		return d.VendorName + " Device " + d.DeviceID
	}
	return d.VendorID + ":" + d.DeviceID
}

// TitleWith is Title, or for a device pci.ids does not name, nvml, the product name NVIDIA's
// driver gives it ("NVIDIA H200"), when there is one: how inspect's table and check's GPU lines
// name a GPU.
func (d *Device) TitleWith(nvml string) string {
	if d.DeviceName == "" && nvml != "" {
		return nvml
	}
	return d.Title()
}

// UnnamedGPUsHint is what a "model" selector that matched nothing adds when some of devs' GPUs
// have no device name in pci.ids, since a model (a substring of that name) can never select
// them: their addresses and IDs, and the two fixes. "" when every GPU has a name. Debian 12's
// pci.ids lacks the H200 (10de:2335) of ../shared/fixtures/nvidia-h200, so there `model: H200`
// selects nothing.
func UnnamedGPUsHint(devs []Device) string {
	var unnamed []string
	first := -1
	for i := range devs {
		d := &devs[i]
		if d.IsGPU && d.PhysFn == nil && d.DeviceName == "" {
			unnamed = append(unnamed, fmt.Sprintf("%s (%s:%s)", d.Address, d.VendorID, d.DeviceID))
			if first < 0 {
				first = i
			}
		}
	}
	if first < 0 {
		return ""
	}
	d := &devs[first]
	return fmt.Sprintf("pci.ids names no device for %s, so no model matches it: select by ID (vendor: %q, device: %q) or install or update pci.ids (the pci.ids package; update-pciids)",
		strings.Join(unnamed, ", "), d.VendorID, d.DeviceID)
}
