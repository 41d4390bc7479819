package host_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
)

// The real-kernel snapshots hold the mdpy-hd instance 66666666-…; ReadMdevInstance must agree
// with the kernel's own links: the group that lists the UUID, the driver link, the parent
// directory the instance lives in.
func TestReadMdevInstanceSnapshots(t *testing.T) {
	t.Parallel()
	const uuid = "66666666-7777-8888-9999-000000000000"
	for name, tarball := range map[string]string{
		"shared fixture": hosttest.SharedFixture(t, "qemu-q35-iommu-6.1.tar.gz"),
		"lab snapshot":   hosttest.RepoFile(t, "host/testdata/lab-snapshot.tar.gz"),
	} {
		t.Run(name, func(t *testing.T) {
			if tarball == "" {
				t.Fatal("host/testdata/lab-snapshot.tar.gz is missing: make lab-snapshot captures it")
			}
			root := hosttest.Snapshot(t, tarball)
			// The group that lists the UUID, found by walking every group, not through the
			// instance's own iommu_group link that ReadMdevInstance reads.
			listed, _ := filepath.Glob(root.Sys("kernel", "iommu_groups", "*", "devices", uuid))
			if len(listed) != 1 {
				t.Fatalf("snapshot: %d groups list %s, want 1", len(listed), uuid)
			}
			wantGroup, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(listed[0]))))
			wantDriver, err := host.LinkBase(root.Sys("bus", "mdev", "devices", uuid, "driver"))
			if err != nil {
				t.Fatal(err)
			}

			m, warnings, err := host.ReadMdevInstance(root, uuid)
			if err != nil || len(warnings) != 0 {
				t.Fatalf("ReadMdevInstance: %v, warnings %q", err, warnings)
			}
			want := host.MdevInstance{UUID: uuid, Parent: "mdpy", Type: "mdpy-hd", TypeName: "mdpy-hd", DeviceAPI: "vfio-pci", Driver: wantDriver, IOMMUGroup: wantGroup}
			if m != want {
				t.Errorf("got  %+v\nwant %+v", m, want)
			}
			if wantDriver != "mdpy" {
				t.Errorf("snapshot driver %q, want mdpy (kernels >= 5.16 bind the parent's own driver)", wantDriver)
			}
		})
	}
}

// A PCI parent (NVIDIA vGPU <= 16): the parent's address is set, the type's name read, and an
// instance with no driver bound has driver "".
func TestReadMdevInstancePCIParent(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	gpu := tr.DatacenterGPU("0000:40:01.0", "0000:41:00.0", "nvidia", 0)
	tr.A100Mdev(gpu)
	const uuid = "0f0e0d0c-0b0a-4909-8807-060504030201"
	rel, _ := filepath.Rel(tr.Dir(), tr.DevDir(gpu))
	tr.CreateMdev(rel, "nvidia-471", uuid)
	root, _ := host.NewRoot(tr.Dir())

	m, _, err := host.ReadMdevInstance(root, "0F0E0D0C-0B0A-4909-8807-060504030201")
	if err != nil {
		t.Fatal(err)
	}
	if m.UUID != uuid || m.Parent != gpu.String() || m.ParentAddress == nil || *m.ParentAddress != gpu ||
		m.Type != "nvidia-471" || m.TypeName != "GRID A100-4C" || m.Driver != "" || m.IOMMUGroup < 0 {
		t.Errorf("got %+v", m)
	}
	g, err := host.ReadGroup(root, m.IOMMUGroup)
	if err != nil || len(g.Mdevs) != 1 || g.Mdevs[0].UUID != uuid || len(g.Members) != 0 {
		t.Errorf("group %d does not list the instance: %+v, %v", m.IOMMUGroup, g, err)
	}
}

func TestReadMdevInstanceErrors(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	tr.Mbochs()
	root, _ := host.NewRoot(tr.Dir())
	_, _, err := host.ReadMdevInstance(root, "11111111-2222-3333-4444-555555555555")
	if !errors.Is(err, host.ErrNotFound) {
		t.Errorf("missing instance: %v, want ErrNotFound", err)
	}
	if _, _, err := host.ReadMdevInstance(root, "0000:01:00.0"); !errors.Is(err, host.ErrInvalid) {
		t.Errorf("not a UUID: %v, want ErrInvalid", err)
	}
	// An instance whose mdev driver is not bound has no group: -1, not an error.
	const uuid = "11111111-2222-3333-4444-555555555555"
	tr.CreateMdev("sys/devices/virtual/mbochs/mbochs", "mbochs-small", uuid)
	if err := os.Remove(filepath.Join(tr.Dir(), "sys/devices/virtual/mbochs/mbochs", uuid, "iommu_group")); err != nil {
		t.Fatal(err)
	}
	m, _, err := host.ReadMdevInstance(root, uuid)
	if err != nil || m.IOMMUGroup != -1 || m.Type != "mbochs-small" || m.TypeName != "small" {
		t.Errorf("no group: %+v, %v", m, err)
	}
}
