package mdev

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
)

// quarantine gives a a quarantine record, as a failed handback does.
func quarantine(t *testing.T, tr *hosttest.Tree, a host.Address) {
	t.Helper()
	q := &host.Quarantine{Address: a, Problems: []host.Problem{{Check: host.HealthConfigOnes, Detail: "config space reads all ones"}}, Since: time.Now(), Op: "mdev remove"}
	if err := host.SaveQuarantine(tr.Root, q); err != nil {
		t.Fatal(err)
	}
}

// wantQuarantineRefusal checks bind's refusal (exit 4, the record, the fix) and that the
// kernel saw no write.
func wantQuarantineRefusal(t *testing.T, err error, k *hosttest.Kernel, a host.Address) {
	t.Helper()
	if !errors.Is(err, host.ErrRefused) || !errors.Is(err, host.ErrQuarantined) {
		t.Fatalf("want a quarantine refusal, got %v", err)
	}
	for _, want := range []string{"[quarantined]", "quarantine/" + a.String() + ".json", "release-quarantine", "config-all-ones"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	if w := k.Writes(); len(w) != 0 {
		t.Errorf("writes despite the refusal: %v", w)
	}
}

// mdev create on a quarantined parent is refused like bind, before any write; released, it
// creates.
func TestCreateRefusesQuarantinedParent(t *testing.T) {
	tr := hosttest.New(t)
	gpu := tr.DatacenterGPU("0000:40:01.0", "0000:41:00.0", "nvidia", 0)
	tr.A100Mdev(gpu)
	quarantine(t, tr, gpu)
	m, k := newMgr(tr)
	_, err := m.Create(context.Background(), CreateRequest{Parent: gpu.String(), Profile: "A100-4C", Owner: "vm"})
	wantQuarantineRefusal(t, err, k, gpu)
	if err := host.RemoveQuarantine(tr.Root, gpu); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(context.Background(), CreateRequest{Parent: gpu.String(), Profile: "A100-4C", Owner: "vm"}); err != nil {
		t.Fatalf("create after release: %v", err)
	}
}

// A vendor-VFIO GPU: a quarantined PF refuses, a quarantined VF is passed over when VFs are
// chosen and refused when pinned.
func TestVendorCreateSkipsQuarantinedVF(t *testing.T) {
	tr, pf := l40s(t)
	m, k := newMgr(tr)
	ctx := context.Background()
	quarantine(t, tr, pf)
	_, err := m.Create(ctx, CreateRequest{Parent: pf.String(), Profile: "L40S-8Q", Owner: "cad-1"})
	wantQuarantineRefusal(t, err, k, pf)
	if err := host.RemoveQuarantine(tr.Root, pf); err != nil {
		t.Fatal(err)
	}
	vf0, vf1 := tr.VFAddress(pf, 0), tr.VFAddress(pf, 1)
	quarantine(t, tr, vf0)
	_, err = m.Create(ctx, CreateRequest{Parent: pf.String(), Profile: "L40S-8Q", Owner: "cad-1", VFs: []host.Address{vf0}})
	wantQuarantineRefusal(t, err, k, vf0)
	got, err := m.Create(ctx, CreateRequest{Parent: pf.String(), Profile: "L40S-8Q", Owner: "cad-1"})
	if err != nil || len(got) != 1 || *got[0].VF != vf1 {
		t.Fatalf("create passed the quarantined VF? %v %+v", err, got)
	}
	if current(tr, vf0) != "0" {
		t.Fatalf("the quarantined VF got a type: %s", current(tr, vf0))
	}
}

// vf enable on a quarantined PF is refused before sriov_numvfs is written.
func TestEnableRefusesQuarantinedPF(t *testing.T) {
	tr := hosttest.New(t)
	pf := nvmePF(tr, false)
	m, k := newMgr(tr)
	quarantine(t, tr, pf)
	_, err := m.EnableVFs(context.Background(), pf, 2, EnableOptions{Driver: DriverVFIO, Force: true})
	wantQuarantineRefusal(t, err, k, pf)
	if err := host.RemoveQuarantine(tr.Root, pf); err != nil {
		t.Fatal(err)
	}
	if st, err := m.EnableVFs(context.Background(), pf, 2, EnableOptions{}); err != nil || st.NumVFs != 2 {
		t.Fatalf("enable after release: %v %+v", err, st)
	}
}
