package kube

import (
	"fmt"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
)

// MarkDeviceNodes marks unhealthy every device whose VFIO device nodes are missing under root:
// the pod is given /dev/vfio/N of each of the device's IOMMU groups, and a node that is not
// there makes the container fail to start (or the VM fail to open its device). A group node may
// be missing where the kernel offers only the VFIO character devices (CONFIG_VFIO_GROUP off,
// iommufd): then the function's and its companions' /dev/vfio/devices/vfioN must all be there.
//
//	$ ls /sys/bus/pci/devices/0000:41:00.0/vfio-dev     $ ls /dev/vfio /dev/vfio/devices
//	vfio0                                               42  devices  vfio     vfio0
//
// The device plugin runs with the node's /dev/vfio mounted under its host root
// (deploy/kubernetes); without that mount every device is reported unhealthy, which is the
// safe answer.
//
// A device one of whose functions is quarantined (docs/health.md: it failed its health check
// when it was handed back) is unhealthy too, naming the record: the kubelet must not hand a
// dead GPU to the next pod. So is one whose function, or parent GPU, failed its last check
// (gone from the bus, AER errors, a fatal NVIDIA Xid).
func (c *Catalog) MarkDeviceNodes(root host.Root) {
	for i := range c.Resources {
		for j := range c.Resources[i].Devices {
			d := &c.Resources[i].Devices[j]
			if !d.Healthy {
				continue
			}
			if q := quarantined(root, *d); q != nil {
				d.Healthy, d.Reason = false, fmt.Sprintf("%s %s", q.Address, q.Refusal())
				continue
			}
			if a, h := failing(root, *d); h != nil {
				d.Healthy, d.Reason = false, fmt.Sprintf("%s failed its health check at %s: %s (vgpu-host host health %s)", a, h.CheckedAt.UTC().Format(time.RFC3339), h.Reason(), a)
				continue
			}
			if g, ok := MissingGroupNode(root, *d); ok {
				d.Healthy, d.Reason = false, fmt.Sprintf("no /dev/vfio/%d on the host (the group is not on vfio-pci, or /dev/vfio is not mounted into the plugin)", g)
			}
		}
	}
}

// failing returns the function and the failed last check (docs/health.md: the agent's health
// watch keeps it within seconds of a device leaving the bus, an AER error or a fatal NVIDIA
// Xid) of one of the PCI functions d hands over or of its parent: a VF's PF, an mdev's or a
// MIG-backed vGPU's GPU. An Xid is reported for the whole GPU, so everything carved from it
// is unhealthy with it. Nil when every last check passed or there is none.
func failing(root host.Root, d Device) (host.Address, *host.DeviceHealth) {
	var addrs []host.Address
	if d.Address != nil {
		addrs = append(addrs, *d.Address)
		addrs = append(addrs, d.Companions...)
	}
	if p, err := host.ParseAddress(d.Parent); err == nil {
		addrs = append(addrs, p)
	}
	for _, a := range addrs {
		st, err := host.LoadHealthState(root, a)
		if err != nil || st == nil || st.Last == nil || st.Last.Healthy {
			continue // an unreadable health file is host health's to report; the quarantine check reads the records
		}
		return a, st.Last
	}
	return host.Address{}, nil
}

// quarantined returns the quarantine record of one of the PCI functions d hands over, or nil.
// A record that cannot be read counts as one: the safe answer.
func quarantined(root host.Root, d Device) *host.Quarantine {
	if d.Address == nil {
		return nil
	}
	for _, a := range append([]host.Address{*d.Address}, d.Companions...) {
		q, err := host.LoadQuarantine(root, a)
		if err != nil {
			return &host.Quarantine{Address: a, Path: host.QuarantinePath(root, a), Problems: []host.Problem{{Check: "quarantine", Detail: err.Error()}}}
		}
		if q != nil {
			return q
		}
	}
	return nil
}

// MissingGroupNode returns the first IOMMU group of d whose /dev/vfio/N is missing under root
// and not made up for by VFIO character devices of every function d hands over; false when the
// pod can be given what it needs.
func MissingGroupNode(root host.Root, d Device) (int, bool) {
	for _, g := range d.Groups {
		if host.VFIODevExists(root, g) {
			continue
		}
		if !hasCdevs(root, d) {
			return g, true
		}
	}
	return 0, false
}

// hasCdevs reports whether every PCI function d hands over has a VFIO character device under
// root (false for an mdev, which has none here).
func hasCdevs(root host.Root, d Device) bool {
	if d.Address == nil {
		return false
	}
	for _, a := range append([]host.Address{*d.Address}, d.Companions...) {
		if !host.VFIOCdevsPresent(root, a) {
			return false
		}
	}
	return true
}
