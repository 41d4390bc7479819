package hosttest

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/vgpu-host/vgpu-host/host"
)

// configSpace renders the first 256 bytes of a function's config space as the kernel's
// `config` attribute returns them to root: the type 0 (or type 1 for a bridge) header with the
// BAR registers holding the addresses of resource, and a capability list PM -> MSI -> PCIe.
func configSpace(p PCI, resource string) []byte {
	c := make([]byte, 256)
	le16 := func(off int, v uint16) { binary.LittleEndian.PutUint16(c[off:], v) }
	le32 := func(off int, v uint32) { binary.LittleEndian.PutUint32(c[off:], v) }
	le16(0x00, p.Vendor)
	le16(0x02, p.Device)
	le16(0x04, 0x0006) // memory space, bus master
	le16(0x06, 0x0010) // capability list
	c[0x09], c[0x0a], c[0x0b] = byte(p.Class), byte(p.Class>>8), byte(p.Class>>16)
	bridge := host.IsBridgeClass(p.Class)
	if bridge {
		c[0x0e] = 1
	} else {
		sv, sd := p.SubVendor, p.SubDevice
		if sv == 0 {
			sv, sd = p.Vendor, p.Device
		}
		le16(0x2c, sv)
		le16(0x2e, sd)
		for i, line := range strings.Split(resource, "\n") {
			if i >= 6 {
				break
			}
			f := strings.Fields(line)
			if len(f) != 3 {
				continue
			}
			start, _ := strconv.ParseUint(f[0], 0, 64)
			flags, _ := strconv.ParseUint(f[2], 0, 64)
			if start == 0 {
				continue
			}
			off := 0x10 + 4*i
			switch {
			case flags&0x100 != 0: // IORESOURCE_IO
				le32(off, uint32(start)|1)
			default:
				low := uint32(start) &^ 0xf
				if flags&0x100000 != 0 {
					low |= 0x4
					le32(off+4, uint32(start>>32))
				}
				if flags&0x2000 != 0 {
					low |= 0x8
				}
				le32(off, low)
			}
		}
	}
	c[0x34] = 0x40
	c[0x40], c[0x41] = 0x01, 0x50 // power management
	c[0x50], c[0x51] = 0x05, 0x60 // MSI
	c[0x60], c[0x61] = 0x10, 0x00 // PCI Express
	return c
}

// vfConfig makes a VF's config space read as a real VF's does (PCIe: the Vendor and Device ID
// registers read 0xffff, the BAR registers 0; the kernel takes both from the PF's SR-IOV
// capability), as the lab's capture of QEMU's nvme VFs shows.
func (t *Tree) vfConfig(vf host.Address) {
	p := filepath.Join(t.devPath[vf], "config")
	b := []byte(t.ReadFile(p))
	for i := 0; i < 4; i++ {
		b[i] = 0xff
	}
	for off := 0x10; off < 0x28; off++ {
		b[off] = 0
	}
	t.WriteFile(p, string(b))
}

// SetConfigAllOnes makes a's config space read all ones, as a function that fell off the bus
// (or sits in a reset it never leaves) answers every config read: the kernel keeps its sysfs
// directory, but `config` returns 0xff bytes.
func (t *Tree) SetConfigAllOnes(a host.Address) {
	b := make([]byte, 256)
	for i := range b {
		b[i] = 0xff
	}
	t.WriteFile(filepath.Join(t.devPath[a], "config"), string(b))
}

// LoseConfig zeroes a's BAR registers, as a device-internal reset that the kernel did not
// follow with pci_restore_state leaves them: the kernel's resource still lists the addresses.
// A reset through the `reset` attribute restores them.
func (t *Tree) LoseConfig(a host.Address) {
	p := filepath.Join(t.devPath[a], "config")
	b := []byte(t.ReadFile(p))
	for off := 0x10; off < 0x28 && off+4 <= len(b); off++ {
		b[off] = 0
	}
	t.WriteFile(p, string(b))
}

// restoreConfig rewrites a's BAR registers from its resource file: pci_restore_state after a
// reset through the `reset` attribute.
func (t *Tree) restoreConfig(a host.Address) {
	dir := t.devPath[a]
	p := filepath.Join(dir, "config")
	b := []byte(t.ReadFile(p))
	if len(b) < 0x28 {
		return
	}
	var spec PCI
	v, _ := strconv.ParseUint(strings.TrimSpace(t.ReadFile(filepath.Join(dir, "class"))), 0, 32)
	spec.Class = uint32(v)
	fresh := configSpace(spec, t.ReadFile(filepath.Join(dir, "resource")))
	if _, err := os.Lstat(filepath.Join(t.dir, dir, "physfn")); err != nil && !host.IsBridgeClass(spec.Class) {
		copy(b[0x10:0x28], fresh[0x10:0x28]) // a VF's stay 0
	}
	t.WriteFile(p, string(b))
}

// SetBARSize changes the size of BAR index in a's resource file (and keeps its start), as a
// device that came back from a reset with another BAR layout (a resizable BAR, other firmware)
// shows after a rescan.
func (t *Tree) SetBARSize(a host.Address, index int, size uint64) {
	p := filepath.Join(t.devPath[a], "resource")
	lines := strings.Split(t.ReadFile(p), "\n")
	f := strings.Fields(lines[index])
	start, _ := strconv.ParseUint(f[0], 0, 64)
	lines[index] = fmt.Sprintf("0x%016x 0x%016x %s", start, start+size-1, f[2])
	t.WriteFile(p, strings.Join(lines, "\n"))
}

// SetAER writes a's aer_dev_correctable, aer_dev_nonfatal and aer_dev_fatal as the kernel's
// drivers/pci/pcie/aer.c prints them: one "NAME COUNT" line per error bit, then the total.
// The per-bit counts here are all in the first bit's line.
func (t *Tree) SetAER(a host.Address, correctable, nonFatal, fatal uint64) {
	dir := t.devPath[a]
	cor := []string{"RxErr", "BadTLP", "BadDLLP", "Rollover", "Timeout", "NonFatalErr", "CorrIntErr", "HeaderOF"}
	unc := []string{"Undefined", "DLP", "SDES", "TLP", "FCP", "CmpltTO", "CmpltAbrt", "UnxCmplt", "RxOF", "MalfTLP", "ECRC", "UnsupReq", "ACSViol", "UncorrIntErr", "BlockedTLP", "AtomicOpBlocked", "TLPBlockedErr", "PoisonTLPBlocked"}
	render := func(names []string, n uint64, total string) string {
		var b strings.Builder
		for i, name := range names {
			v := uint64(0)
			if i == 0 {
				v = n
			}
			fmt.Fprintf(&b, "%s %d\n", name, v)
		}
		fmt.Fprintf(&b, "%s %d\n", total, n)
		return b.String()
	}
	t.WriteFile(filepath.Join(dir, "aer_dev_correctable"), render(cor, correctable, "TOTAL_ERR_COR"))
	t.WriteFile(filepath.Join(dir, "aer_dev_nonfatal"), render(unc, nonFatal, "TOTAL_ERR_NONFATAL"))
	t.WriteFile(filepath.Join(dir, "aer_dev_fatal"), render(unc, fatal, "TOTAL_ERR_FATAL"))
}

// SetLink writes a's current_link_speed/width and max_link_speed/width ("16.0 GT/s PCIe", 16).
func (t *Tree) SetLink(a host.Address, speed string, width int, maxSpeed string, maxWidth int) {
	dir := t.devPath[a]
	t.WriteFile(filepath.Join(dir, "current_link_speed"), speed+"\n")
	t.WriteFile(filepath.Join(dir, "max_link_speed"), maxSpeed+"\n")
	t.WriteFile(filepath.Join(dir, "current_link_width"), fmt.Sprintf("%d\n", width))
	t.WriteFile(filepath.Join(dir, "max_link_width"), fmt.Sprintf("%d\n", maxWidth))
}

// RemoveFunction removes a from the bus as `echo 1 > /sys/bus/pci/devices/ADDR/remove` does:
// the driver is unbound and the device directory, its bus link and its group membership go.
func (t *Tree) RemoveFunction(a host.Address) {
	t.Unbind(a)
	dir := t.devPath[a]
	if g, err := os.Readlink(filepath.Join(t.dir, dir, "iommu_group")); err == nil {
		os.Remove(filepath.Join(t.dir, "sys/kernel/iommu_groups", filepath.Base(g), "devices", a.String()))
	}
	os.RemoveAll(filepath.Join(t.dir, dir))
	os.Remove(filepath.Join(t.dir, "sys/bus/pci/devices", a.String()))
	delete(t.devPath, a)
	delete(t.native, a)
	delete(t.uevent, a)
}

// deviceOf returns the address of the PCI function whose directory is dirReal, if it is one.
func (t *Tree) deviceOf(dirReal string) (host.Address, bool) {
	a, err := host.ParseAddress(filepath.Base(dirReal))
	if err != nil {
		return host.Address{}, false
	}
	if d, ok := t.devPath[a]; !ok || filepath.Join(t.dir, d) != dirReal {
		return host.Address{}, false
	}
	return a, true
}

// writeResetMethod emulates reset_method_store (drivers/pci/pci.c, Linux >= 5.15): "default"
// brings back every supported method, otherwise the value is a space-separated list of
// supported method names, kept in the order written; an unknown or unsupported name is
// EINVAL and leaves the list as it was. The attribute exists only for functions with a reset.
func (t *Tree) writeResetMethod(a host.Address, v string) error {
	sup, ok := t.resetSupported[a]
	if !ok {
		return syscall.ENOENT
	}
	var list []string
	if strings.TrimSpace(v) == "default" {
		list = sup
	} else {
		for _, m := range strings.Fields(v) {
			if !contains(sup, m) {
				return syscall.EINVAL
			}
			list = append(list, m)
		}
	}
	if len(list) == 0 {
		return syscall.EINVAL
	}
	t.WriteFile(filepath.Join(t.devPath[a], "reset_method"), strings.Join(list, " ")+"\n")
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// reset emulates reset_store: only "1" is accepted; pci_reset_function tries the enabled
// methods in order and the first that works ends it; the saved config space is then restored.
// A function whose config space reads all ones never comes back from any reset (the kernel
// gives up after its wait for the device: ENOTTY). Kernel.ResetHook, when set, is asked
// first for each method.
func (k *Kernel) reset(ctx context.Context, a host.Address, v string) error {
	t := k.T
	if v != "1" {
		return syscall.EINVAL
	}
	methods := strings.Fields(t.ReadFile(filepath.Join(t.devPath[a], "reset_method")))
	if len(methods) == 0 {
		return syscall.ENOTTY
	}
	var err error = syscall.ENOTTY
	for _, m := range methods {
		if hook := k.ResetHook; hook != nil {
			k.kmu.Unlock()
			herr := hook(ctx, a, m)
			k.kmu.Lock()
			if herr != nil {
				err = herr
				continue
			}
		}
		if c := t.ReadFile(filepath.Join(t.devPath[a], "config")); len(c) >= 2 && c[0] == '\xff' && c[1] == '\xff' {
			err = syscall.ENOTTY
			continue
		}
		t.restoreConfig(a)
		k.mu.Lock()
		k.resets = append(k.resets, a.String()+" "+m)
		k.mu.Unlock()
		return nil
	}
	return err
}

// Resets returns the resets the kernel made, as "ADDR METHOD", in order.
func (k *Kernel) Resets() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.resets...)
}
