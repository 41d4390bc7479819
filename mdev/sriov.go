package mdev

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/internal/revert"
	"github.com/vgpu-host/vgpu-host/vfio"
)

// SR-IOV. The kernel's rules (drivers/pci/iov.c, sriov_numvfs_store):
//
//	# echo 3 > sriov_numvfs      (while 2 are enabled)
//	-bash: echo: write error: Device or resource busy     → write 0 first
//	ERANGE above sriov_totalvfs; ENOENT when the PF's driver has no sriov_configure.
//
// sriov_drivers_autoprobe=0 keeps host drivers off new VFs meant for guests.

// Driver choices for EnableVFs.
const (
	// DriverKeep leaves VFs to whatever the kernel binds (sriov_drivers_autoprobe untouched).
	DriverKeep = "keep"
	// DriverVFIO sets sriov_drivers_autoprobe=0 and binds every VF to vfio-pci by address.
	DriverVFIO = "vfio-pci"
)

// PF is an SR-IOV physical function and its VFs.
type PF struct {
	Address   host.Address `json:"address"`
	Driver    string       `json:"driver"`
	TotalVFs  int          `json:"total_vfs"`
	NumVFs    int          `json:"num_vfs"`
	Autoprobe *bool        `json:"drivers_autoprobe,omitempty"`
	VFs       []VF         `json:"vfs"`
	// Persisted is the VF count `host restore` applies at boot (nil when none is recorded).
	Persisted *PersistedPF `json:"persisted,omitempty"`
	// AutoprobeRestored is set by DisableVFs when it wrote back the sriov_drivers_autoprobe
	// value the PF had before EnableVFs set it to 0.
	AutoprobeRestored bool `json:"drivers_autoprobe_restored,omitempty"`
}

// VF is one virtual function.
type VF struct {
	Address host.Address `json:"address"`
	Driver  string       `json:"driver"`
	// VendorVGPU is true when the VF offers NVIDIA's vendor-specific vGPU files.
	VendorVGPU bool `json:"vendor_vgpu"`
}

// EnableOptions controls EnableVFs.
type EnableOptions struct {
	// Driver is DriverKeep (default) or DriverVFIO.
	Driver string
	// Persist records the count and driver for `host restore` at boot.
	Persist bool
	// Force changes the count even when a process holds a VF open (a guest's QEMU on
	// /dev/vfio/N): the kernel's write then blocks until the holder lets go.
	Force bool
}

// DisableOptions controls DisableVFsWith.
type DisableOptions struct {
	// Persist also forgets the count `host restore` would apply.
	Persist bool
	// Force disables even when a process holds a VF open (see EnableOptions.Force).
	Force bool
}

// ReadPF reads a PF's SR-IOV state (host.ReadSRIOV); ErrUnsupported when the device has no
// SR-IOV capability.
func (m *Manager) ReadPF(a host.Address) (PF, error) {
	sr, _, err := host.ReadSRIOV(m.Root, a)
	if errors.Is(err, host.ErrNotFound) {
		return PF{}, fmt.Errorf("SR-IOV PF %s: %w", a, host.NoDevice(m.Root, a))
	}
	if err != nil {
		return PF{}, fmt.Errorf("SR-IOV PF %s: %w", a, err)
	}
	if sr == nil {
		if l, err := host.ReadFunctionLinks(m.Root, a); err == nil && l.PhysFn != nil {
			return PF{}, fmt.Errorf("SR-IOV PF %s: %w: %s is itself a VF (name its PF %s)", a, host.ErrInvalid, a, l.PhysFn)
		}
		return PF{}, fmt.Errorf("SR-IOV PF %s: %w: the device has no SR-IOV capability (no %s)", a, host.ErrUnsupported, m.Root.PCIDevice(a, "sriov_totalvfs"))
	}
	return m.pfView(a, sr), nil
}

// pfView is the PF at a as host.SRIOV shows it, with its VFs' drivers and the persisted count.
func (m *Manager) pfView(a host.Address, sr *host.SRIOV) PF {
	pf := PF{Address: a, Driver: m.driverOf(a), TotalVFs: sr.TotalVFs, NumVFs: sr.NumVFs, Autoprobe: sr.DriversAutoprobe, VFs: []VF{}}
	for _, vf := range sr.VFs {
		pf.VFs = append(pf.VFs, VF{Address: vf, Driver: m.driverOf(vf), VendorVGPU: m.IsVendorVF(vf)})
	}
	if p, ok := m.persistedPF(a); ok {
		pf.Persisted = &p
	}
	return pf
}

// ListPFs returns every SR-IOV capable PF, sorted by address.
func (m *Manager) ListPFs() ([]PF, error) {
	addrs, err := host.ListPCIFunctions(m.Root)
	if err != nil {
		return nil, err
	}
	out := []PF{}
	for _, a := range addrs {
		sr, _, err := host.ReadSRIOV(m.Root, a)
		if errors.Is(err, host.ErrNotFound) {
			continue // removed while we listed
		}
		if err != nil {
			return nil, err
		}
		if sr != nil {
			out = append(out, m.pfView(a, sr))
		}
	}
	return out, nil
}

// VFAddresses computes the addresses of a PF's first n VFs from sriov_offset and
// sriov_stride (host.SRIOV.VFAddresses); this works before the VFs exist, so a dry run can
// name them.
func (m *Manager) VFAddresses(pf host.Address, n int) ([]host.Address, error) {
	sr, _, err := host.ReadSRIOV(m.Root, pf)
	if err != nil {
		return nil, fmt.Errorf("VF addresses of %s: %w", pf, err)
	}
	out, err := sr.VFAddresses(pf, n)
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, m.Root.PCIDevice(pf, "sriov_offset"))
	}
	return out, nil
}

// EnableVFs makes pf have exactly n VFs, following the kernel's rules for the user: the count
// is checked against sriov_totalvfs first, a different non-zero count is set to 0 before the
// new one, and nothing is written when n VFs are already enabled (a re-run converges). With
// opts.Driver == DriverVFIO it sets sriov_drivers_autoprobe=0 before enabling, so host
// drivers do not grab the VFs, and binds each VF to vfio-pci by address. If enabling the new
// count fails after the old one was cleared, the old count is restored.
func (m *Manager) EnableVFs(ctx context.Context, pf host.Address, n int, opts EnableOptions) (PF, error) {
	if opts.Driver == "" {
		opts.Driver = DriverKeep
	}
	if opts.Driver != DriverKeep && opts.Driver != DriverVFIO {
		return PF{}, fmt.Errorf("enable VFs on %s: %w: --driver %q (use vfio-pci or keep)", pf, host.ErrInvalid, opts.Driver)
	}
	if n < 1 {
		return PF{}, fmt.Errorf("enable VFs on %s: %w: count %d (use 'vf disable' for 0)", pf, host.ErrInvalid, n)
	}
	st, err := m.ReadPF(pf)
	if err != nil {
		return PF{}, err
	}
	// A PF that failed its handback check gives no VF to a guest (docs/health.md).
	if err := vfio.RefuseQuarantined(m.Root, fmt.Sprintf("enable %d VFs on %s", n, pf), pf); err != nil {
		return PF{}, err
	}
	numPath := m.Root.PCIDevice(pf, "sriov_numvfs")
	if n > st.TotalVFs {
		return PF{}, fmt.Errorf("enable %d VFs on %s: %w: the device supports at most %d (%s); the kernel would answer ERANGE",
			n, pf, host.ErrInvalid, st.TotalVFs, m.Root.PCIDevice(pf, "sriov_totalvfs"))
	}
	if st.Driver == "" {
		return PF{}, fmt.Errorf("enable VFs on %s: %w: no driver is bound to the PF, and sriov_numvfs needs the PF driver's sriov_configure (bind its host driver first)", pf, host.ErrUnsupported)
	}
	if opts.Driver == DriverVFIO && (st.Autoprobe == nil || *st.Autoprobe) && st.NumVFs != n {
		if err := m.setAutoprobeOff(ctx, pf); err != nil {
			return PF{}, fmt.Errorf("enable VFs on %s: set sriov_drivers_autoprobe=0 so host drivers leave the VFs alone: %w", pf, err)
		}
	}
	if st.NumVFs != n && st.NumVFs != 0 && !opts.Force {
		if err := m.checkVFsFree(st, fmt.Sprintf("change %s from %d to %d VFs (the kernel needs 0 first, which removes every VF)", pf, st.NumVFs, n)); err != nil {
			return PF{}, err
		}
	}
	if st.NumVFs != n {
		if st.NumVFs != 0 {
			if err := m.setNumVFs(ctx, pf, st.Driver, 0); err != nil {
				return PF{}, fmt.Errorf("change %s from %d to %d VFs: the kernel needs 0 first: %w", pf, st.NumVFs, n, err)
			}
		}
		if err := m.setNumVFs(ctx, pf, st.Driver, n); err != nil {
			if st.NumVFs != 0 {
				if rerr := m.setNumVFs(context.WithoutCancel(ctx), pf, st.Driver, st.NumVFs); rerr != nil {
					return PF{}, revert.Wrap(err, rerr)
				}
				return PF{}, fmt.Errorf("%w (restored the previous %d VFs)", err, st.NumVFs)
			}
			return PF{}, err
		}
		if err := m.wait(ctx, func() (bool, error) {
			vfs, _ := host.ReadVFs(m.Root, pf) // a link the kernel is still adding reads as missing
			return len(vfs) == n, nil
		}); err != nil {
			return PF{}, fmt.Errorf("enable %d VFs on %s via %s: the virtfn links did not appear: %w", n, pf, numPath, err)
		}
	}
	if opts.Driver == DriverVFIO {
		vfs, err := m.VFAddresses(pf, n)
		if err != nil {
			return PF{}, err
		}
		for _, vf := range vfs {
			if err := m.bindVFIO(ctx, vf); err != nil {
				return PF{}, fmt.Errorf("enable VFs on %s: %w", pf, err)
			}
		}
	}
	if opts.Persist {
		if err := m.persistPF(PersistedPF{Address: pf.String(), NumVFs: n, Driver: opts.Driver}); err != nil {
			return PF{}, err
		}
	}
	if m.DryRun {
		return st, nil
	}
	return m.ReadPF(pf)
}

// DisableVFs sets sriov_numvfs to 0 (nothing is written when it already is), then puts
// sriov_drivers_autoprobe back to the value it had before EnableVFs set it to 0 (if vgpu-host
// changed it; PF.AutoprobeRestored says so). With persist it also forgets the count
// `host restore` would apply.
func (m *Manager) DisableVFs(ctx context.Context, pf host.Address, persist bool) (PF, error) {
	return m.DisableVFsWith(ctx, pf, DisableOptions{Persist: persist})
}

// DisableVFsWith is DisableVFs with options. Unless opts.Force, it refuses (host.ErrBusy,
// naming the processes) when a VF is held open: the kernel's write would block until the
// holder (a guest's QEMU) lets the VF go.
func (m *Manager) DisableVFsWith(ctx context.Context, pf host.Address, opts DisableOptions) (PF, error) {
	persist := opts.Persist
	st, err := m.ReadPF(pf)
	if err != nil {
		return PF{}, err
	}
	if st.NumVFs != 0 && !opts.Force {
		if err := m.checkVFsFree(st, fmt.Sprintf("disable the %d VFs of %s", st.NumVFs, pf)); err != nil {
			return PF{}, err
		}
	}
	if st.NumVFs != 0 {
		if err := m.setNumVFs(ctx, pf, st.Driver, 0); err != nil {
			return PF{}, err
		}
		if err := m.wait(ctx, func() (bool, error) {
			vfs, _ := host.ReadVFs(m.Root, pf)
			return len(vfs) == 0, nil
		}); err != nil {
			return PF{}, fmt.Errorf("disable VFs on %s: the virtfn links did not go away: %w", pf, err)
		}
	}
	restored, err := m.restoreAutoprobe(ctx, pf)
	if err != nil {
		return PF{}, fmt.Errorf("disable VFs on %s: %w", pf, err)
	}
	if persist {
		if err := m.forgetPF(pf); err != nil {
			return PF{}, err
		}
	}
	if m.DryRun {
		st.AutoprobeRestored = restored
		return st, nil
	}
	out, err := m.ReadPF(pf)
	out.AutoprobeRestored = restored
	return out, err
}

// checkVFsFree refuses (host.ErrBusy) what removes pf's VFs when a process holds one open:
// its VFIO group node /dev/vfio/N (a guest's QEMU, or any VFIO user). Removing such a VF makes
// the kernel's sriov_numvfs write block until the holder closes it, so the refusal names the
// holders and the way out instead.
func (m *Manager) checkVFsFree(pf PF, what string) error {
	// One scan of /proc for every VF's group node; a VF without a group has no node to hold.
	nodeVF := map[string]host.Address{}
	var nodes []string
	for _, vf := range pf.VFs {
		l, err := host.ReadFunctionLinks(m.Root, vf.Address)
		if err != nil || l.IOMMUGroup < 0 {
			continue
		}
		// /proc/PID/fd links name the path the host sees, not the one under --host-root.
		node := host.HostPath(m.Root, host.VFIODev(m.Root, l.IOMMUGroup))
		nodeVF[node] = vf.Address
		nodes = append(nodes, node)
	}
	var held []string
	for _, h := range host.Holders(m.Root, nodes) {
		held = append(held, fmt.Sprintf("VF %s: %s", nodeVF[h.Path], h))
	}
	if len(held) == 0 {
		return nil
	}
	return fmt.Errorf("%s: %w: %s (stop the guests using them, or pass --force and the write to %s waits until they let go)",
		what, host.ErrBusy, strings.Join(held, "; "), m.Root.PCIDevice(pf.Address, "sriov_numvfs"))
}

// setAutoprobeOff writes sriov_drivers_autoprobe=0 on pf, first recording the value it had
// in the state file (under its lock) unless a record exists already: a second enable must not
// replace the original with vgpu-host's own 0. A failed write drops a record it just made.
func (m *Manager) setAutoprobeOff(ctx context.Context, pf host.Address) error {
	path := m.Root.PCIDevice(pf, "sriov_drivers_autoprobe")
	return m.updateState(func(s *state) error {
		cur, err := m.autoprobe(pf)
		if err != nil {
			return err
		}
		_, had := s.Autoprobe[pf.String()]
		if !had {
			if s.Autoprobe == nil {
				s.Autoprobe = map[string]string{}
			}
			s.Autoprobe[pf.String()] = cur
		}
		if err := m.write(ctx, path, "0"); err != nil {
			if !had {
				delete(s.Autoprobe, pf.String())
			}
			return err
		}
		return nil
	})
}

// autoprobe returns pf's sriov_drivers_autoprobe as the kernel shows it, "1" or "0"
// (host.ReadSRIOV).
func (m *Manager) autoprobe(pf host.Address) (string, error) {
	sr, _, err := host.ReadSRIOV(m.Root, pf)
	if err != nil {
		return "", err
	}
	if sr == nil || sr.DriversAutoprobe == nil {
		return "", fmt.Errorf("read %s: %w: %s has no readable sriov_drivers_autoprobe", m.Root.PCIDevice(pf, "sriov_drivers_autoprobe"), host.ErrUnsupported, pf)
	}
	if *sr.DriversAutoprobe {
		return "1", nil
	}
	return "0", nil
}

// restoreAutoprobe writes back the sriov_drivers_autoprobe value recorded by setAutoprobeOff
// (when it differs from the current one) and drops the record. It reports whether it wrote.
// Without a record (vgpu-host never changed it) nothing is written.
func (m *Manager) restoreAutoprobe(ctx context.Context, pf host.Address) (bool, error) {
	path := m.Root.PCIDevice(pf, "sriov_drivers_autoprobe")
	wrote := false
	err := m.updateState(func(s *state) error {
		want, ok := s.Autoprobe[pf.String()]
		if !ok {
			return nil
		}
		cur, err := m.autoprobe(pf)
		if err != nil {
			return fmt.Errorf("restore sriov_drivers_autoprobe: %w", err)
		}
		if cur != want {
			if err := m.write(ctx, path, want); err != nil {
				return fmt.Errorf("restore sriov_drivers_autoprobe=%s via %s (the value before vgpu-host set 0; the record stays in %s): %w", want, path, m.statePath(), err)
			}
			wrote = true
		}
		delete(s.Autoprobe, pf.String())
		return nil
	})
	return wrote, err
}

func (m *Manager) setNumVFs(ctx context.Context, pf host.Address, driver string, n int) error {
	path := m.Root.PCIDevice(pf, "sriov_numvfs")
	err := m.write(ctx, path, strconv.Itoa(n))
	if err == nil {
		return nil
	}
	switch errno(err) {
	case syscall.ENOENT:
		return fmt.Errorf("set %s to %d: %w: the PF's driver %q cannot create VFs (it has no sriov_configure; some drivers need a module parameter or firmware setting instead): %w",
			path, n, host.ErrUnsupported, driver, err)
	case syscall.ERANGE:
		return fmt.Errorf("set %s to %d: %w: more than sriov_totalvfs: %w", path, n, host.ErrInvalid, err)
	case syscall.EBUSY:
		return fmt.Errorf("set %s to %d: %w: VFs are enabled or in use (a VM or driver holds one): %w", path, n, host.ErrBusy, err)
	}
	return fmt.Errorf("set %s to %d: %w", path, n, err)
}

// bindVFIO binds vf to vfio-pci with the Binder, or with package vfio's verbs (the VF alone,
// not the whole-group Binder: a fresh VF is its own group and its class is the PF's, so the
// host-critical storage check of 'vgpu-host bind' would refuse the nvme VFs users ask for):
//
//	echo vfio-pci > devices/VF/driver_override
//	echo VF > devices/VF/driver/unbind            (when a driver is bound)
//	echo VF > /sys/bus/pci/drivers_probe           then wait for devices/VF/driver -> vfio-pci
//
// A dry run records the override and probe writes even though the VF does not exist yet.
func (m *Manager) bindVFIO(ctx context.Context, vf host.Address) error {
	if m.Binder != nil {
		return m.Binder.BindVFIO(ctx, vf)
	}
	if m.DryRun {
		if err := m.write(ctx, m.Root.PCIDevice(vf, "driver_override"), DriverVFIO); err != nil {
			return err
		}
		return m.write(ctx, m.Root.Sys("bus", "pci", "drivers_probe"), vf.String())
	}
	if m.driverOf(vf) == DriverVFIO {
		return nil
	}
	if !host.DriverLoaded(m.Root, DriverVFIO) {
		return fmt.Errorf("bind VF %s to vfio-pci: %w: the vfio-pci driver is not loaded (%s missing; run modprobe vfio-pci)", vf, host.ErrNotReady, m.Root.PCIDriver(DriverVFIO))
	}
	t := m.timeout()
	if err := vfio.SetDriverOverride(ctx, m.Root, m.W, t, vf, DriverVFIO); err != nil {
		return fmt.Errorf("bind VF %s to vfio-pci: %w", vf, err)
	}
	if err := vfio.Unbind(ctx, m.Root, m.W, t, vf); err != nil {
		return fmt.Errorf("bind VF %s to vfio-pci: %w", vf, err)
	}
	if err := vfio.Probe(ctx, m.Root, m.W, t, vf); err != nil {
		return fmt.Errorf("bind VF %s to vfio-pci: %w", vf, err)
	}
	return vfio.WaitDriver(ctx, m.Root, t, vf, DriverVFIO)
}
