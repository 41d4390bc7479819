// Package mdev manages virtual GPU instances on a host: SR-IOV virtual functions, mediated
// devices (mdev) and NVIDIA's vendor-specific VFIO vGPU types, behind one abstraction.
//
// A vGPU instance is a parent (a physical GPU, or a virtual mdev parent such as mbochs) plus a
// type. Two backends create them:
//
// BackendMdev is the kernel's mdev bus (NVIDIA vGPU up to Ampere/16.x, Intel GVT-g, the
// kernel's mbochs/mdpy/mtty samples). An instance is a UUID:
//
//	echo UUID > /sys/class/mdev_bus/PARENT/mdev_supported_types/TYPE/create
//	echo 1    > /sys/bus/mdev/devices/UUID/remove
//
// BackendNvidiaVFIO is NVIDIA vGPU 17+ on Ada/Hopper/Blackwell with kernel >= 6.8, where there
// is no mdev bus. Each SR-IOV VF of the GPU has nvidia/creatable_vgpu_types (a header line,
// then "ID : NAME" lines that shrink as sibling VFs are used) and nvidia/current_vgpu_type
// (write an ID to assign, 0 to clear). An instance is a VF; it stays on the nvidia driver and
// is attached to a guest as a PCI hostdev with managed='no'.
//
// Package mdev does not read sysfs itself: every fact about the host (mdev parents and types,
// instances, SR-IOV, vendor vGPU files, a function's driver, PF and NUMA node) comes from
// package host's readers, and Parent, Type, Instance, PF and VendorVF are views built from
// them. Polls after a write (VF links appearing, an instance going away) use the same readers.
// What mdev reads itself are its own files: the state file, mdevctl definitions, the persisted
// VF counts and its systemd unit.
//
// Every host change goes through a host.Writer (a dry run records the writes; tests emulate the
// kernel with hosttest.Kernel). Operations check the current state first, so running one twice
// is harmless, and multi-step changes undo what they did when a later step fails.
//
// The API other packages use (vgpu-host apply, issue 7):
//
//	m := mdev.New(root, host.SysfsWriter{Root: root})
//	parents, _ := m.Parents()                            // every parent of both backends
//	p, _ := mdev.Place(mdev.Request{Profile: "A100-4C", Count: 1, NUMA: -1}, parents)
//	insts, _ := m.CreatePlacement(ctx, "vm1", p)         // all or none, converges on re-run
//	_, _ = m.RemoveOwner(ctx, "vm1", mdev.RemoveOptions{}) // releases what vm1 holds
//
// Instances created for an owner (a VM name) get UUIDs derived from the owner and an index
// (InstanceUUID), and are recorded with their owner in a file-locked state file under
// root.StateDir(), so re-running converges and a release only touches what this tool set.
package mdev
