package mdev

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/vgpu-host/vgpu-host/host"
)

// UnitName is the systemd unit that runs `vgpu-host host restore` at boot.
const UnitName = "vgpu-host-restore.service"

// unitTemplate orders the restore after kernel modules are loaded (vfio-pci, the vGPU host
// driver, mdev parents) and before libvirt starts or autostarts guests, so a guest never
// starts before its VF or vGPU instance exists. Type=oneshot + RemainAfterExit makes units
// ordered after it wait for it to finish.
const unitTemplate = `[Unit]
Description=Restore vgpu-host SR-IOV VFs, vendor vGPU types, mdev instances and vfio-pci bindings
Documentation=https://github.com/vgpu-host/vgpu-host/blob/main/docs/vgpu.md
After=systemd-modules-load.service nvidia-vgpud.service nvidia-vgpu-mgr.service
Before=libvirtd.service virtqemud.service libvirt-guests.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=%s host restore

[Install]
WantedBy=multi-user.target
`

// SystemdUnit returns the unit file text for the vgpu-host binary at execPath.
func SystemdUnit(execPath string) string {
	return fmt.Sprintf(unitTemplate, execPath)
}

// UnitPath returns where InstallUnit writes the unit.
func (m *Manager) UnitPath() string { return m.Root.Etc("systemd", "system", UnitName) }

// CheckUnitExec refuses a binary path the unit cannot run as written (host.ErrInvalid): one
// that is not absolute (systemd would not find it; the agent's working directory is not the
// caller's), or holds a space, quote, %, \, ';', a control character or invalid UTF-8, which
// would make ExecStart= run something else. It only looks at the text: the path is not opened.
func CheckUnitExec(execPath string) error {
	if !filepath.IsAbs(execPath) || strings.ContainsAny(execPath, " \t%\\\"';") || strings.IndexFunc(execPath, unicode.IsControl) >= 0 || !utf8.ValidString(execPath) {
		return fmt.Errorf("install %s: %w: the binary path %q must be absolute, without spaces, quotes, %%, \\, ';' or control characters (CR, LF, ...): the unit file would run something else", UnitName, host.ErrInvalid, execPath)
	}
	return nil
}

// InstallUnit writes the unit under root.Etc("systemd/system") and enables it the way
// `systemctl enable` does (a multi-user.target.wants symlink). It returns the files it wrote
// or would write; an identical unit is left alone. Run `systemctl daemon-reload` afterwards.
func (m *Manager) InstallUnit(execPath string) ([]string, error) {
	if err := CheckUnitExec(execPath); err != nil {
		return nil, err
	}
	path := m.UnitPath()
	link := m.Root.Etc("systemd", "system", "multi-user.target.wants", UnitName)
	var wrote []string
	text := SystemdUnit(execPath)
	// Read as a state file is (inside the root, no link, no waiting on a FIFO): the unit is
	// vgpu-host's own file, and anything else where it belongs is an error naming it.
	old, err := m.Root.ReadFileLimit(path, host.MaxStateFileSize)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("install %s: read %s: %w", UnitName, path, err)
	}
	if err != nil || string(old) != text {
		wrote = append(wrote, path)
		if !m.DryRun {
			if err := m.Root.WriteFileAtomic(path, []byte(text), 0o644); err != nil {
				return nil, fmt.Errorf("install %s: %w", UnitName, err)
			}
		}
	}
	if t, err := m.Root.Readlink(link); err != nil || t != filepath.Join("..", UnitName) {
		wrote = append(wrote, link)
		if !m.DryRun {
			if err := m.Root.CheckInside(link); err != nil {
				return wrote, fmt.Errorf("enable %s: %w", UnitName, err)
			}
			if err := m.Root.MkdirAll(filepath.Dir(link), 0o755); err != nil {
				return wrote, fmt.Errorf("enable %s: %w", UnitName, err)
			}
			_ = os.Remove(link)
			if err := os.Symlink(filepath.Join("..", UnitName), link); err != nil {
				return wrote, fmt.Errorf("enable %s: %w", UnitName, err)
			}
		}
	}
	return wrote, nil
}
