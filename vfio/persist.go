package vfio

import (
	"errors"
	"fmt"
	"io/fs"
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

// softdepContent renders vgpu-host.conf from the persisted ledger entries ("" = no file).
func softdepContent(l *Bindings) string {
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
func fileStep(root host.Root, path, content string, dry bool) (*HostOp, error) {
	cur, exists, err := readConf(root, path)
	if err != nil {
		return nil, err
	}
	if content == "" {
		if !exists {
			return nil, nil
		}
		if !dry {
			if err := root.Remove(path); err != nil {
				return nil, fmt.Errorf("remove %s: %w", path, err)
			}
		}
		return &HostOp{Op: OpRemove, Path: path}, nil
	}
	if exists && string(cur) == content {
		return nil, nil
	}
	if !dry {
		if err := root.WriteFileAtomic(path, []byte(content), 0o644); err != nil {
			return nil, err
		}
	}
	return &HostOp{Op: OpFile, Path: path, Value: content}, nil
}

// driverctlInstalled reports whether driverctl's udev rule is present under root.
func driverctlInstalled(root host.Root) bool {
	for _, p := range [][]string{{"lib", "udev", "rules.d"}, {"usr", "lib", "udev", "rules.d"}} {
		if root.Exists(root.Path(append(p, "05-driverctl.rules")...)) {
			return true
		}
	}
	return false
}

// driverctlContent is what `driverctl set-override ADDR vfio-pci` saves: echo "$drv" > file.
const driverctlContent = DriverName + "\n"

// maxConfFile bounds the read of a driverctl override or the softdep file: a line or a few.
const maxConfFile = 64 << 10

// readConf returns a persistence file's content (a driverctl override, the softdep file) and
// whether it exists. It reads as vgpu-host reads its state files (host.Root.ReadFileLimit):
// inside the root, never through a link, never waiting, a regular file only; a FIFO, link or
// directory where the file belongs is an error naming it, not a read that waits for ever, and
// a link in the tree never leads the read out of the host root.
func readConf(root host.Root, path string) (string, bool, error) {
	b, err := root.ReadFileLimit(path, maxConfFile)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("read %s: %w", path, err)
	}
	return string(b), true, nil
}

// checkPersistFiles reads every file bind --persist may write for groups (each endpoint's
// driverctl override and the softdep file) and checks that each resolves inside the root, so
// that a bind that cannot persist fails before it moves anything rather than after.
func checkPersistFiles(root host.Root, groups []*host.Group) error {
	paths := []string{SoftdepPath(root)}
	for _, g := range groups {
		for _, m := range g.Endpoints() {
			paths = append(paths, DriverctlPath(root, m.Address))
		}
	}
	for _, p := range paths {
		if _, _, err := readConf(root, p); err != nil {
			return fmt.Errorf("persist: %w", err)
		}
		if err := root.CheckInside(p); err != nil {
			return fmt.Errorf("persist: %w", err)
		}
	}
	return nil
}

// persist writes the driverctl overrides of every endpoint of groups and the softdep file.
// Each override it writes is first recorded in the ledger with what was there before, so
// unbind --persist removes exactly those (or puts the previous file back) and nothing an
// admin wrote; an override that already says vfio-pci is left alone and not recorded.
func (r *run) persist(groups []*host.Group, dry bool) error {
	if !driverctlInstalled(r.root) {
		r.res.Warnings = append(r.res.Warnings, "driverctl is not installed: the overrides in /etc/driverctl.d take effect at boot only with driverctl's udev rule (apt install driverctl)")
	}
	dirty := false
	var todo []string
	for _, g := range groups {
		for _, m := range g.Endpoints() {
			if e, ok := r.ledger.Lookup(m.Address); ok && !e.Persist {
				e.Persist = true
				r.ledger.Devices[m.Address.String()] = e
				dirty = true
			}
			p := DriverctlPath(r.root, m.Address)
			cur, exists, err := readConf(r.root, p)
			if err != nil {
				return fmt.Errorf("persist %s: %w", m.Address, err)
			}
			if exists && cur == driverctlContent {
				continue // ours from an earlier bind --persist, or the admin's own identical override
			}
			key := host.HostPath(r.root, p)
			if _, ok := r.ledger.Files[key]; !ok {
				var prev *string
				if exists {
					c := cur
					prev = &c
					r.res.Warnings = append(r.res.Warnings, fmt.Sprintf("%s: replaced %s (it said %q); unbind --persist puts it back", m.Address, key, strings.TrimSpace(cur)))
				}
				r.ledger.Files[key] = PersistedFile{Address: m.Address, Previous: prev}
				dirty = true
			}
			todo = append(todo, p)
		}
	}
	// Record before writing: a crash in between leaves a record of a file that is not there
	// (unbind --persist drops it), never a file of ours that the ledger does not know.
	if dirty {
		if err := r.saveLedger(); err != nil {
			return err
		}
	}
	for _, p := range todo {
		s, err := fileStep(r.root, p, driverctlContent, dry)
		if err != nil {
			return fmt.Errorf("persist: %w", err)
		}
		r.step(s)
	}
	s, err := fileStep(r.root, SoftdepPath(r.root), softdepContent(r.ledger), dry)
	if err != nil {
		return fmt.Errorf("persist softdep: %w", err)
	}
	r.step(s)
	return nil
}

// unpersist removes the driverctl overrides that bind --persist wrote for the restored
// endpoints of groups (putting back a file it replaced) and rewrites the softdep file. Files
// vgpu-host did not write, or that changed since, are kept with a warning; so are those of
// functions still bound (not restored).
func (r *run) unpersist(groups []*host.Group, dry bool) error {
	dirty := false
	var errs []error
	for _, g := range groups {
		for _, m := range g.Endpoints() {
			if _, still := r.ledger.Lookup(m.Address); still {
				continue // not restored: keep it bound at boot too
			}
			p := DriverctlPath(r.root, m.Address)
			key := host.HostPath(r.root, p)
			cur, exists, err := readConf(r.root, p)
			if err != nil {
				errs = append(errs, fmt.Errorf("remove persistence of %s: %w", m.Address, err))
				continue
			}
			rec, ours := r.ledger.Files[key]
			if !ours {
				if exists {
					r.res.Warnings = append(r.res.Warnings, fmt.Sprintf("%s: kept %s: vgpu-host did not write it (driverctl unset-override %s removes it)", m.Address, key, m.Address))
				}
				continue
			}
			delete(r.ledger.Files, key)
			dirty = true
			if !exists {
				continue
			}
			if cur != driverctlContent {
				r.res.Warnings = append(r.res.Warnings, fmt.Sprintf("%s: kept %s: it changed since vgpu-host wrote it", m.Address, key))
				continue
			}
			content := ""
			if rec.Previous != nil {
				content = *rec.Previous
			}
			s, err := fileStep(r.root, p, content, dry)
			if err != nil {
				errs = append(errs, fmt.Errorf("remove persistence of %s: %w", m.Address, err))
				continue
			}
			r.step(s)
		}
	}
	s, err := fileStep(r.root, SoftdepPath(r.root), softdepContent(r.ledger), dry)
	if err != nil {
		errs = append(errs, fmt.Errorf("rewrite softdep: %w", err))
	} else {
		r.step(s)
	}
	// The files go first, the records after: a crash in between leaves a record of a file
	// already gone, which the next unbind --persist drops.
	if dirty {
		if err := r.saveLedger(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// persistedWarnings warns, after an unbind without --persist, about restored functions whose
// driverctl override (from bind --persist) would bind them to vfio-pci again at the next boot.
func (r *run) persistedWarnings(groups []*host.Group) {
	for _, g := range groups {
		for _, m := range g.Endpoints() {
			if _, still := r.ledger.Lookup(m.Address); still {
				continue
			}
			p := DriverctlPath(r.root, m.Address)
			if _, ours := r.ledger.Files[host.HostPath(r.root, p)]; ours && r.root.Exists(p) {
				r.res.Warnings = append(r.res.Warnings, fmt.Sprintf("%s: %s (from bind --persist) binds it to vfio-pci again at the next boot; vgpu-host unbind --persist %s removes it",
					m.Address, host.HostPath(r.root, p), m.Address))
			}
		}
	}
}

// PersistedBindings returns what bind --persist asked to survive a reboot: the ledger's
// functions recorded with Persist whose driverctl override (DriverctlPath) still says
// vfio-pci, sorted by address. A function whose override an admin removed since
// (`driverctl unset-override`) is left out: that override is the instruction for the boot.
// The boot reconcile (package agent/reconcile) binds their groups again through Binder.Bind
// when driverctl is not there to do it.
func PersistedBindings(root host.Root) ([]Binding, error) {
	l, err := LoadLedger(root)
	if err != nil {
		return nil, err
	}
	var out []Binding
	for _, e := range l.Entries() {
		if !e.Persist {
			continue
		}
		cur, exists, err := readConf(root, DriverctlPath(root, e.Address))
		if err != nil {
			return out, fmt.Errorf("persisted binding of %s: %w", e.Address, err)
		}
		if exists && cur == driverctlContent {
			out = append(out, e)
		}
	}
	return out, nil
}
