package mdev

import (
	"slices"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
)

// mdev's Parents, Instances and PFs are views of host's readers: on the lab's real-kernel
// snapshot they must say what host says, parent by parent, type by type.
func TestViewsAgreeWithHostOnSnapshot(t *testing.T) {
	p := hosttest.RepoFile(t, "host/testdata/lab-snapshot.tar.gz")
	if p == "" {
		t.Fatal("host/testdata/lab-snapshot.tar.gz is missing: make lab-snapshot captures it")
	}
	root := hosttest.Snapshot(t, p)
	m := New(root, &host.Recorder{})

	hps, err := host.MdevParents(root)
	if err != nil || len(hps) == 0 {
		t.Fatalf("host mdev parents %v, %v", hps, err)
	}
	ps, err := m.Parents()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]Parent{}
	for _, p := range ps {
		byName[p.Name] = p
	}
	for _, hp := range hps {
		p, ok := byName[hp.Parent]
		if !ok || p.Backend != BackendMdev || len(p.Types) != len(hp.Types) {
			t.Fatalf("parent %s: mdev view %+v, host %+v", hp.Parent, p, hp)
		}
		if hp.Address == nil && p.NUMA != -1 {
			t.Errorf("virtual parent %s: NUMA %d, want -1", hp.Parent, p.NUMA)
		}
		for i, ht := range hp.Types {
			ty := p.Types[i]
			if ty.ID != ht.ID || ty.Available != ht.AvailableInstances || !slices.Equal(ty.Instances, ht.Instances) || ty.DeviceAPI != ht.DeviceAPI {
				t.Errorf("%s type %s: mdev view %+v, host %+v", hp.Parent, ht.ID, ty, ht)
			}
			if running := slices.Contains(p.Running, ht.ID); running != (len(ht.Instances) > 0) {
				t.Errorf("%s type %s: running %v with %d instances", hp.Parent, ht.ID, running, len(ht.Instances))
			}
		}
	}

	his, _, err := host.ReadMdevInstances(root)
	if err != nil || len(his) == 0 {
		t.Fatalf("host mdev instances %v, %v", his, err)
	}
	ins, err := m.Instances()
	if err != nil {
		t.Fatal(err)
	}
	for _, hi := range his {
		i := slices.IndexFunc(ins, func(in Instance) bool { return in.UUID == hi.UUID })
		if i < 0 || !ins[i].Active || ins[i].Parent != hi.Parent || ins[i].Type != hi.Type || ins[i].TypeName != hi.TypeName {
			t.Errorf("instance %s: host %+v, mdev view %+v", hi.UUID, hi, ins)
		}
	}

	pfs, err := m.ListPFs()
	if err != nil || len(pfs) == 0 {
		t.Fatalf("PFs %v, %v (the lab has an SR-IOV nvme)", pfs, err)
	}
	for _, pf := range pfs {
		sr, _, err := host.ReadSRIOV(root, pf.Address)
		if err != nil || sr == nil || pf.TotalVFs != sr.TotalVFs || pf.NumVFs != sr.NumVFs || len(pf.VFs) != len(sr.VFs) {
			t.Fatalf("PF %s: mdev view %+v, host %+v, %v", pf.Address, pf, sr, err)
		}
		want, err := m.VFAddresses(pf.Address, pf.NumVFs)
		if err != nil {
			t.Fatal(err)
		}
		for i, vf := range pf.VFs {
			if vf.Address != want[i] || vf.Address != sr.VFs[i] {
				t.Errorf("PF %s VF %d: %s, computed %s, host %s", pf.Address, i, vf.Address, want[i], sr.VFs[i])
			}
		}
	}
}
