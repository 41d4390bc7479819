package dra

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/internal/kubetest"
	"github.com/vgpu-host/vgpu-host/kube"
)

// TestPublishAndPrepare runs the driver through the upstream kubeletplugin helper with the
// upstream fake clientset: the ResourceSlice it publishes lists exactly the inventory's healthy
// devices with their attributes, and a claim prepared and unprepared leaves the host tree and
// the CDI directory as they were.
func TestPublishAndPrepare(t *testing.T) {
	tr := kubetest.ExampleHost(t)
	// The ResourceSlice controller owns slices by their Node: the node must exist.
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", UID: "node-1-uid"}})
	dir := t.TempDir()
	drv := &Driver{Root: tr.Root, CDIDir: filepath.Join(dir, "cdi")}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	helper, err := kubeletplugin.Start(ctx, drv,
		kubeletplugin.DriverName(DriverName),
		kubeletplugin.KubeClient(client),
		kubeletplugin.NodeName("node-1"),
		kubeletplugin.PluginDataDirectoryPath(filepath.Join(dir, "plugin")),
		kubeletplugin.RegistrationService(false),
		kubeletplugin.DRAService(false),
		kubeletplugin.HealthService(false),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer helper.Stop()
	go drv.Run(ctx, helper, "node-1", 50*time.Millisecond)

	// The inventory's healthy devices, by the catalog the device plugin serves.
	inv, err := host.Scan(tr.Root)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]kube.Resource{}
	for _, r := range kube.Build(inv, kube.Config{}).Resources {
		for _, d := range r.Devices {
			if d.Healthy {
				want[DeviceName(r, d)] = r
			}
		}
	}
	if len(want) < 4 {
		t.Fatalf("fixture has %d healthy devices", len(want))
	}
	var slice resourceapi.ResourceSlice
	deadline := time.Now().Add(10 * time.Second)
	for {
		l, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Items) == 1 && len(l.Items[0].Spec.Devices) == len(want) {
			slice = l.Items[0]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("published %+v, want one slice of %d devices", l.Items, len(want))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if slice.Spec.Driver != DriverName || slice.Spec.NodeName == nil || *slice.Spec.NodeName != "node-1" || slice.Spec.Pool.Name != "node-1" {
		t.Errorf("slice spec %+v", slice.Spec)
	}
	var names []string
	for _, d := range slice.Spec.Devices {
		names = append(names, d.Name)
		r, ok := want[d.Name]
		if !ok {
			t.Errorf("published %s, which the inventory does not have", d.Name)
			continue
		}
		if got := d.Attributes[AttrResource].StringValue; got == nil || *got != r.Name {
			t.Errorf("%s: resourceName %v, want %s", d.Name, got, r.Name)
		}
		if got := d.Attributes[AttrKind].StringValue; got == nil || *got != string(r.Kind) {
			t.Errorf("%s: kind %v", d.Name, got)
		}
		_, hasBus := d.Attributes[deviceattribute.StandardDeviceAttributePCIBusID]
		if hasBus == (r.Kind == kube.KindMdev) {
			t.Errorf("%s (%s): pciBusID present=%v", d.Name, r.Kind, hasBus)
		}
	}
	sort.Strings(names)
	a100 := slice.Spec.Devices[slices.Index(names, "pci-0000-17-00-0")]
	if v := a100.Attributes[AttrNUMA].IntValue; v == nil || *v != 0 || *a100.Attributes[deviceattribute.StandardDeviceAttributePCIBusID].StringValue != "0000:17:00.0" ||
		*a100.Attributes[AttrModel].StringValue != "GA100 [A100 SXM4 40GB]" {
		t.Errorf("A100 attributes %v", a100.Attributes)
	}
	md := slice.Spec.Devices[slices.Index(names, "mdev-0c6ed5e3-0b80-4f4c-9a8c-1c0a8a2f7d11")]
	if *md.Attributes[AttrType].StringValue != "nvidia-223" || *md.Attributes[AttrModel].StringValue != "GRID T4-2Q" || *md.Attributes[AttrNUMA].IntValue != 1 {
		t.Errorf("mdev attributes %v", md.Attributes)
	}

	// Prepare a claim for the RTX 3080 (with its audio companion) and the mdev.
	before := hosttest.State(t, tr.Dir())
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "vm-gpus", Namespace: "default", UID: types.UID("c1a1m")},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{
				{Request: "gpu", Driver: DriverName, Pool: "node-1", Device: "pci-0000-01-00-0"},
				{Request: "vgpu", Driver: DriverName, Pool: "node-1", Device: "mdev-0c6ed5e3-0b80-4f4c-9a8c-1c0a8a2f7d11"},
				{Request: "nic", Driver: "other.example.com", Pool: "node-1", Device: "eth0"},
			}}}},
	}
	res, err := drv.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{claim})
	if err != nil || res[claim.UID].Err != nil {
		t.Fatalf("prepare: %v %v", err, res[claim.UID].Err)
	}
	devs := res[claim.UID].Devices
	if len(devs) != 2 || devs[0].CDIDeviceIDs[0] != CDIKind+"=c1a1m-pci-0000-01-00-0" || devs[1].Requests[0] != "vgpu" {
		t.Errorf("prepared devices %+v", devs)
	}
	var spec cdiSpec
	b, err := os.ReadFile(drv.SpecPath(claim.UID))
	if err != nil {
		t.Fatal(err)
	}
	json.Unmarshal(b, &spec)
	gpuGroup := tr.Group(kubetest.Addr("0000:01:00.0"))
	gpu := spec.Devices[0].ContainerEdits
	if len(gpu.DeviceNodes) != 2 || gpu.DeviceNodes[0].Path != "/dev/vfio/vfio" || gpu.DeviceNodes[1].Path != "/dev/vfio/"+strconv.Itoa(gpuGroup) ||
		gpu.Env[0] != "PCI_RESOURCE_NVIDIA_COM_GA102_GEFORCE_RTX_3080=0000:01:00.0" {
		t.Errorf("CDI edits %+v", gpu)
	}
	if got := spec.Devices[1].ContainerEdits.Env[0]; got != "MDEV_PCI_RESOURCE_NVIDIA_COM_GRID_T4-2Q=0c6ed5e3-0b80-4f4c-9a8c-1c0a8a2f7d11" {
		t.Errorf("mdev env %s", got)
	}
	// Idempotent, as the kubelet may ask twice.
	if res, _ := drv.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{claim}); res[claim.UID].Err != nil {
		t.Errorf("second prepare: %v", res[claim.UID].Err)
	}
	obj := kubeletplugin.NamespacedObject{NamespacedName: types.NamespacedName{Namespace: "default", Name: "vm-gpus"}, UID: claim.UID}
	for range 2 {
		ures, err := drv.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{obj})
		if err != nil || ures[claim.UID] != nil {
			t.Fatalf("unprepare: %v %v", err, ures[claim.UID])
		}
	}
	if after := hosttest.State(t, tr.Dir()); !maps.Equal(before, after) {
		t.Error("the host tree changed across prepare and unprepare")
	}
	if ents, _ := os.ReadDir(drv.CDIDir); len(ents) != 0 {
		t.Errorf("CDI files left: %v", ents)
	}

	// A device the host took back is unpublished, and a claim for it fails.
	tr.Unbind(kubetest.Addr("0000:17:00.0"))
	tr.Bind(kubetest.Addr("0000:17:00.0"), "nvidia")
	deadline = time.Now().Add(10 * time.Second)
	for {
		l, _ := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if len(l.Items) == 1 && len(l.Items[0].Spec.Devices) == len(want)-1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the rebound A100 is still published")
		}
		time.Sleep(20 * time.Millisecond)
	}
	claim.Status.Allocation.Devices.Results = []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: DriverName, Pool: "node-1", Device: "pci-0000-17-00-0"}}
	if res, _ := drv.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{claim}); res[claim.UID].Err == nil {
		t.Error("a claim for an unhealthy device was prepared")
	}
}

// TestScanQuarantinedAndUnreadable: Scan reads the host through ops.Inventory's host-only
// inventory, and a quarantined GPU still leaves what it publishes (the catalog reads the record
// itself; the inventory carries no quarantine list); released, it comes back. A root the
// inventory cannot read is the driver's error, wrapping the host's.
func TestScanQuarantinedAndUnreadable(t *testing.T) {
	t.Parallel()
	tr := kubetest.ExampleHost(t)
	drv := &Driver{Root: tr.Root, CDIDir: filepath.Join(t.TempDir(), "cdi")}
	names := func() []string {
		t.Helper()
		devs, err := drv.Scan()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, d := range devs {
			out = append(out, d.Name)
		}
		return out
	}
	all := names()
	a := kubetest.Addr("0000:17:00.0")
	if !slices.Contains(all, "pci-0000-17-00-0") {
		t.Fatalf("the example host publishes %v, without the A100 at %s", all, a)
	}
	if err := host.SaveQuarantine(tr.Root, &host.Quarantine{Address: a, Since: time.Now(), Op: "destroy vm1",
		Problems: []host.Problem{{Check: "config-space", Detail: "reads all ones"}}}); err != nil {
		t.Fatal(err)
	}
	got := names()
	want := slices.DeleteFunc(slices.Clone(all), func(n string) bool { return n == "pci-0000-17-00-0" })
	if !slices.Equal(got, want) {
		t.Errorf("with %s quarantined, published %v; want %v", a, got, want)
	}
	if err := os.Remove(host.QuarantinePath(tr.Root, a)); err != nil {
		t.Fatal(err)
	}
	if got := names(); !slices.Equal(got, all) {
		t.Errorf("released, published %v; want %v", got, all)
	}

	r := hosttest.RemovedRoot(t)
	bad := &Driver{Root: r}
	if devs, err := bad.Scan(); err == nil || devs != nil || !strings.HasPrefix(err.Error(), "dra: scan host root "+r.Dir()) || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("scan of a root removed: %v, %v; want the driver's error wrapping the host's", devs, err)
	}
}
