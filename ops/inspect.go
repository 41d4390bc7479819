package ops

import (
	"context"
	"fmt"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/mig"
)

// InventoryRequest is `inspect [ADDR|UUID] [--mig]`, GET /v1/inventory.
type InventoryRequest struct {
	// Target is a PCI address or an mdev instance's UUID; empty: the whole inventory.
	Target string
	// MIG asks NVML for the MIG section now instead of the MIG state cache.
	MIG bool
	// HostOnly reads the whole inventory alone, as host.Scan has it: no MIG section (Env.MIG
	// is not asked) and no list of quarantined functions. The device plugin and the DRA driver
	// ask for it at every re-scan: their catalog reads each device's quarantine record and last
	// health check itself (kube.Catalog.MarkDeviceNodes) and they publish no MIG section. No
	// flag or endpoint sets it; with a Target it changes nothing.
	HostOnly bool
}

// Op is "inspect".
func (InventoryRequest) Op() string { return "inspect" }

// Bool is the request's boolean setting by its flag's name.
func (r InventoryRequest) Bool(name string) bool { return name == "mig" && r.MIG }

// IsSet reports whether the request sets the named setting.
func (r InventoryRequest) IsSet(name string) bool { return r.Bool(name) }

// InventoryResult is what inspect prints: exactly one of its fields is set.
type InventoryResult struct {
	Inventory *InventoryReport
	Device    *DeviceReport
	Mdev      *MdevReport
}

// Value is the result as it is printed in JSON.
func (r *InventoryResult) Value() any {
	switch {
	case r.Device != nil:
		return r.Device
	case r.Mdev != nil:
		return r.Mdev
	}
	return r.Inventory
}

// InventoryReport is inspect's whole-host output: the inventory's fields, plus "mig" when the
// host has an NVIDIA GPU.
type InventoryReport struct {
	*host.Inventory
	MIG *MIGInventory `json:"mig,omitempty"`
	// Quarantined are the functions that failed their handback check (docs/health.md).
	Quarantined []host.Quarantine `json:"quarantined,omitempty"`
}

// MIGInventory is MIG as NVML (through vgpu-host-nvml) sees it: each NVIDIA GPU's MIG mode,
// profiles with their free placements, and GPU instances; read now, or from the MIG state
// cache that the agent and every MIG command keep (internal/clitree/migcache.go).
type MIGInventory struct {
	// Available is false when NVML could not be asked (no helper, no NVIDIA driver); Note says why.
	Available bool   `json:"available"`
	Note      string `json:"note,omitempty"`
	// Source is "nvml" (asked now) or "cache" (the MIG state cache; ReadAt and AgeSeconds
	// say how old, By which process wrote it).
	Source     string       `json:"source,omitempty"`
	ReadAt     *time.Time   `json:"read_at,omitempty"`
	AgeSeconds float64      `json:"age_seconds,omitempty"`
	By         string       `json:"by,omitempty"`
	GPUs       []MIGGPUView `json:"gpus,omitempty"`
}

// MIGGPUView is a GPU as `mig show` prints it: the backend's view plus each profile's free
// placements now.
type MIGGPUView struct {
	mig.GPU
	Free []MIGFree `json:"free"`
}

// MIGFree is one profile's free capacity: where an instance could start now, and how many more
// fit next to the instances there are.
type MIGFree struct {
	Profile    string          `json:"profile"`
	Placements []mig.Placement `json:"placements"`
	Fits       int             `json:"fits"`
}

// MIGView is st as `mig show` and inspect's MIG section print it.
func MIGView(st mig.State) []MIGGPUView {
	out := []MIGGPUView{}
	for _, g := range st.GPUs {
		v := MIGGPUView{GPU: g, Free: []MIGFree{}}
		for _, p := range g.Profiles {
			f := MIGFree{Profile: p.Name, Placements: mig.FreePlacements(g, p)}
			for n := 1; n <= max(p.Max, len(p.Placements)); n++ {
				want := make([]string, n)
				for i := range want {
					want[i] = p.Name
				}
				if _, err := mig.Fit(g, want); err != nil {
					break
				}
				f.Fits = n
			}
			v.Free = append(v.Free, f)
		}
		out = append(out, v)
	}
	return out
}

// DeviceReport is `inspect ADDR`'s output: one device and its group.
type DeviceReport struct {
	Device host.Device `json:"device"`
	Group  *host.Group `json:"group"`
	// MIG is the device's part of inspect's MIG section, for an NVIDIA GPU bound to nvidia: its
	// MIG mode and instances and NVML's name for it, from the MIG state cache, or from NVML
	// now with --mig (Note says why NVML could not answer); absent for any other device.
	MIG *MIGInventory `json:"mig,omitempty"`
	// Warnings are the optional attributes that could not be read, as in the inventory's.
	Warnings []string `json:"warnings,omitempty"`
}

// MdevReport is `inspect UUID`'s output: one mdev instance and its own IOMMU group.
type MdevReport struct {
	Mdev  host.MdevInstance `json:"mdev"`
	Group *host.Group       `json:"group"`
	// Warnings are the optional attributes that could not be read (the type's name, device_api).
	Warnings []string `json:"warnings,omitempty"`
}

// Inventory is inspect: the whole inventory (with MIG and the quarantined functions, unless
// HostOnly), one PCI function and its IOMMU group, or one mdev instance (exit 6 when there is
// no such one). It is how every caller reads the inventory: the CLI, the agent's
// GET /v1/inventory, the device plugin and the DRA driver (internal/archtest keeps it so).
func Inventory(ctx context.Context, env Env, req InventoryRequest) (*InventoryResult, error) {
	root := env.Root
	if req.Target != "" && host.IsMdevUUID(req.Target) {
		rep, err := inspectMdev(root, req.Target)
		if err != nil {
			return nil, err
		}
		return &InventoryResult{Mdev: rep}, nil
	}
	if req.Target != "" {
		a, err := host.ParseAddress(req.Target)
		if err != nil {
			return nil, Usagef("%v (or name an mdev instance by its UUID)", err)
		}
		d, warnings, err := host.ReadDeviceWarnings(root, a)
		if err != nil {
			return nil, err
		}
		rep := DeviceReport{Device: d, Warnings: warnings}
		if d.IOMMUGroup >= 0 {
			g, err := host.ReadGroup(root, d.IOMMUGroup)
			if err != nil {
				return nil, err
			}
			rep.Group = &g
		}
		if env.MIG != nil {
			rep.MIG = deviceMIG(env.MIG(ctx, &host.Inventory{Root: root.Dir(), Devices: []host.Device{d}}, req.MIG), d.Address)
		}
		return &InventoryResult{Device: &rep}, nil
	}
	inv, err := host.Scan(root)
	if err != nil {
		return nil, err
	}
	rep := InventoryReport{Inventory: inv}
	if req.HostOnly {
		return &InventoryResult{Inventory: &rep}, nil
	}
	if env.MIG != nil {
		rep.MIG = env.MIG(ctx, inv, req.MIG)
	}
	rep.Quarantined, err = host.Quarantines(root)
	if err != nil {
		inv.Warnings = append(inv.Warnings, err.Error())
	}
	return &InventoryResult{Inventory: &rep}, nil
}

// deviceMIG is m, the MIG section read for an inventory of one device, kept to that device's
// GPU: nil when there is no section (not an NVIDIA GPU on nvidia, or no NVML for this root),
// or when NVML answered and does not list the device.
func deviceMIG(m *MIGInventory, a host.Address) *MIGInventory {
	if m == nil || !m.Available {
		return m
	}
	out := *m
	out.GPUs = nil
	for _, g := range m.GPUs {
		if g.Address == a.String() {
			out.GPUs = append(out.GPUs, g)
		}
	}
	if len(out.GPUs) == 0 {
		return nil
	}
	return &out
}

// inspectMdev reads the mdev instance uuid and its group; exit 6 when there is no such instance.
func inspectMdev(root host.Root, uuid string) (*MdevReport, error) {
	m, warnings, err := host.ReadMdevInstance(root, uuid)
	if err != nil {
		return nil, err
	}
	rep := MdevReport{Mdev: m, Warnings: warnings}
	if m.IOMMUGroup >= 0 {
		g, err := host.ReadGroup(root, m.IOMMUGroup)
		if err != nil {
			return nil, fmt.Errorf("inspect mdev %s: %w", m.UUID, err)
		}
		rep.Group = &g
	}
	return &rep, nil
}
