package layout

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
)

// SelectionFile is where apply records the configuration it brought the host to, under the
// state directory the rest of vgpu-host uses (ROOT/var/lib/vgpu-host/layout.json). The host's
// state itself is persisted piece by piece the way the imperative commands persist it (VF
// counts, mdev definitions, vendor types, vfio-pci overrides), so `host restore` and the
// agent's boot reconcile bring it back; this file says which configuration that was.
const SelectionFile = "layout.json"

// Selection is the stored selection.
type Selection struct {
	Version int `json:"version"`
	// Config is the configuration's name.
	Config string `json:"config"`
	// Source is the path of the layout file apply read.
	Source string `json:"source"`
	// Layout is the whole layout file, as apply read it.
	Layout string `json:"layout"`
	// AppliedAt is when apply finished.
	AppliedAt time.Time `json:"applied_at"`
}

// SelectionPath returns ROOT/var/lib/vgpu-host/layout.json.
func SelectionPath(root host.Root) string { return root.StateDir(SelectionFile) }

// SaveSelection records the applied configuration (atomically).
func SaveSelection(root host.Root, s Selection) error {
	s.Version = 1
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := root.WriteFileAtomic(SelectionPath(root), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("record the layout selection: %w", err)
	}
	return nil
}

// LoadSelection reads the stored selection; nil when none was stored. The stored layout is
// parsed again, so a damaged file is an error rather than a silent default.
func LoadSelection(root host.Root) (*Selection, *File, error) {
	b, err := root.ReadFileLimit(SelectionPath(root), host.MaxStateFileSize)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read the layout selection: %w", err)
	}
	var s Selection
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, nil, fmt.Errorf("read the layout selection %s: %w: %v", SelectionPath(root), host.ErrInvalid, err)
	}
	f, err := Parse([]byte(s.Layout))
	if err != nil {
		return nil, nil, fmt.Errorf("the layout stored in %s: %w", SelectionPath(root), err)
	}
	if _, _, err := f.Select(s.Config); err != nil {
		return nil, nil, fmt.Errorf("the layout stored in %s: %w", SelectionPath(root), err)
	}
	return &s, f, nil
}

// StoredMIG returns the MIG instances the stored selection wants, GPU address → profile names
// (each profile as many times as its count), and the configuration's name; nil when nothing
// is stored or the configuration has no mig entry. NVML forgets GPU instances at every reboot
// (MIG mode itself persists), so the boot reconcile creates them again from this.
func StoredMIG(root host.Root) (map[string][]string, string, error) {
	s, f, err := LoadSelection(root)
	if err != nil || s == nil {
		return nil, "", err
	}
	name, c, err := f.Select(s.Config)
	if err != nil {
		return nil, "", err
	}
	hasMIG := false
	for _, e := range c.GPUs {
		hasMIG = hasMIG || e.Mode == ModeMIG
	}
	if !hasMIG {
		return nil, name, nil
	}
	inv, err := host.Scan(root)
	if err != nil {
		return nil, name, fmt.Errorf("layout: read the host: %w", err)
	}
	targets, _, err := resolve(root, inv, name, c)
	if err != nil {
		return nil, name, err
	}
	want := map[string][]string{}
	for _, t := range targets {
		if t.entry == nil || t.entry.Mode != ModeMIG || t.Address == nil {
			continue
		}
		var ps []string
		for _, p := range t.entry.Profiles {
			for range p.Count {
				ps = append(ps, p.Profile)
			}
		}
		want[t.Name] = ps
	}
	return want, name, nil
}
