package main

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/internal/testenv"
	"github.com/vgpu-host/vgpu-host/kube"
	"github.com/vgpu-host/vgpu-host/kube/dra"
)

// TestHostsMatchTheirExpectations keeps test/k8s/run.sh's inputs honest inside `make test`
// (the upstream-Kubernetes run itself is make test-k8s): on each fake host, what the device
// plugin and the DRA driver would offer — one resource, its env variable, its healthy devices,
// their groups' /dev/vfio nodes and DRA names — is exactly what fakehost tells run.sh to expect,
// and removing the expected node leaves exactly one device unhealthy. A snapshot, name or
// hosttest change that would turn the real run red turns this red first.
func TestHostsMatchTheirExpectations(t *testing.T) {
	for _, kind := range []string{"consumer", "lab", "nvidia"} {
		t.Run(kind, func(t *testing.T) {
			var e Expect
			var root host.Root
			switch kind {
			case "consumer":
				tr := hosttest.New(t)
				e, root = consumer(tr), tr.Root
			case "nvidia":
				tr := hosttest.New(t)
				e, root = nvidia(tr), tr.Root
			case "lab":
				if _, err := os.Stat("/usr/share/misc/pci.ids"); err != nil {
					testenv.SkipOrFail(t, "the lab host's names come from Debian's pci.ids (scripts/deps.sh test)")
				}
				tarball := hosttest.RepoFile(t, "host/testdata/lab-snapshot.tar.gz")
				if tarball == "" {
					t.Fatal("host/testdata/lab-snapshot.tar.gz is missing")
				}
				dir := t.TempDir()
				e = lab(t, dir, tarball)
				var err error
				if root, err = host.NewRoot(dir); err != nil {
					t.Fatal(err)
				}
			}
			e.Host = kind
			e.DRADevices = draNames(kind, e.Devices)
			cat := catalog(t, root)
			if len(cat.Resources) != 1 {
				t.Fatalf("%d resources, want 1 (%s): %+v", len(cat.Resources), e.Resource, cat.Resources)
			}
			r := cat.Resources[0]
			if r.Name != e.Resource || r.EnvVar() != e.Env {
				t.Errorf("resource %s (%s), fakehost expects %s (%s)", r.Name, r.EnvVar(), e.Resource, e.Env)
			}
			if r.Healthy() != len(e.Devices) || len(r.Devices) != len(e.Devices) {
				t.Errorf("%d of %d devices healthy, fakehost expects %d", r.Healthy(), len(r.Devices), len(e.Devices))
			}
			for _, d := range r.Devices {
				want, ok := e.Devices[d.ID]
				var got []string
				for _, g := range d.Groups {
					got = append(got, "/dev/vfio/"+strconv.Itoa(g))
				}
				got = append(got, "/dev/vfio/vfio")
				slices.Sort(got)
				want = slices.Sorted(slices.Values(want))
				if !ok || !slices.Equal(got, want) {
					t.Errorf("device %s nodes %v, fakehost expects %v", d.ID, got, want)
				}
				if n := dra.DeviceName(r, d); n != e.DRADevices[d.ID] {
					t.Errorf("device %s DRA name %s, fakehost expects %s", d.ID, n, e.DRADevices[d.ID])
				}
			}
			if err := os.Remove(filepath.Join(root.Dir(), e.UnhealthyNode)); err != nil {
				t.Fatal(err)
			}
			if h := catalog(t, root).Resources[0].Healthy(); h != len(e.Devices)-1 {
				t.Errorf("without /%s %d devices healthy, want %d", e.UnhealthyNode, h, len(e.Devices)-1)
			}
		})
	}
}

func catalog(t *testing.T, root host.Root) *kube.Catalog {
	t.Helper()
	inv, err := host.Scan(root)
	if err != nil {
		t.Fatal(err)
	}
	cat := kube.Build(inv, kube.Config{})
	cat.MarkDeviceNodes(root)
	return cat
}
