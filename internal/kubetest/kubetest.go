// Package kubetest judges the Kubernetes and KubeVirt manifests vgpu-host prints against the
// upstream Go types, and builds the fake hosts the Kubernetes tests share. Only tests import it:
// it links kubevirt.io/api and k8s.io/api, which the vgpu-host binary must not.
package kubetest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
)

// StrictRoundTrip is how every manifest vgpu-host prints is judged: it must decode into the
// upstream type with no unknown field, survive decode → encode → decode unchanged, and every
// leaf of what vgpu-host wrote must come back from the upstream type's encoding with the same
// value. The last check is the one that matters for KubeVirt: VirtualMachineInstanceSpec has
// its own UnmarshalJSON (plain json.Unmarshal inside), so an unknown field under
// spec.template.spec — "hostDevice:" for "hostDevices:" — passes DisallowUnknownFields and is
// silently dropped; the leaf comparison sees it missing.
func StrictRoundTrip[T any](manifest []byte) error {
	var first T
	dec := json.NewDecoder(bytes.NewReader(manifest))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&first); err != nil {
		return fmt.Errorf("strict decode into %T: %w", first, err)
	}
	enc, err := json.Marshal(&first)
	if err != nil {
		return err
	}
	var second T
	dec = json.NewDecoder(bytes.NewReader(enc))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&second); err != nil {
		return fmt.Errorf("decode of the re-encoded %T: %w", first, err)
	}
	// Semantic equality: a resource.Quantity caches its string form when encoded, so
	// reflect.DeepEqual would see "64Gi" and its cached twin as different.
	if !equality.Semantic.DeepEqual(first, second) {
		return fmt.Errorf("%T changed in decode → encode → decode", first)
	}
	mine, theirs := map[string]any{}, map[string]any{}
	var a, b any
	if err := json.Unmarshal(manifest, &a); err != nil {
		return err
	}
	if err := json.Unmarshal(enc, &b); err != nil {
		return err
	}
	leaves("", a, mine)
	leaves("", b, theirs)
	var lost []string
	for k, v := range mine {
		if tv, ok := theirs[k]; !ok || !reflect.DeepEqual(tv, v) {
			lost = append(lost, fmt.Sprintf("%s: wrote %v, upstream has %v", k, v, theirs[k]))
		}
	}
	sort.Strings(lost)
	if len(lost) > 0 {
		return fmt.Errorf("%T lost or changed %d fields:\n  %s", first, len(lost), strings.Join(lost, "\n  "))
	}
	return nil
}

// leaves flattens JSON into path → scalar; empty objects and arrays are leaves too (an
// "upload: {}" or "masquerade: {}" must survive).
func leaves(path string, v any, out map[string]any) {
	switch x := v.(type) {
	case map[string]any:
		if len(x) == 0 {
			out[path] = "{}"
		}
		for k, c := range x {
			leaves(path+"."+k, c, out)
		}
	case []any:
		if len(x) == 0 {
			out[path] = "[]"
		}
		for i, c := range x {
			leaves(fmt.Sprintf("%s[%d]", path, i), c, out)
		}
	default:
		out[path] = x
	}
}

// PCIIDs is a small pci.ids for fake roots, so resource names do not depend on this machine's
// file. (host.PCIIDs finds a vendor by "\n10de  ", so it starts with a comment, as the real one.)
const PCIIDs = `# pci.ids for tests
10de  NVIDIA Corporation
	1aef  GA102 High Definition Audio Controller
	1eb8  TU104GL [Tesla T4]
	20b0  GA100 [A100 SXM4 40GB]
	2206  GA102 [GeForce RTX 3080]
	26b9  AD102GL [L40S]
8086  Intel Corporation
	7c10  Root Port
`

// ExampleHost is a host on which every spec in examples/ resolves: an A100 on vfio-pci at
// 0000:17:00.0 (NUMA 0), a Tesla T4 offering GRID T4-2Q mdevs (NUMA 1) with one instance, an
// L40S whose first VF (0000:41:00.4) runs NVIDIA L40S-4Q, and a GeForce RTX 3080 with its HDMI
// audio, both on vfio-pci.
func ExampleHost(t *testing.T) *hosttest.Tree {
	t.Helper()
	tr := hosttest.New(t)
	tr.WriteFile("usr/share/misc/pci.ids", PCIIDs)
	tr.DatacenterGPU("0000:16:01.0", "0000:17:00.0", "vfio-pci", 0)
	tr.RootPort("0000:60:01.0")
	t4 := tr.AddPCI(hosttest.PCI{Addr: "0000:61:00.0", Parent: "0000:60:01.0", Vendor: hosttest.VendorNVIDIA, Device: 0x1eb8,
		Class: 0x030200, Driver: "nvidia", NUMA: 1, NUMASet: true})
	tr.MdevParentPCI(t4, []hosttest.MdevType{
		{ID: "nvidia-222", Name: "GRID T4-1Q", Available: 16},
		{ID: "nvidia-223", Name: "GRID T4-2Q", Available: 8},
	})
	rel, err := filepath.Rel(tr.Dir(), tr.DevDir(t4))
	if err != nil {
		t.Fatal(err)
	}
	tr.CreateMdev(rel, "nvidia-223", "0c6ed5e3-0b80-4f4c-9a8c-1c0a8a2f7d11")
	l40 := tr.NvidiaSRIOVGPU("0000:40:01.0", "0000:41:00.0", 0, 4, []hosttest.NvidiaVGPUType{
		{ID: 1155, Name: "NVIDIA L40S-1Q", MaxPerGPU: 32}, {ID: 1157, Name: "NVIDIA L40S-4Q", MaxPerGPU: 8}})
	k := hosttest.NewKernel(tr)
	if err := k.Write(t.Context(), tr.Root.PCIDevice(tr.VFAddress(l40, 0), "nvidia", "current_vgpu_type"), "1157"); err != nil {
		t.Fatal(err)
	}
	_, audio := tr.ConsumerGPU("0000:00:01.0", "0000:01:00.0", "vfio-pci")
	tr.Bind(audio, "vfio-pci")
	return tr
}

// Addr parses a PCI address (test tables).
func Addr(s string) host.Address { return host.MustParseAddress(s) }
