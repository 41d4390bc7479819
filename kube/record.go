package kube

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"

	"github.com/vgpu-host/vgpu-host/host"
)

// NamesFile is where the resource names of vendor-VFIO vGPU types are recorded, under the host
// root's state directory (var/lib/vgpu-host): the device plugin, the DRA driver and
// `vgpu-host kubevirt config` read and extend it.
//
// A vendor-VFIO type's name is known only from a VF's nvidia/creatable_vgpu_types, and once
// every VF of a GPU holds a type the lists are empty:
//
//	$ cat nvidia/current_vgpu_type     $ cat nvidia/creatable_vgpu_types
//	1157                               ID    : vGPU Name
//
// Named afresh, the resource of a full GPU would lose its name; its devices would reappear
// Healthy under another resource (the kubelet could hand them out twice) and KubeVirt's
// permittedHostDevices would no longer match. So the name a type is first given is recorded
// and kept for good.
const NamesFile = "kube-names.json"

// names is NamesFile's content.
type names struct {
	// VendorTypes are the vendor-VFIO types seen, by type number ("1157").
	VendorTypes map[string]RecordedType `json:"vendor_vgpu_types"`
}

// RecordedType is what is recorded of a vendor-VFIO type.
type RecordedType struct {
	// Name is the type's name from a creatable list ("NVIDIA L40S-4Q"), once one showed it.
	Name string `json:"name,omitempty"`
	// Resource is the resource name it was first given, overrides aside.
	Resource string `json:"resource"`
}

// LoadNames reads the recorded names under root (none when the file does not exist), to set as
// Config.Recorded.
func LoadNames(root host.Root) (map[string]RecordedType, error) {
	p := root.StateDir(NamesFile)
	// A state file: never through a link, never waiting on a FIFO (host.Root.ReadFileLimit).
	b, err := root.ReadFileLimit(p, 1<<20)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]RecordedType{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("recorded resource names: %w", err)
	}
	var n names
	if err := json.Unmarshal(b, &n); err != nil {
		return nil, fmt.Errorf("recorded resource names %s: %w", p, err)
	}
	if n.VendorTypes == nil {
		n.VendorTypes = map[string]RecordedType{}
	}
	return n.VendorTypes, nil
}

// RecordNames adds to the record under root every vendor-VFIO type of c it does not hold yet,
// or whose name it lacks, with the resource name the type has without configured overrides
// (cfg is the Config c was built with). The file is written only when something was added, and
// atomically.
func (c *Catalog) RecordNames(root host.Root, cfg Config) error {
	rec, err := LoadNames(root)
	if err != nil {
		return err
	}
	plain := Config{Recorded: rec}
	added := false
	for _, r := range c.Resources {
		if r.Kind != KindVendorVFIO || r.TypeID == "" {
			continue
		}
		id, err := strconv.Atoi(r.TypeID)
		if err != nil {
			continue
		}
		old := rec[r.TypeID]
		t := old
		if t.Name == "" {
			t.Name = r.Model
		}
		if t.Resource == "" {
			vendor, _, _ := strings.Cut(r.Selector, ":")
			t.Resource = plain.vendorTypeResource(vendor, t.Name, id)
		}
		if t != old {
			rec[r.TypeID] = t
			added = true
		}
	}
	if !added {
		return nil
	}
	b, err := json.MarshalIndent(names{VendorTypes: rec}, "", "  ")
	if err != nil {
		return fmt.Errorf("record resource names: %w", err)
	}
	if err := root.WriteFileAtomic(root.StateDir(NamesFile), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("record resource names: %w", err)
	}
	return nil
}

// vendorTypeResource is the resource name of vendor-VFIO type id with name (from a creatable
// list, or "" when none shows it): the configured override for its name or number, else the
// recorded name, else DOMAIN/TypeName of its name, else DOMAIN/VGPU_TYPE_<id> (a GPU already
// full when vgpu-host first saw it; recorded like any other, the name then stays when the type
// shows up in a list later).
func (c Config) vendorTypeResource(vendorID, name string, id int) string {
	sid := strconv.Itoa(id)
	if name == "" {
		name = c.Recorded[sid].Name
	}
	if n := c.override(name, sid); n != "" {
		return n
	}
	if n := c.Recorded[sid].Resource; n != "" && ValidResourceName(n) == nil {
		return n
	}
	if name == "" {
		name = "VGPU_TYPE_" + sid
	}
	return Domain(vendorID) + "/" + TypeName(name, sid)
}

// recordedTypeName is the recorded name of vendor-VFIO type id, or "".
func (c Config) recordedTypeName(id int) string { return c.Recorded[strconv.Itoa(id)].Name }

// WithRecorded returns c with the names recorded under root as Recorded.
func (c Config) WithRecorded(root host.Root) (Config, error) {
	rec, err := LoadNames(root)
	if err != nil {
		return c, err
	}
	c.Recorded = rec
	return c, nil
}
