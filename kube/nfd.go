package kube

import (
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/internal/lazy"
)

// FeaturesFile is Node Feature Discovery's feature file for vgpu-host, relative to the etc
// directory of the host root: NFD's local source reads every file in features.d and turns
// each "name=value" line into the node label feature.node.kubernetes.io/NAME=VALUE.
const FeaturesFile = "kubernetes/node-feature-discovery/features.d/vgpu-host"

// LabelPrefix is the namespace NFD puts in front of the names in FeaturesFile.
const LabelPrefix = "feature.node.kubernetes.io/"

// Label is one node label (its name without LabelPrefix).
type Label struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// labelNameRE is compiled on first use: vgpu-host's start-up must not pay for it.
var labelNameRE = lazy.Regexp{Expr: `^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`}

// Labels returns the node labels of the host's state now; docs/kubevirt.md lists them. Only
// what holds now is labelled: a model or type with no healthy device gets no label.
//
//	vgpu-host.iommu=true                          the kernel has an active IOMMU
//	vgpu-host.mode.passthrough=true               some whole GPU (or plain VF) is allocatable
//	vgpu-host.mode.mdev=true                      some mdev instance is allocatable
//	vgpu-host.mode.vendor-vfio=true               some vendor-VFIO VF is allocatable
//	vgpu-host.model.GA100_A100_PCIE_80GB=4        physical GPUs of a model, however they are used
//	vgpu-host.gpu.GA100_A100_PCIE_80GB=2          healthy passthrough devices of a resource
//	vgpu-host.vgpu.GRID_A100-4C=3                 healthy vGPU devices (instances, typed VFs) of a resource
//	vgpu-host.vgpu-free.GRID_A100-10C=4           more instances of a type the host could create now
//
// Names longer than a label allows (63 characters) are left out and reported in the second
// return value, never cut.
func Labels(inv *host.Inventory, cat *Catalog) ([]Label, []string) {
	m := map[string]int{}
	flags := map[string]bool{"vgpu-host.iommu": inv.IOMMU}
	for _, d := range inv.Devices {
		if d.IsGPU && d.PhysFn == nil {
			m["vgpu-host.model."+PCIName(&d)]++
		}
	}
	for _, r := range cat.Resources {
		n := r.Healthy()
		if n == 0 {
			continue
		}
		part := r.Name[strings.IndexByte(r.Name, '/')+1:]
		switch r.Kind {
		case KindPCI:
			flags["vgpu-host.mode.passthrough"] = true
			m["vgpu-host.gpu."+part] += n
		case KindMdev:
			flags["vgpu-host.mode.mdev"] = true
			m["vgpu-host.vgpu."+part] += n
		case KindVendorVFIO:
			flags["vgpu-host.mode.vendor-vfio"] = true
			m["vgpu-host.vgpu."+part] += n
		}
	}
	for _, p := range inv.MdevParents {
		for _, t := range p.Types {
			if t.AvailableInstances > 0 {
				m["vgpu-host.vgpu-free."+TypeName(t.Name, t.ID)] += t.AvailableInstances
			}
		}
	}
	for _, d := range inv.Devices {
		if d.VendorVGPU == nil || d.VendorVGPU.CurrentType != 0 {
			continue
		}
		for _, t := range d.VendorVGPU.Creatable {
			m["vgpu-host.vgpu-free."+TypeName(t.Name, strconv.Itoa(t.ID))]++
		}
	}
	var out []Label
	var skipped []string
	add := func(name, value string) {
		if len(name) > 63 || !labelNameRE.Get().MatchString(name) {
			skipped = append(skipped, fmt.Sprintf("label %s=%s: not a valid label name (at most 63 letters, digits, '-', '_', '.'); set a shorter resource name in the kubernetes config", name, value))
			return
		}
		out = append(out, Label{Name: name, Value: value})
	}
	for k, v := range flags {
		if v {
			add(k, "true")
		}
	}
	for k, v := range m {
		add(k, strconv.Itoa(v))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	sort.Strings(skipped)
	return out, skipped
}

// FeaturesText is the feature file's content for labels. With a non-zero expiry it starts
// with NFD's "# +expiry-time=" directive, so that labels of a node whose plugin stopped
// rewriting the file vanish instead of claiming a state nobody checks any more.
func FeaturesText(labels []Label, expiry time.Time) string {
	var b strings.Builder
	b.WriteString("# written by vgpu-host from the host's state; do not edit\n")
	if !expiry.IsZero() {
		fmt.Fprintf(&b, "# +expiry-time=%s\n", expiry.UTC().Format(time.RFC3339))
	}
	for _, l := range labels {
		fmt.Fprintf(&b, "%s=%s\n", l.Name, l.Value)
	}
	return b.String()
}

// WriteFeatures replaces the feature file under root with labels, atomically (NFD never
// reads half a file).
func WriteFeatures(root host.Root, labels []Label, expiry time.Time) (string, error) {
	p := root.Etc(FeaturesFile)
	if err := root.WriteFileAtomic(p, []byte(FeaturesText(labels, expiry)), 0o644); err != nil { // never through a link out of the root
		return p, fmt.Errorf("node feature file: %w", err)
	}
	return p, nil
}

// RemoveFeatures deletes the feature file under root (a stopping plugin's labels go with it).
func RemoveFeatures(root host.Root) error {
	if err := root.Remove(root.Etc(FeaturesFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("node feature file: %w", err)
	}
	return nil
}
