// Package vfio binds whole IOMMU groups to vfio-pci and restores them exactly.
//
// The kernel sequence, per function and always by address (never new_id, which would capture
// every card with the same vendor:device ID):
//
//	echo vfio-pci > /sys/bus/pci/devices/0000:01:00.1/driver_override
//	echo 0000:01:00.1 > /sys/bus/pci/drivers/snd_hda_intel/unbind
//	echo 0000:01:00.1 > /sys/bus/pci/drivers_probe
//	readlink /sys/bus/pci/devices/0000:01:00.1/driver   # ../../../bus/pci/drivers/vfio-pci
//
// A group is viable for a guest when every endpoint is on vfio-pci (or has no driver); bridges
// stay on pcieport. Before moving a function the Binder records its original driver and
// driver_override in a ledger (ROOT/var/lib/vgpu-host/vfio.json, written atomically), so Unbind
// can put back exactly what was there and leave driverless what was driverless.
//
// Every write goes through a host.Writer: host.SysfsWriter on a real host, host.Recorder for
// --dry-run, hosttest.Kernel in unit tests.
package vfio
