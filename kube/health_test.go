package kube_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/internal/kubetest"
	"github.com/vgpu-host/vgpu-host/kube"
	"github.com/vgpu-host/vgpu-host/kube/dra"
)

// TestXidMarksChildrenUnhealthy: a fatal NVIDIA Xid on a GPU, recorded and checked as the
// agent's health watch does, makes every device carved from it unhealthy to the device plugin
// and the DRA driver (its mdev instances, its vendor-VFIO VFs) naming the Xid; another GPU's
// devices keep their health; a reset's clean check makes them healthy again.
func TestXidMarksChildrenUnhealthy(t *testing.T) {
	tr := hosttest.New(t)
	tr.WriteFile("usr/share/misc/pci.ids", kubetest.PCIIDs)
	a100 := tr.DatacenterGPU("0000:40:01.0", "0000:41:00.0", "nvidia", 0)
	tr.A100Mdev(a100)
	rel, _ := filepath.Rel(tr.Dir(), tr.DevDir(a100))
	tr.CreateMdev(rel, "nvidia-471", "11111111-2222-3333-4444-555555555555")
	l40 := tr.NvidiaSRIOVGPU("0000:80:01.0", "0000:81:00.0", 1, 4, nil)
	k := hosttest.NewKernel(tr)
	vf := tr.VFAddress(l40, 0)
	if err := k.Write(context.Background(), tr.Root.PCIDevice(vf, "nvidia", "current_vgpu_type"), "1160"); err != nil {
		t.Fatal(err)
	}
	var slice []string // the DRA driver's ResourceSlice devices, by name
	mark := func() map[string]kube.Device {
		t.Helper()
		inv := scan(t, tr.Root)
		cat := kube.Build(inv, kube.Config{})
		cat.MarkDeviceNodes(tr.Root)
		out := map[string]kube.Device{}
		for _, r := range cat.Resources {
			for _, d := range r.Devices {
				out[d.ID] = d
			}
		}
		slice = nil
		for _, d := range dra.Devices(inv, cat) {
			slice = append(slice, d.Name)
		}
		return out
	}
	before := mark()
	inSlice := slices.Contains(slice, "mdev-11111111-2222-3333-4444-555555555555")
	if !inSlice {
		t.Fatalf("the healthy mdev is not in the DRA slice %v", slice)
	}
	if len(before) != 2 {
		t.Fatalf("devices %+v", before)
	}
	for _, a := range []host.Address{a100, l40} {
		if err := host.RecordXid(tr.Root, host.XidEvent{Address: a, Xid: 13, GPUInstance: -1, ComputeInstance: -1, Time: time.Now().UTC()}); err != nil {
			t.Fatal(err)
		}
	}
	if err := host.RecordXid(tr.Root, host.XidEvent{Address: a100, Xid: 79, GPUInstance: -1, ComputeInstance: -1, Time: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	if _, err := host.ObserveAll(tr.Root, time.Now().UTC()); err != nil {
		t.Fatal(err)
	}
	after := mark()
	if slices.Contains(slice, "mdev-11111111-2222-3333-4444-555555555555") {
		t.Errorf("the mdev on the GPU with Xid 79 is still in the DRA slice %v", slice)
	}
	md := after["11111111-2222-3333-4444-555555555555"]
	if md.Healthy || !strings.Contains(md.Reason, "nvidia-xid") || !strings.Contains(md.Reason, "Xid 79") || !strings.Contains(md.Reason, a100.String()) {
		t.Errorf("mdev on the GPU with Xid 79: %+v", md)
	}
	// Xid 13 (an application's fault) is informational: the L40S's VF keeps its health.
	if got, was := after[vf.String()], before[vf.String()]; got.Healthy != was.Healthy || strings.Contains(got.Reason, "nvidia-xid") {
		t.Errorf("VF of a GPU with only Xid 13: %+v (was %+v)", got, was)
	}
	if err := host.RecordXid(tr.Root, host.XidEvent{Address: l40, Xid: 119, GPUInstance: -1, ComputeInstance: -1, Time: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	host.ObserveAll(tr.Root, time.Now().UTC())
	if got := mark()[vf.String()]; got.Healthy || !strings.Contains(got.Reason, "Xid 119") {
		t.Errorf("VF of a GPU with Xid 119 (GSP timeout): %+v", got)
	}
	// A reset clears the Xid: the next check is clean and the devices come back.
	st, _ := host.LoadHealthState(tr.Root, a100)
	st.LastReset = time.Now().UTC().Add(time.Second)
	if err := host.SaveHealthState(tr.Root, st); err != nil {
		t.Fatal(err)
	}
	host.ObserveAll(tr.Root, time.Now().UTC())
	if got := mark()["11111111-2222-3333-4444-555555555555"]; got.Healthy != before["11111111-2222-3333-4444-555555555555"].Healthy {
		t.Errorf("mdev after the GPU's reset: %+v", got)
	}
	if slices.Contains(slice, "mdev-11111111-2222-3333-4444-555555555555") != inSlice {
		t.Errorf("the DRA slice after the reset %v", slice)
	}
}
