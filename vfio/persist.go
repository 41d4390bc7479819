package vfio

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strings"

	"github.com/vgpu-host/vgpu-host/host"
)

// Persistence (bind --persist) uses two standard mechanisms, both plain files under ROOT/etc:
//
//  1. A driverctl override, ROOT/etc/driverctl.d/pci-ADDR containing "vfio-pci", exactly as
//     `driverctl set-override ADDR vfio-pci` saves it. At boot driverctl's udev rule
//     (05-driverctl.rules) starts driverctl@pci-ADDR.service, which writes driver_override and
//     re-probes the device — by address, so an identical second card is untouched.
//  2. A modprobe softdep, ROOT/etc/modprobe.d/vgpu-host.conf with
//     "softdep snd_hda_intel pre: vfio-pci" for each original driver's module, so vfio-pci is
//     loaded before the host driver and can claim the overridden device first.
//
// Both are understood by tools admins already know (driverctl list-overrides, modprobe -c), and
// `vgpu-host unbind --persist` removes them.

// DriverctlPath returns ROOT/etc/driverctl.d/pci-ADDR.
func DriverctlPath(root host.Root, a host.Address) string {
	return root.Etc("driverctl.d", "pci-"+a.String())
}

// SoftdepPath returns ROOT/etc/modprobe.d/vgpu-host.conf.
func SoftdepPath(root host.Root) string { return root.Etc("modprobe.d", "vgpu-host.conf") }

const softdepHeader = `# Written by vgpu-host bind --persist: load vfio-pci before the host drivers of the devices
# it bound, so the driverctl override in /etc/driverctl.d wins at boot.
# Managed file: vgpu-host unbind --persist rewrites it; do not edit.
`

// driverModule returns the kernel module providing driver ("" when built in).
func driverModule(root host.Root, driver string) string {
	if driver == "" {
		return ""
	}
	m, err := host.LinkBase(root.PCIDriver(driver, "module"))
	if err != nil {
		return ""
	}
	return m
}

// softdepContent renders vgpu-host.conf from the persisted ledger entries ("" = no file).
func softdepContent(l *Ledger) string {
	mods := map[string]bool{}
	for _, e := range l.Devices {
		if e.Persist && e.Module != "" && e.Module != "vfio_pci" {
			mods[e.Module] = true
		}
	}
	if len(mods) == 0 {
		return ""
	}
	names := make([]string, 0, len(mods))
	for m := range mods {
		names = append(names, m)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString(softdepHeader)
	for _, m := range names {
		fmt.Fprintf(&b, "softdep %s pre: vfio-pci\n", m)
	}
	return b.String()
}

// fileStep writes (content != "") or removes (content == "") a plain file, or only records the
// step in a dry run. Unchanged files are not touched and produce no step.
func fileStep(path, content string, dry bool) (*Step, error) {
	cur, err := os.ReadFile(path)
	exists := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if content == "" {
		if !exists {
			return nil, nil
		}
		if !dry {
			if err := os.Remove(path); err != nil {
				return nil, fmt.Errorf("remove %s: %w", path, err)
			}
		}
		return &Step{Op: OpRemove, Path: path}, nil
	}
	if exists && string(cur) == content {
		return nil, nil
	}
	if !dry {
		if err := host.WriteFileAtomic(path, []byte(content), 0o644); err != nil {
			return nil, err
		}
	}
	return &Step{Op: OpFile, Path: path, Value: content}, nil
}

// driverctlInstalled reports whether driverctl's udev rule is present under root.
func driverctlInstalled(root host.Root) bool {
	for _, p := range [][]string{{"lib", "udev", "rules.d"}, {"usr", "lib", "udev", "rules.d"}} {
		if host.Exists(root.Path(append(p, "05-driverctl.rules")...)) {
			return true
		}
	}
	return false
}
