package hosttest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
)

// Kernel emulates the kernel's reaction to sysfs writes on a Tree. It implements host.Writer:
//
//	devices/ADDR/driver_override ← "vfio-pci" / "\n"   sets / clears the override
//	drivers/DRV/unbind ← ADDR, devices/ADDR/driver/unbind  removes the driver link (blocks while Held)
//	drivers/DRV/bind ← ADDR, drivers_probe ← ADDR       binds (override first, else the native driver)
//	devices/PF/sriov_numvfs ← N                          creates/removes VFs (EBUSY, ERANGE, ENOENT as the kernel)
//	mdev_supported_types/T/create ← UUID, mdev/devices/UUID/remove ← 1
//	devices/VF/nvidia/current_vgpu_type ← ID | 0
//	devices/ADDR/reset_method ← "flr" | "default"         narrows / restores the reset methods (EINVAL if unsupported)
//	devices/ADDR/reset ← 1                               resets with the first method that works (ResetHook)
//
// Every write is also recorded (Writes). Writes to other existing files just store the value;
// writes to missing files fail with ENOENT, as sysfs does.
type Kernel struct {
	T *Tree

	mu     sync.Mutex
	writes []host.RecordedWrite
	// kmu serializes the emulated kernel's reactions, as the kernel's own locks do (mdev
	// create checks available_instances and creates under the parent's lock): tests run
	// writers concurrently. A blocked unbind releases it while it waits.
	kmu  sync.Mutex
	held map[host.Address]chan struct{}
	// FailWrite, when set, is consulted before each write; a non-nil error is returned as the
	// kernel's answer (to test reverts of half-done operations).
	FailWrite func(path, value string) error
	// LateMdevRemove, when set, makes a write to an mdev instance's remove return at once and
	// the instance go LateMdevRemove later: the kernel's answer when another remover's removal
	// of the instance is in progress (remove_store: device_remove_file_self lost the race).
	LateMdevRemove time.Duration
	// ResetHook, when set, is asked before each reset method a write of 1 to a function's
	// reset tries; an error fails that method (the kernel goes on to the next). A hook that
	// blocks until ctx ends is a reset that hangs.
	ResetHook func(ctx context.Context, a host.Address, method string) error
	resets    []string
}

// NewKernel returns a Kernel for t.
func NewKernel(t *Tree) *Kernel {
	return &Kernel{T: t, held: map[host.Address]chan struct{}{}}
}

// Hold makes unbinding a block until Release, as a driver does while a process holds the device.
func (k *Kernel) Hold(a host.Address) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.held[a] = make(chan struct{})
}

// Release lets a blocked unbind of a finish.
func (k *Kernel) Release(a host.Address) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if c, ok := k.held[a]; ok {
		close(c)
		delete(k.held, a)
	}
}

// Writes returns every write seen, relative to the tree root, in order.
func (k *Kernel) Writes() []host.RecordedWrite {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]host.RecordedWrite(nil), k.writes...)
}

// UsedNewID reports whether any write went to a driver's new_id (which captures every card with
// the same ID; vgpu-host must never use it).
func (k *Kernel) UsedNewID() bool {
	for _, w := range k.Writes() {
		if strings.HasSuffix(w.Path, "/new_id") {
			return true
		}
	}
	return false
}

// Write implements host.Writer.
func (k *Kernel) Write(ctx context.Context, path, value string) error {
	rel, err := filepath.Rel(k.T.dir, path)
	if err != nil || strings.HasPrefix(rel, "..") {
		return fmt.Errorf("hosttest: write outside the tree: %s", path)
	}
	k.mu.Lock()
	k.writes = append(k.writes, host.RecordedWrite{Path: rel, Value: value})
	fail := k.FailWrite
	k.mu.Unlock()
	if fail != nil {
		if err := fail(rel, value); err != nil {
			return &os.PathError{Op: "write", Path: path, Err: err}
		}
	}
	if err := k.write(ctx, rel, strings.TrimRight(value, "\n")); err != nil {
		return &os.PathError{Op: "write", Path: path, Err: err}
	}
	return nil
}

// write emulates the kernel's answer to one sysfs write: one case per attribute the tools
// write (92 lines), each a few lines of the kernel's rule for it.
func (k *Kernel) write(ctx context.Context, rel, v string) error {
	k.kmu.Lock()
	defer k.kmu.Unlock()
	t := k.T
	// Resolve the path through symlinks inside the tree, as the kernel's VFS would.
	abs := filepath.Join(t.dir, rel)
	dirReal, err := filepath.EvalSymlinks(filepath.Dir(abs))
	if err != nil {
		return syscall.ENOENT
	}
	base := filepath.Base(abs)
	realRel, _ := filepath.Rel(t.dir, filepath.Join(dirReal, base))
	parent := filepath.Base(dirReal)

	switch {
	case realRel == "sys/bus/pci/drivers_probe":
		a, err := host.ParseAddress(v)
		if err != nil {
			return syscall.EINVAL
		}
		return k.probe(a, "")
	case base == "driver_override":
		if _, err := os.Stat(filepath.Join(dirReal, "vendor")); err != nil {
			return syscall.ENOENT
		}
		if v == "" {
			v = "(null)"
		}
		return os.WriteFile(filepath.Join(dirReal, base), []byte(v+"\n"), 0o644)
	case base == "unbind" && strings.HasPrefix(realRel, "sys/bus/pci/drivers/"):
		a, err := host.ParseAddress(v)
		if err != nil {
			return syscall.EINVAL
		}
		if t.Driver(a) != parent {
			return syscall.ENODEV
		}
		k.mu.Lock()
		c := k.held[a]
		k.mu.Unlock()
		if c != nil {
			k.kmu.Unlock()
			select {
			case <-c:
			case <-ctx.Done():
				// The real write would stay blocked in the kernel; the caller gave up.
				k.kmu.Lock()
				return ctx.Err()
			}
			k.kmu.Lock()
		}
		t.Unbind(a)
		return nil
	case base == "bind" && strings.HasPrefix(realRel, "sys/bus/pci/drivers/"):
		a, err := host.ParseAddress(v)
		if err != nil {
			return syscall.EINVAL
		}
		if t.Driver(a) != "" {
			return syscall.EBUSY
		}
		return k.probe(a, parent)
	case base == "new_id" || base == "remove_id":
		return nil // recorded; tests assert it is never used
	case base == "sriov_numvfs":
		a, err := host.ParseAddress(parent)
		if err != nil {
			return syscall.ENOENT
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return syscall.EINVAL
		}
		return t.setNumVFs(a, n)
	case base == "create" && filepath.Base(filepath.Dir(dirReal)) == "mdev_supported_types":
		return t.createMdev(dirReal, v)
	case base == "remove" && !strings.Contains(realRel, "mdev_supported_types") && isMdevDir(dirReal):
		if v != "1" {
			return syscall.EINVAL
		}
		if d := k.LateMdevRemove; d > 0 {
			go func() {
				time.Sleep(d)
				k.kmu.Lock()
				defer k.kmu.Unlock()
				t.removeMdev(dirReal)
			}()
			return nil
		}
		return t.removeMdev(dirReal)
	case base == "reset_method" || base == "reset":
		a, ok := t.deviceOf(dirReal)
		if !ok {
			break
		}
		if base == "reset" {
			return k.reset(ctx, a, v)
		}
		return t.writeResetMethod(a, v)
	case base == "current_vgpu_type" && parent == "nvidia":
		a, err := host.ParseAddress(filepath.Base(filepath.Dir(dirReal)))
		if err != nil {
			return syscall.ENOENT
		}
		id, err := strconv.Atoi(v)
		if err != nil {
			return syscall.EINVAL
		}
		return t.setNvidiaType(a, id)
	}
	if _, err := os.Stat(abs); err != nil {
		return syscall.ENOENT
	}
	return os.WriteFile(abs, []byte(v+"\n"), 0o644)
}

// probe binds a as the kernel does on drivers_probe (only) or DRV/bind (only = DRV): the
// override wins; without one the native driver binds if it is loaded.
func (k *Kernel) probe(a host.Address, only string) error {
	t := k.T
	if _, ok := t.devPath[a]; !ok {
		return syscall.ENODEV
	}
	if t.Driver(a) != "" {
		return nil
	}
	ov := strings.TrimSpace(t.ReadFile(filepath.Join(t.devPath[a], "driver_override")))
	want := t.native[a]
	if ov != "(null)" && ov != "" {
		want = ov
	}
	if only != "" {
		if ov != "(null)" && ov != "" && ov != only {
			return syscall.ENODEV // the override forbids other drivers
		}
		want = only
	}
	if want == "" || !exists(filepath.Join(t.dir, "sys/bus/pci/drivers", want)) {
		return nil // no driver claims it: stays driverless, the write still succeeds
	}
	t.Bind(a, want)
	if want == "vfio-pci" {
		if g, err := os.Readlink(filepath.Join(t.dir, t.devPath[a], "iommu_group")); err == nil {
			t.WriteFile(filepath.Join("dev/vfio", filepath.Base(g)), "")
		}
	}
	return nil
}

// setNumVFs emulates sriov_numvfs writes with the kernel's rules (drivers/pci/iov.c).
func (t *Tree) setNumVFs(pf host.Address, n int) error {
	spec, ok := t.vfSpec[pf]
	if !ok {
		return syscall.ENOENT
	}
	dir := t.devPath[pf]
	cur, _ := strconv.Atoi(strings.TrimSpace(t.ReadFile(filepath.Join(dir, "sriov_numvfs"))))
	if n == cur {
		return nil
	}
	if t.Driver(pf) == "" || spec.NoSRIOVDriver {
		return syscall.ENOENT // no driver, or the driver has no sriov_configure
	}
	if n > spec.Total {
		return syscall.ERANGE
	}
	if cur != 0 && n != 0 {
		return syscall.EBUSY // "%d VFs already enabled. Disable before enabling %d VFs"
	}
	if n == 0 {
		for i := 0; i < cur; i++ {
			vf := t.VFAddress(pf, i)
			t.Unbind(vf)
			g, _ := os.Readlink(filepath.Join(t.dir, t.devPath[vf], "iommu_group"))
			os.RemoveAll(filepath.Join(t.dir, t.devPath[vf]))
			os.Remove(filepath.Join(t.dir, "sys/bus/pci/devices", vf.String()))
			os.Remove(filepath.Join(t.dir, dir, fmt.Sprintf("virtfn%d", i)))
			if g != "" {
				os.RemoveAll(filepath.Join(t.dir, "sys/kernel/iommu_groups", filepath.Base(g)))
			}
			delete(t.devPath, vf)
			delete(t.native, vf)
			delete(t.uevent, vf)
		}
		t.WriteFile(filepath.Join(dir, "sriov_numvfs"), "0\n")
		return nil
	}
	autoprobe := strings.TrimSpace(t.ReadFile(filepath.Join(dir, "sriov_drivers_autoprobe"))) != "0"
	pfClass := strings.TrimSpace(t.ReadFile(filepath.Join(dir, "class")))
	var class uint32
	fmt.Sscanf(pfClass, "0x%x", &class)
	parent := ""
	if p := filepath.Dir(dir); filepath.Base(p) != "pci0000:00" {
		parent = filepath.Base(p)
	}
	vendor := strings.TrimSpace(t.ReadFile(filepath.Join(dir, "vendor")))
	var ven uint64
	fmt.Sscanf(vendor, "0x%x", &ven)
	numa, _ := strconv.Atoi(strings.TrimSpace(t.ReadFile(filepath.Join(dir, "numa_node"))))
	for i := 0; i < n; i++ {
		vf := t.VFAddress(pf, i)
		drv := ""
		if autoprobe {
			drv = spec.VFDriver
		}
		t.AddPCI(PCI{Addr: vf.String(), Parent: parent, Vendor: uint16(ven), Device: spec.VFDevice, Class: class,
			Driver: drv, NativeDriver: spec.VFDriver, NUMA: numa, NUMASet: true, ResetMethods: "flr",
			BARs: []BARSpec{{Index: 0, Size: 16 << 10, Is64: true}}})
		t.vfConfig(vf)
		t.symlink(filepath.Join(t.devPath[vf], "physfn"), dir)
		t.symlink(filepath.Join(dir, fmt.Sprintf("virtfn%d", i)), t.devPath[vf])
		if spec.Nvidia != nil {
			t.WriteFile(filepath.Join(t.devPath[vf], "nvidia", "current_vgpu_type"), "0\n")
			// NVIDIA's vendor-specific VFIO driver registers each VF it probes with VFIO,
			// which gives the VF's group its /dev/vfio/N.
			if g, err := os.Readlink(filepath.Join(t.dir, t.devPath[vf], "iommu_group")); err == nil && drv != "" {
				t.WriteFile(filepath.Join("dev/vfio", filepath.Base(g)), "")
			}
		}
	}
	t.WriteFile(filepath.Join(dir, "sriov_numvfs"), fmt.Sprintf("%d\n", n))
	if spec.Nvidia != nil {
		t.refreshNvidia(pf)
	}
	return nil
}

// setNvidiaType emulates nvidia/current_vgpu_type on a VF.
func (t *Tree) setNvidiaType(vf host.Address, id int) error {
	pfLink, err := os.Readlink(filepath.Join(t.dir, t.devPath[vf], "physfn"))
	if err != nil {
		return syscall.ENOENT
	}
	pf := host.MustParseAddress(filepath.Base(pfLink))
	cur := t.nvidiaCurrent(vf)
	if id == 0 {
		t.WriteFile(filepath.Join(t.devPath[vf], "nvidia/current_vgpu_type"), "0\n")
		t.refreshNvidia(pf)
		return nil
	}
	if cur != 0 {
		return syscall.EBUSY
	}
	ok := false
	for _, ty := range t.nvidiaCreatable(pf) {
		if ty.ID == id {
			ok = true
		}
	}
	if !ok {
		return syscall.EINVAL
	}
	t.WriteFile(filepath.Join(t.devPath[vf], "nvidia/current_vgpu_type"), fmt.Sprintf("%d\n", id))
	t.refreshNvidia(pf)
	return nil
}

func (t *Tree) nvidiaCurrent(vf host.Address) int {
	v, _ := strconv.Atoi(strings.TrimSpace(t.ReadFile(filepath.Join(t.devPath[vf], "nvidia/current_vgpu_type"))))
	return v
}

// nvidiaCreatable computes what a free VF of pf may still take: one type per GPU at a time,
// and no more than MaxPerGPU instances of it. In MIG mode (SetMIGInstances) it is the
// MIG-backed types instead, each while a GPU instance of its profile is not used by a VF.
func (t *Tree) nvidiaCreatable(pf host.Address) []NvidiaVGPUType {
	spec := t.vfSpec[pf]
	n, _ := strconv.Atoi(strings.TrimSpace(t.ReadFile(filepath.Join(t.devPath[pf], "sriov_numvfs"))))
	used := map[int]int{}
	for i := 0; i < n; i++ {
		if c := t.nvidiaCurrent(t.VFAddress(pf, i)); c != 0 {
			used[c]++
		}
	}
	var out []NvidiaVGPUType
	if gis, on := t.migGIs[pf]; on {
		free := map[string]int{}
		for _, p := range gis {
			free[p]++
		}
		for _, ty := range spec.Nvidia {
			if ty.MIGProfile != "" {
				free[ty.MIGProfile] -= used[ty.ID]
			}
		}
		for _, ty := range spec.Nvidia {
			if ty.MIGProfile != "" && free[ty.MIGProfile] > 0 {
				out = append(out, ty)
			}
		}
		return out
	}
	for _, ty := range spec.Nvidia {
		if ty.MIGProfile != "" {
			continue // MIG-backed: listed only in MIG mode
		}
		if len(used) > 0 && used[ty.ID] == 0 {
			continue
		}
		if used[ty.ID] >= ty.MaxPerGPU {
			continue
		}
		out = append(out, ty)
	}
	return out
}

// refreshNvidia rewrites creatable_vgpu_types on every VF of pf: empty on VFs that hold a type,
// the shrinking list on the others.
func (t *Tree) refreshNvidia(pf host.Address) {
	creatable := nvidiaCreatable(t.nvidiaCreatable(pf))
	n, _ := strconv.Atoi(strings.TrimSpace(t.ReadFile(filepath.Join(t.devPath[pf], "sriov_numvfs"))))
	for i := 0; i < n; i++ {
		vf := t.VFAddress(pf, i)
		c := creatable
		if t.nvidiaCurrent(vf) != 0 {
			c = "ID    : vGPU Name\n"
		}
		t.WriteFile(filepath.Join(t.devPath[vf], "nvidia/creatable_vgpu_types"), c)
	}
}

// SetMIGInstances puts the NVIDIA GPU pf in MIG mode with GPU instances of these profiles (what
// `vgpu-host mig apply` or nvidia-smi mig -cgi would have made through NVML), or out of MIG mode
// when profiles is nil. As NVIDIA's vGPU 17+ driver does on kernels >= 6.8, the VFs'
// nvidia/creatable_vgpu_types then list the MIG-backed types (NvidiaVGPUType.MIGProfile) whose
// profile has a GPU instance no VF uses yet, and no time-sliced type.
func (t *Tree) SetMIGInstances(pf host.Address, profiles []string) {
	if t.migGIs == nil {
		t.migGIs = map[host.Address][]string{}
	}
	if profiles == nil {
		delete(t.migGIs, pf)
	} else {
		t.migGIs[pf] = append([]string{}, profiles...)
	}
	t.refreshNvidia(pf)
}

// CreateMdev creates an mdev instance directly (test setup).
func (t *Tree) CreateMdev(parentDir, typeID, uuid string) {
	t.tb.Helper()
	if err := t.createMdev(filepath.Join(t.dir, parentDir, "mdev_supported_types", typeID), uuid); err != nil {
		t.tb.Fatalf("hosttest: create mdev %s: %v", uuid, err)
	}
}

// createMdev emulates mdev_supported_types/T/create (drivers/vfio/mdev/mdev_sysfs.c).
func (t *Tree) createMdev(typeDir, uuid string) error {
	if len(uuid) != 36 || strings.Count(uuid, "-") != 4 {
		return syscall.EINVAL
	}
	uuid = strings.ToLower(uuid)
	if exists(filepath.Join(t.dir, "sys/bus/mdev/devices", uuid)) {
		return syscall.EEXIST
	}
	avail, _ := strconv.Atoi(strings.TrimSpace(readAbs(filepath.Join(typeDir, "available_instances"))))
	if avail <= 0 {
		return syscall.EUSERS // mdev_device_create: no instances available
	}
	parentDir := filepath.Dir(filepath.Dir(typeDir))
	parentRel, _ := filepath.Rel(t.dir, parentDir)
	typeRel, _ := filepath.Rel(t.dir, typeDir)
	md := filepath.Join(parentRel, uuid)
	t.mkdir(md)
	t.symlink(filepath.Join(md, "mdev_type"), typeRel)
	t.symlink(filepath.Join(md, "subsystem"), "sys/bus/mdev")
	t.WriteFile(filepath.Join(md, "remove"), "")
	g := t.NewGroup()
	gd := filepath.Join("sys/kernel/iommu_groups", fmt.Sprint(g))
	t.symlink(filepath.Join(gd, "devices", uuid), md)
	t.symlink(filepath.Join(md, "iommu_group"), gd)
	t.symlink(filepath.Join("sys/bus/mdev/devices", uuid), md)
	t.symlink(filepath.Join(typeRel, "devices", uuid), md)
	t.WriteFile(filepath.Join(typeRel, "available_instances"), fmt.Sprintf("%d\n", avail-1))
	t.WriteFile(filepath.Join("dev/vfio", fmt.Sprint(g)), "")
	return nil
}

func isMdevDir(dir string) bool {
	_, err := os.Lstat(filepath.Join(dir, "mdev_type"))
	return err == nil
}

// removeMdev emulates /sys/bus/mdev/devices/UUID/remove ← 1.
func (t *Tree) removeMdev(dir string) error {
	uuid := filepath.Base(dir)
	typeLink, err := os.Readlink(filepath.Join(dir, "mdev_type"))
	if err != nil {
		return syscall.ENODEV
	}
	typeDir := filepath.Join(dir, typeLink)
	g, _ := os.Readlink(filepath.Join(dir, "iommu_group"))
	avail, _ := strconv.Atoi(strings.TrimSpace(readAbs(filepath.Join(typeDir, "available_instances"))))
	os.RemoveAll(dir)
	os.Remove(filepath.Join(t.dir, "sys/bus/mdev/devices", uuid))
	os.Remove(filepath.Join(typeDir, "devices", uuid))
	if g != "" {
		os.RemoveAll(filepath.Join(t.dir, "sys/kernel/iommu_groups", filepath.Base(g)))
		os.Remove(filepath.Join(t.dir, "dev/vfio", filepath.Base(g)))
	}
	return writeAtomic(filepath.Join(typeDir, "available_instances"), fmt.Sprintf("%d\n", avail+1))
}

func readAbs(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

// Load implements host.ModuleLoader: loading vfio-pci (or any PCI driver) creates its driver
// directory, as the real module's init does.
func (k *Kernel) Load(_ context.Context, module string) error {
	k.mu.Lock()
	k.writes = append(k.writes, host.RecordedWrite{Path: "modprobe", Value: module})
	k.mu.Unlock()
	name := strings.ReplaceAll(module, "_", "-")
	k.T.LoadDriver(name)
	k.T.mkdir(filepath.Join("sys/module", strings.ReplaceAll(module, "-", "_")))
	return nil
}
