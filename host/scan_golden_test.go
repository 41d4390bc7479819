package host_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
)

var updateGolden = flag.Bool("update-scan-golden", false, "rewrite host/testdata/scan-golden/*.json.gz from this code's Scan")

// TestScanGolden pins Scan's whole inventory, as `inspect -o json` prints it (indented JSON,
// the root directory written ROOT), on every kind of host the tests build: the 64-GPU and
// the small generated hosts of the benchmarks, the two real-kernel snapshots, and a tree
// with every odd case Scan reports as a warning, each with the groups' members learnt both ways
// (the functions' iommu_group links, or listing the groups). The goldens were written by Scan before it
// was made faster (issue 19), so any change to what Scan reads shows here as a diff. A
// deliberate change to the inventory rewrites them: go test ./host -run TestScanGolden
// -update-scan-golden, and the diff of the decompressed files belongs in the review.
func TestScanGolden(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		root func(t *testing.T) host.Root
	}{
		{"gpu64", func(t *testing.T) host.Root { return generated(t, hosttest.GPUHost64) }},
		{"small", func(t *testing.T) host.Root { return generated(t, hosttest.SmallHost) }},
		{"qemu-q35-iommu-6.1", func(t *testing.T) host.Root {
			return hosttest.Snapshot(t, hosttest.SharedFixture(t, "qemu-q35-iommu-6.1.tar.gz"))
		}},
		{"lab", func(t *testing.T) host.Root {
			p := hosttest.RepoFile(t, "host/testdata/lab-snapshot.tar.gz")
			if p == "" {
				t.Fatal("host/testdata/lab-snapshot.tar.gz is missing")
			}
			return hosttest.Snapshot(t, p)
		}},
		{"odd", oddHost},
		{"no-iommu", func(t *testing.T) host.Root {
			tr := hosttest.New(t)
			tr.NoIOMMU()
			tr.AddPCI(hosttest.PCI{Addr: "0000:00:02.0", Vendor: hosttest.VendorIntel, Device: 0x3e92, Class: 0x030000, Driver: "i915", BootVGA: true, Group: -1})
			tr.Mbochs()
			return tr.Root
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := c.root(t)
			// Scan learns the groups' members from the functions' links or by listing
			// the groups, whichever costs less on the host: both give the golden.
			for _, links := range []bool{true, false} {
				inv, err := host.ScanGroupsFromLinks(root, links)
				if err != nil {
					t.Fatal(err)
				}
				var buf bytes.Buffer
				enc := json.NewEncoder(&buf)
				enc.SetIndent("", "  ")
				if err := enc.Encode(inv); err != nil {
					t.Fatal(err)
				}
				got := bytes.ReplaceAll(buf.Bytes(), []byte(root.Dir()), []byte("ROOT"))
				compareGolden(t, c.name, got)
			}
			if c.name == "gpu64" { // TestScanDevicesEqualReadDevice's, on this tree generated once
				scanEqualsReadDevice(t, root, 512)
			}
		})
	}
}

// generated is a host GenerateHost builds from spec.
func generated(t *testing.T, spec hosttest.HostSpec) host.Root {
	tr := hosttest.New(t)
	tr.GenerateHost(spec)
	return tr.Root
}

// oddHost is a tree with each case Scan handles apart: an mdev parent with an instance (its
// own group), a virtual mdev parent, a GPU sharing its group with a NIC behind a bridge, a
// GPU with VFs one of which has a vendor vGPU type, Intel GVT-g, and bad input (missing and
// garbage attributes, a device gone mid-scan, a dangling virtfn, a bad iommu_group link).
func oddHost(t *testing.T) host.Root {
	tr := hosttest.New(t)
	a100 := tr.DatacenterGPU("0000:40:01.0", "0000:41:00.0", "nvidia", 1)
	tr.A100Mdev(a100)
	parentDir, err := filepath.Rel(tr.Dir(), tr.DevDir(a100))
	if err != nil {
		t.Fatal(err)
	}
	tr.CreateMdev(parentDir, "nvidia-474", "0b1f1a58-8f3c-4a1e-9d3e-111111111111")
	mb := tr.Mbochs()
	tr.CreateMdev(mb, "mbochs-small", "11111111-2222-3333-4444-555555555555")
	tr.ConsumerGPU("0000:00:01.0", "0000:01:00.0", "nouveau")
	tr.GPUWithNIC("0000:00:0b.0", "0000:03:01.0", "0000:03:02.0")
	pf := tr.NvidiaSRIOVGPU("0000:80:01.0", "0000:81:00.0", 0, 3, nil)
	k := hosttest.NewKernel(tr)
	if err := k.Write(t.Context(), tr.Root.PCIDevice(tr.VFAddress(pf, 0), "nvidia", "current_vgpu_type"), "1160"); err != nil {
		t.Fatal(err)
	}
	tr.IntelGVTg()

	// Bad input, as in TestScanBadInput and beyond.
	bad := tr.DatacenterGPU("0000:50:01.0", "0000:51:00.0", "nvidia", 0)
	must(t, os.Remove(filepath.Join(tr.DevDir(bad), "numa_node")))
	must(t, os.Remove(filepath.Join(tr.DevDir(bad), "resource")))
	must(t, os.Remove(filepath.Join(tr.DevDir(bad), "subsystem_vendor")))
	must(t, os.Remove(filepath.Join(tr.DevDir(bad), "uevent"))) // else Scan takes the IDs from there
	must(t, os.Remove(filepath.Join(tr.DevDir(bad), "local_cpulist")))
	must(t, os.Symlink("../../../devices/pci0000:00/0000:00:09.0", filepath.Join(tr.Dir(), "sys/bus/pci/devices/0000:00:09.0")))
	must(t, os.Symlink("nothing", filepath.Join(tr.Dir(), "sys/bus/pci/devices/not-an-address")))
	gone := tr.AddPCI(hosttest.PCI{Addr: "0000:00:03.0", Vendor: 0x1234, Device: 0x1111, Class: 0x030000})
	must(t, os.Remove(filepath.Join(tr.DevDir(gone), "vendor")))
	must(t, os.Remove(filepath.Join(tr.DevDir(gone), "uevent")))
	garbage := tr.AddPCI(hosttest.PCI{Addr: "0000:00:04.0", Vendor: 0x1234, Device: 0x1111, Class: 0x030000})
	must(t, os.WriteFile(filepath.Join(tr.DevDir(garbage), "class"), []byte("zzz\n"), 0o644))
	must(t, os.Remove(filepath.Join(tr.DevDir(garbage), "uevent")))
	odd := tr.AddPCI(hosttest.PCI{Addr: "0000:00:05.0", Vendor: 0x1234, Device: 0x1111, Class: 0x030000, BootVGA: true})
	must(t, os.WriteFile(filepath.Join(tr.DevDir(odd), "numa_node"), []byte("not-a-number\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(tr.DevDir(odd), "resource"), []byte("0x1 0x2\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(tr.DevDir(odd), "sriov_totalvfs"), []byte("4\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(tr.DevDir(odd), "sriov_numvfs"), []byte("2\n"), 0o644))
	must(t, os.Symlink("../0000:00:05.7", filepath.Join(tr.DevDir(odd), "virtfn0")))
	must(t, os.Symlink("../not-a-vf", filepath.Join(tr.DevDir(odd), "virtfn1")))
	must(t, os.MkdirAll(filepath.Join(tr.DevDir(odd), "nvidia"), 0o755))
	must(t, os.WriteFile(filepath.Join(tr.DevDir(odd), "nvidia", "creatable_vgpu_types"), []byte("ID : vGPU Name\n12 : X-1Q\n"), 0o644))
	odd2 := tr.AddPCI(hosttest.PCI{Addr: "0000:00:06.0", Vendor: 0x1234, Device: 0x1111, Class: 0x038000})
	must(t, os.Remove(filepath.Join(tr.DevDir(odd2), "iommu_group")))
	must(t, os.Symlink("../../../kernel/iommu_groups/x", filepath.Join(tr.DevDir(odd2), "iommu_group")))
	must(t, os.Remove(filepath.Join(tr.DevDir(odd2), "driver_override")))
	must(t, os.WriteFile(filepath.Join(tr.DevDir(odd2), "reset_method"), []byte("flr bus\n"), 0o644))
	return tr.Root
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// compareGolden compares got with the pinned inventory name, or pins it with
// -update-scan-golden.
func compareGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	if *updateGolden {
		hosttest.WriteScanGolden(t, name, got)
		return
	}
	if want := hosttest.ReadScanGolden(t, name); !bytes.Equal(got, want) {
		t.Fatalf("Scan's inventory differs from %s %s", hosttest.ScanGoldenPath(t, name), hosttest.FirstDifference(got, want))
	}
}
