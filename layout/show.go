package layout

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/mdev"
	"github.com/vgpu-host/vgpu-host/vfio"
)

// CurrentName is the name Show gives the one configuration it prints.
const CurrentName = "current"

// Show returns the layout the host is in now, as a valid layout file with one configuration
// (CurrentName): every GPU whose group is on vfio-pci (passthrough), every GPU with VFs and
// every PF whose VF count vgpu-host persisted (sriov, or vendor-vfio when its VFs hold vGPU
// types), every mdev parent with instances
// (mdev, by type id), every MIG GPU with GPU instances (mig, when h.MIG is set), and
// `all: host` for the rest. Applying it changes nothing; on a host cleared back to its host
// drivers it brings this state back.
func Show(ctx context.Context, h *Host) (*File, error) {
	inv, err := host.Scan(h.Root)
	if err != nil {
		return nil, fmt.Errorf("layout: read the host: %w", err)
	}
	insts, err := h.Mdev.Instances()
	if err != nil {
		return nil, err
	}
	pfs, err := h.Mdev.ListPFs()
	if err != nil {
		return nil, err
	}
	entries := map[string]Entry{}
	addr := func(a host.Address) Selector { return Selector{Address: a.String()} }

	// Instances by parent and backend, counted by type id.
	counts := map[string]map[string]int{}
	for _, in := range insts {
		if !in.Active {
			continue
		}
		k := in.Parent + "/" + in.Backend
		if counts[k] == nil {
			counts[k] = map[string]int{}
		}
		counts[k][in.Type]++
	}
	gpu := map[host.Address]bool{}
	for _, d := range inv.Devices {
		gpu[d.Address] = d.IsGPU
	}
	for _, pf := range pfs {
		// A GPU's VFs, and any PF whose count vgpu-host persisted (a layout's sriov entry by
		// address); not the VFs other tools made on NICs and disks.
		if pf.NumVFs == 0 || !gpu[pf.Address] && pf.Persisted == nil {
			continue
		}
		e := Entry{Select: addr(pf.Address), Mode: ModeSRIOV, VFs: pf.NumVFs}
		if allVFIO(pf.VFs) {
			e.VFDriver = mdev.DriverVFIO
		}
		if vt := counts[pf.Address.String()+"/"+mdev.BackendNvidiaVFIO]; len(vt) > 0 {
			e = Entry{Select: addr(pf.Address), Mode: ModeVendorVFIO, VFs: pf.NumVFs, Types: typeCounts(vt)}
		}
		entries[pf.Address.String()] = e
	}
	for _, p := range inv.MdevParents {
		mt := counts[p.Parent+"/"+mdev.BackendMdev]
		if len(mt) == 0 {
			continue
		}
		sel := Selector{Parent: p.Parent}
		if p.Address != nil {
			sel = addr(*p.Address)
		}
		entries[p.Parent] = Entry{Select: sel, Mode: ModeMdev, Types: typeCounts(mt)}
	}
	for _, d := range inv.Devices {
		if d.PhysFn != nil || d.Driver != vfio.DriverName || !d.IsGPU {
			continue
		}
		g, err := host.GroupOf(h.Root, d.Address)
		if err != nil || !allOnVFIO(g.Endpoints()) {
			continue
		}
		entries[d.Address.String()] = Entry{Select: addr(d.Address), Mode: ModePassthrough}
	}
	if h.MIG != nil {
		st, err := h.MIG.State(ctx)
		if err != nil {
			return nil, fmt.Errorf("layout: read MIG state: %w", err)
		}
		for _, g := range st.GPUs {
			if !g.Enabled || len(g.Instances) == 0 {
				continue
			}
			n := map[string]int{}
			for _, in := range g.Instances {
				n[in.Profile]++
			}
			var ps []ProfileCount
			for p, c := range n {
				ps = append(ps, ProfileCount{Profile: p, Count: c})
			}
			sort.Slice(ps, func(i, j int) bool { return ps[i].Profile < ps[j].Profile })
			e := Entry{Select: Selector{Address: g.Address}, Mode: ModeMIG, Profiles: ps}
			if prev, ok := entries[g.Address]; ok && prev.Mode == ModeVendorVFIO {
				e.VFs, e.VGPUTypes = prev.VFs, prev.Types
			}
			entries[g.Address] = e
		}
	}
	var names []string
	for n := range entries {
		names = append(names, n)
	}
	sort.Strings(names)
	c := &Config{Default: true, Description: "the layout this host is in now (vgpu-host host layout show)", GPUs: []Entry{}}
	for _, n := range names {
		c.GPUs = append(c.GPUs, entries[n])
	}
	c.GPUs = append(c.GPUs, Entry{Select: Selector{All: true}, Mode: ModeHost})
	return &File{APIVersion: APIVersion, Kind: Kind, Configs: map[string]*Config{CurrentName: c}}, nil
}

func allOnVFIO(ms []host.GroupMember) bool {
	for _, m := range ms {
		if m.Driver != vfio.DriverName {
			return false
		}
	}
	return len(ms) > 0
}

func typeCounts(n map[string]int) []TypeCount {
	var out []TypeCount
	for t, c := range n {
		out = append(out, TypeCount{Type: t, Count: c})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Type < out[j].Type })
	return out
}

// Marshal renders f as the YAML of a layout file (the field names Parse reads).
func (f *File) Marshal() ([]byte, error) {
	var b strings.Builder
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(f); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return []byte(b.String()), nil
}
