package clitree

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/mdev"
	"github.com/vgpu-host/vgpu-host/mig"
	migremote "github.com/vgpu-host/vgpu-host/mig/remote"
	"github.com/vgpu-host/vgpu-host/ops"
	"github.com/vgpu-host/vgpu-host/vgpu"
)

// migInventory is inspect's MIG section (ops.MIGInventory).
type migInventory = ops.MIGInventory

// migInventoryTimeout bounds inspect's wait for NVML: inspect never fails or hangs because of it.
const migInventoryTimeout = 10 * time.Second

// readMIGInventory reports MIG when inv has an NVIDIA display function bound to the nvidia
// driver and NVML describes the host inv was read from: the real root, or a mock NVML (the
// helper's test build, VGPU_HOST_NVML_MOCK), as nv starts it. From the MIG state cache when there is one and
// live is false (no NVML start: docs/inspect.md, "MIG and speed"); otherwise NVML is asked
// now, and what it says is cached. Any failure becomes a note, never an error.
func readMIGInventory(ctx context.Context, nv migremote.Env, root host.Root, inv *host.Inventory, live bool) *migInventory {
	if !nvmlSeesAGPU(inv) || !nvmlDescribes(nv, root) {
		return nil
	}
	if !live {
		if c, err := loadMIGCache(nv, root); err == nil {
			at := c.ReadAt
			return &migInventory{Available: true, Source: "cache", ReadAt: &at, AgeSeconds: max(0, time.Since(at).Seconds()), By: c.By, GPUs: migView(c.State)}
		}
	}
	st, err := readMIGState(ctx, nv, root)
	if err != nil {
		return &migInventory{Note: err.Error()}
	}
	return &migInventory{Available: true, Source: "nvml", GPUs: migView(st)}
}

// nvmlSeesAGPU reports whether inv has an NVIDIA display function bound to NVIDIA's driver:
// NVML sees only those, so with every NVIDIA GPU on vfio-pci (a passthrough host) it has
// nothing to say, and no helper is started nor cache read.
func nvmlSeesAGPU(inv *host.Inventory) bool {
	for _, d := range inv.Devices {
		if strings.EqualFold(d.VendorID, "10de") && strings.HasPrefix(d.Class, "03") && d.Driver == "nvidia" {
			return true
		}
	}
	return false
}

// nvmlDescribes reports whether NVML, as nv starts its helper, describes the host at root: the
// real root, or any root when the NVML helper is a mock (its test build, VGPU_HOST_NVML_MOCK)
// or replays a capture (VGPU_HOST_NVML_FACTS).
func nvmlDescribes(nv migremote.Env, root host.Root) bool {
	return root.IsReal() || nv.Getenv(migremote.EnvMock) != "" || nv.Getenv(migremote.EnvFacts) != ""
}

// readMIGState asks NVML for the MIG state through the helper, within migInventoryTimeout,
// and saves it as root's MIG state cache; nv starts the helper.
func readMIGState(ctx context.Context, nv migremote.Env, root host.Root) (mig.State, error) {
	ctx, cancel := context.WithTimeout(ctx, migInventoryTimeout)
	defer cancel()
	c, err := nv.Open()
	if err != nil {
		return mig.State{}, err
	}
	defer c.Close()
	return cachingMIG(nv, root, c).State(ctx)
}

// placeMIGState is NVML's MIG state for placement when a parent offers a MIG-backed type and
// NVML answers; nil otherwise (placement then uses NVIDIA's documented geometry).
func placeMIGState(ctx context.Context, nv migremote.Env, root host.Root, parents []mdev.Parent) *mig.State {
	backed := false
	for _, p := range parents {
		for _, t := range p.Types {
			if _, _, ok := vgpu.MIGBacking(t.Name); ok {
				backed = true
			}
		}
	}
	if !backed || !nvmlDescribes(nv, root) {
		return nil
	}
	st, err := readMIGState(ctx, nv, root)
	if err != nil {
		return nil
	}
	return &st
}

// nvmlNames are the product names in the MIG section (NVML's, now or from the cache), by PCI
// address; nil without one.
func nvmlNames(m *migInventory) map[string]string {
	if m == nil || !m.Available {
		return nil
	}
	names := map[string]string{}
	for _, g := range m.GPUs {
		names[g.Address] = g.Name
	}
	return names
}

// cachedGPUNames are NVML's names of inv's GPUs from the MIG state cache alone: check names a
// GPU pci.ids does not know as inspect's table does, without starting the NVML helper (a
// readiness check stays fast and never waits on a driver); nil when there is no cache to read
// or no NVIDIA GPU on nvidia in inv.
func cachedGPUNames(nv migremote.Env, root host.Root, inv *host.Inventory) map[string]string {
	if !nvmlSeesAGPU(inv) || !nvmlDescribes(nv, root) {
		return nil
	}
	c, err := loadMIGCache(nv, root)
	if err != nil {
		return nil
	}
	names := map[string]string{}
	for _, g := range c.State.GPUs {
		names[g.Address] = g.Name
	}
	return names
}

// migInventoryTable prints inspect's MIG section: one line per GPU, or the note.
func migInventoryTable(w io.Writer, m *migInventory) error {
	if m == nil {
		return nil
	}
	if !m.Available {
		_, err := fmt.Fprintf(w, "\nMIG: %s\n", m.Note)
		return err
	}
	src := "NVML"
	if m.Source == "cache" && m.ReadAt != nil {
		src = fmt.Sprintf("cached %s ago by %s; inspect --mig asks NVML now", migAge(time.Duration(m.AgeSeconds*float64(time.Second))), m.By)
	}
	fmt.Fprintf(w, "\nMIG (%s; vgpu-host mig show for profiles and placements):\n", src)
	for _, g := range m.GPUs {
		if !g.Capable {
			fmt.Fprintf(w, "  %s  %s  MIG unsupported\n", g.Address, g.Name)
			continue
		}
		var ins []string
		for _, in := range g.Instances {
			ins = append(ins, fmt.Sprintf("%s@%s", in.Profile, in.Placement))
		}
		var free []string
		for _, f := range g.Free {
			if f.Fits > 0 {
				free = append(free, fmt.Sprintf("%d×%s", f.Fits, f.Profile))
			}
		}
		fmt.Fprintf(w, "  %s  %s  MIG %s  instances: %s  room for: %s\n", g.Address, g.Name, migMode(g.GPU), dash(strings.Join(ins, " ")), dash(strings.Join(free, " ")))
	}
	return nil
}

// migAge is a cache's age as a person reads it: "850ms", "12s", "3m10s", "2h5m".
func migAge(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	}
	return d.Round(time.Minute).String()
}
