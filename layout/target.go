package layout

import (
	"fmt"
	"sort"
	"strings"

	"github.com/vgpu-host/vgpu-host/host"
)

// Target is one device a configuration gives a mode: a PCI function (a GPU, or any SR-IOV
// PF an entry names by address) or a virtual mdev parent ("mbochs").
type Target struct {
	// Name is the PCI address in the kernel's form, or the virtual parent's name.
	Name string `json:"target"`
	// Address is set for PCI functions.
	Address *host.Address `json:"address,omitempty"`
	// Model is the device's pci.ids name ("" for virtual parents).
	Model string `json:"model,omitempty"`
	// Mode is the mode its entry gives it.
	Mode Mode `json:"mode"`
	// Entry is the field path of the entry that selected it ("configs.vdi.gpus[1]").
	EntryPath string `json:"entry"`

	entry *Entry
	dev   *host.Device
}

// universe is every device `all` may select: the inventory's GPUs (not VFs) and its virtual
// mdev parents.
func universe(inv *host.Inventory) []Target {
	var out []Target
	for i := range inv.Devices {
		d := &inv.Devices[i]
		if d.IsGPU && d.PhysFn == nil {
			a := d.Address
			out = append(out, Target{Name: a.String(), Address: &a, Model: d.DeviceName, dev: d})
		}
	}
	for _, p := range inv.MdevParents {
		if p.Address == nil {
			out = append(out, Target{Name: p.Parent})
		}
	}
	return out
}

// resolve matches the entries of config name against the host: each entry's devices, with the
// entry; a device two entries select is an error naming both; `all` takes what no other entry
// names. Entries that select nothing on this host are returned in unmatched (a fleet-wide file
// names GPUs some hosts lack).
func resolve(root host.Root, inv *host.Inventory, name string, c *Config) (targets []Target, unmatched []string, err error) {
	byName := map[string]int{}
	var allEntry = -1
	var conflicts []string
	add := func(t Target, i int) {
		if j, dup := byName[t.Name]; dup {
			conflicts = append(conflicts, fmt.Sprintf("%s is selected by configs.%s.gpus[%d] (%s) and by configs.%s.gpus[%d] (%s): a device gets one mode",
				t.Name, name, j, c.GPUs[j].Select, name, i, c.GPUs[i].Select))
			return
		}
		byName[t.Name] = i
		t.entry = &c.GPUs[i]
		t.Mode = c.GPUs[i].Mode
		t.EntryPath = fmt.Sprintf("configs.%s.gpus[%d]", name, i)
		targets = append(targets, t)
	}
	all := universe(inv)
	for i, e := range c.GPUs {
		s := e.Select
		if s.All {
			allEntry = i
			continue
		}
		matched, err := match(root, inv, all, s)
		if err != nil {
			return nil, nil, fmt.Errorf("configs.%s.gpus[%d].select: %w", name, i, err)
		}
		if len(matched) == 0 {
			msg := fmt.Sprintf("configs.%s.gpus[%d] (%s) selects nothing on this host", name, i, s)
			if hint := host.UnnamedGPUsHint(inv.Devices); hint != "" && s.Model != "" {
				msg += ": " + hint
			}
			unmatched = append(unmatched, msg)
		}
		for _, t := range matched {
			add(t, i)
		}
	}
	if len(conflicts) > 0 {
		return nil, nil, fmt.Errorf("layout: %w: %s", host.ErrInvalid, strings.Join(conflicts, "; "))
	}
	if allEntry >= 0 {
		for _, t := range all {
			if _, named := byName[t.Name]; !named {
				add(t, allEntry)
			}
		}
	}
	sort.SliceStable(targets, func(i, j int) bool { return targets[i].Name < targets[j].Name })
	return targets, unmatched, nil
}

// match returns the devices one (non-all) selector picks.
func match(root host.Root, inv *host.Inventory, all []Target, s Selector) ([]Target, error) {
	switch {
	case s.Address != "":
		a, err := host.ParseAddress(s.Address)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", host.ErrInvalid, err)
		}
		for _, t := range all {
			if t.Address != nil && *t.Address == a {
				return []Target{t}, nil
			}
		}
		// Not a GPU: any PCI function an entry names by address (an SR-IOV PF, a GPU's VF).
		d, err := host.ReadDevice(root, a)
		if err != nil {
			return nil, fmt.Errorf("address %s: %w", a, err)
		}
		return []Target{{Name: a.String(), Address: &a, Model: d.DeviceName, dev: &d}}, nil
	case s.Parent != "":
		var names []string
		for _, p := range inv.MdevParents {
			if p.Address == nil {
				if p.Parent == s.Parent {
					return []Target{{Name: p.Parent}}, nil
				}
				names = append(names, p.Parent)
			}
		}
		return nil, fmt.Errorf("mdev parent %q: %w (virtual parents here: %s; PCI parents are selected by address)", s.Parent, host.ErrNotFound, orNone(strings.Join(names, ", ")))
	}
	var out []Target
	for _, t := range all {
		if t.dev == nil {
			continue
		}
		switch {
		case s.Vendor != "":
			if strings.EqualFold(t.dev.VendorID, s.Vendor) && strings.EqualFold(t.dev.DeviceID, s.Device) {
				out = append(out, t)
			}
		case s.Model != "":
			if strings.Contains(strings.ToLower(t.dev.DeviceName), strings.ToLower(strings.TrimSpace(s.Model))) {
				out = append(out, t)
			}
		}
	}
	return out, nil
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
