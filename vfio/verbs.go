package vfio

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
)

// The small verbs. Each reads the current state first and writes only when the state differs,
// so running one twice is harmless. Each write is bounded by timeout: a write the kernel does
// not answer (unbind while a process holds the device) comes back as host.ErrWriteTimeout.

// SetDriverOverride sets a's driver_override to driver ("" clears it, which the kernel wants
// as a lone newline).
func SetDriverOverride(ctx context.Context, root host.Root, w host.Writer, timeout time.Duration, a host.Address, driver string) error {
	cur, err := host.DriverOverride(root, a)
	if err != nil {
		return err
	}
	return setDriverOverrideFrom(ctx, root, w, timeout, a, cur, driver)
}

// setDriverOverrideFrom is SetDriverOverride for a caller that has just read the override (cur)
// under the bind lock: it writes only when cur differs, without reading it again.
func setDriverOverrideFrom(ctx context.Context, root host.Root, w host.Writer, timeout time.Duration, a host.Address, cur, driver string) error {
	if cur == driver {
		return nil
	}
	p := root.PCIDevice(a, "driver_override")
	v := driver
	if v == "" {
		v = "\n"
	}
	if err := write(ctx, w, timeout, p, v); err != nil {
		return fmt.Errorf("set driver_override %q for %s via %s: %w", driver, a, p, err)
	}
	return nil
}

// Unbind detaches a from its current driver through ROOT/sys/bus/pci/drivers/DRV/unbind.
// A device with no driver is left alone.
func Unbind(ctx context.Context, root host.Root, w host.Writer, timeout time.Duration, a host.Address) error {
	cur, err := host.Driver(root, a)
	if err != nil {
		return err
	}
	return unbindFrom(ctx, root, w, timeout, a, cur)
}

// unbindFrom is Unbind for a caller that has just read a's driver (cur, "" for none).
func unbindFrom(ctx context.Context, root host.Root, w host.Writer, timeout time.Duration, a host.Address, cur string) error {
	if cur == "" {
		return nil
	}
	p := root.PCIDriver(cur, "unbind")
	if err := write(ctx, w, timeout, p, a.String()); err != nil {
		return fmt.Errorf("unbind %s from %s via %s: %w", a, cur, p, err)
	}
	return nil
}

// Probe asks the kernel to bind a driver to a (driver_override first, else the native driver)
// through ROOT/sys/bus/pci/drivers_probe. A device that already has a driver is left alone.
func Probe(ctx context.Context, root host.Root, w host.Writer, timeout time.Duration, a host.Address) error {
	cur, err := host.Driver(root, a)
	if err != nil || cur != "" {
		return err
	}
	return probe(ctx, root, w, timeout, a)
}

// probe writes a to drivers_probe without looking at its driver first: for a caller that has
// just unbound a (the kernel probes no driver on an unbind, so a has none). On a function that
// has a driver after all the write changes nothing (the kernel's device_attach keeps it).
func probe(ctx context.Context, root host.Root, w host.Writer, timeout time.Duration, a host.Address) error {
	p := probePath(root)
	if err := write(ctx, w, timeout, p, a.String()); err != nil {
		return fmt.Errorf("probe drivers for %s via %s: %w", a, p, err)
	}
	return nil
}

// WaitDriver waits until a's driver link names driver ("" waits for no driver).
func WaitDriver(ctx context.Context, root host.Root, timeout time.Duration, a host.Address, driver string) error {
	var last string
	err := host.WaitFor(ctx, timeout, func() (bool, error) {
		d, err := host.Driver(root, a)
		last = d
		return d == driver, err
	})
	if err != nil {
		return fmt.Errorf("wait for %s to be on %s (%s is %s): %w", a, orNone(driver), root.PCIDevice(a, "driver"), orNone(last), err)
	}
	return nil
}

func probePath(root host.Root) string { return root.Sys("bus", "pci", "drivers_probe") }

func write(ctx context.Context, w host.Writer, timeout time.Duration, path, value string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := w.Write(ctx, path, value)
	if err != nil && ctx.Err() != nil && !errors.Is(err, host.ErrWriteTimeout) {
		return fmt.Errorf("%w after %s: %w", host.ErrWriteTimeout, timeout, err)
	}
	return err
}

func orNone(d string) string {
	if d == "" {
		return "no driver"
	}
	return d
}
