package host

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// linkOutTree builds a host root with ordinary in-tree links (a function's devices/ADDR link
// and its iommu_group, as sysfs makes them) and links that lead out of it to a decoy directory
// beside it: an absolute link and one with enough "..", for a function's directory, for its
// attributes, for its iommu_group and for a procfs file. The decoy holds the same names with
// other values (an NVIDIA GPU, IOMMU group 99). It returns the root and the decoy.
func linkOutTree(t *testing.T, walk bool) (Root, string) {
	t.Helper()
	base := t.TempDir()
	decoy := filepath.Join(base, "decoy")
	files := map[string]string{
		// The decoy: what a read that left the root would see.
		"decoy/fn/vendor":                                 "0x10de\n",
		"decoy/fn/class":                                  "0x030200\n",
		"decoy/fn/uevent":                                 "DRIVER=nvidia\nPCI_SLOT_NAME=0000:00:05.0\n",
		"decoy/kernel/iommu_groups/99/devices/.k":         "",
		"decoy/vendor":                                    "0x10de\n",
		"decoy/cpuinfo":                                   "flags\t: vmx\n",
		"decoy/types/name":                                "decoy type\n",
		"decoy/nvidia/current_vgpu_type":                  "4318\n",
		"root/sys/devices/pci0000:00/0000:00:02.0/vendor": "0x1234\n",
		"root/sys/devices/pci0000:00/0000:00:02.0/class":  "0x030000\n",
		"root/sys/devices/pci0000:00/0000:00:02.0/uevent": "DRIVER=bochs-drm\nPCI_SLOT_NAME=0000:00:02.0\n",
		"root/sys/kernel/iommu_groups/1/devices/.k":       "",
		"root/proc/cmdline":                               "quiet\n",
	}
	for p, v := range files {
		full := filepath.Join(base, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := filepath.Join(base, "root")
	in := "sys/devices/pci0000:00/0000:00:02.0"
	links := map[string]string{
		// In the tree, as sysfs links them.
		"sys/bus/pci/devices/0000:00:02.0":               "../../../devices/pci0000:00/0000:00:02.0",
		in + "/iommu_group":                              "../../../kernel/iommu_groups/1",
		"sys/kernel/iommu_groups/1/devices/0000:00:02.0": "../../../../devices/pci0000:00/0000:00:02.0",
		"sys/bus/pci/devices/0000:00:07.0":               "/sys/devices/pci0000:00/0000:00:02.0", // absolute, resolved in the tree
		"sys/bus/pci/devices/0000:00:05.0":               filepath.Join(decoy, "fn"),             // out: absolute
		"sys/bus/pci/devices/0000:00:06.0":               "../../../../../decoy/fn",              // out: relative
		in + "/device":                                   filepath.Join(decoy, "vendor"),         // an attribute out
		in + "/subsystem_vendor":                         "../../../../../decoy/vendor",
		in + "/physfn":                                   filepath.Join(decoy, "fn"), // a directory out, read through
		in + "/nvidia":                                   "../../../../../decoy/nvidia",
		"sys/class/mdev_bus/decoy":                       filepath.Join(decoy),
		"proc/cpuinfo":                                   filepath.Join(decoy, "cpuinfo"),
		"proc/interrupts":                                "../../decoy/cpuinfo",
		"sys/kernel/iommu_groups/1/devices/0000:00:05.0": filepath.Join(decoy, "fn"),
	}
	for p, target := range links {
		full := filepath.Join(r, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, full); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("../kernel/iommu_groups/99", filepath.Join(decoy, "fn", "iommu_group")); err != nil {
		t.Fatal(err)
	}
	root, err := NewRoot(r)
	if err != nil {
		t.Fatal(err)
	}
	root.walk = walk
	return root, decoy
}

// TestReadsStayInRoot: under a --host-root other than "/", every read resolves inside the root,
// as if it were "/": a link in the tree, absolute or with enough "..", to a function's
// directory, an attribute, a directory on the way or a procfs file, never reads this machine's
// files outside it (here a decoy beside the root that holds an NVIDIA GPU). Before, only writes
// and state files stayed inside; a snapshot with such a link showed this machine's device
// under the snapshot's name. Links inside the tree read as before, and an absolute link reads
// the tree's own path (ROOT/sys/...), as a chroot would. Both ways of resolving are checked:
// openat2(2), and the walk kernels before 5.6 fall back to.
func TestReadsStayInRoot(t *testing.T) {
	t.Parallel()
	for _, walk := range []bool{false, true} {
		name := "openat2"
		if walk {
			name = "walk"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			root, decoy := linkOutTree(t, walk)
			dev := func(a string, elem ...string) string {
				return root.PCIDevice(MustParseAddress(a), elem...)
			}
			out := func(what string, v any, err error) {
				t.Helper()
				if err == nil || strings.Contains(strings.ToLower(errString(err)+stringOf(v)), "10de") {
					t.Errorf("%s read out of the root: %v, %v", what, v, err)
				}
			}
			// In the tree: read as before.
			if v, err := root.readAttr(dev("0000:00:02.0", "vendor")); err != nil || v != "0x1234" {
				t.Errorf("in-tree attribute: %q, %v", v, err)
			}
			if v, err := root.readAttr(dev("0000:00:07.0", "vendor")); err != nil || v != "0x1234" {
				t.Errorf("absolute link, resolved in the tree: %q, %v", v, err)
			}
			if g, err := IOMMUGroupID(root, MustParseAddress("0000:00:02.0")); err != nil || g != 1 {
				t.Errorf("in-tree iommu_group: %d, %v", g, err)
			}
			// Out of the tree, each reader.
			v, err := root.readAttr(dev("0000:00:05.0", "vendor"))
			out("readAttr through an absolute directory link", v, err)
			v, err = root.readAttr(dev("0000:00:06.0", "vendor"))
			out("readAttr through a relative directory link", v, err)
			v, err = root.readAttr(dev("0000:00:02.0", "device"))
			out("readAttr of an attribute linked out", v, err)
			v, err = root.readString(dev("0000:00:02.0", "subsystem_vendor"))
			out("readString of an attribute linked out by ..", v, err)
			h, err := root.readHex(dev("0000:00:05.0", "class"))
			out("readHex", h, err)
			b, err := root.ReadHostFile(root.Proc("cpuinfo"), 0)
			out("ReadHostFile of proc/cpuinfo", string(b), err)
			if b, _ := root.ReadHostFile(root.Proc("cpuinfo"), 0); strings.Contains(string(b), "vmx") {
				t.Errorf("proc/cpuinfo read the decoy's")
			}
			if b, _ := root.ReadHostFile(root.Proc("interrupts"), 0); strings.Contains(string(b), "vmx") {
				t.Errorf("proc/interrupts read the decoy's")
			}
			f, err := root.openHostFile(root.Proc("cpuinfo"))
			if err == nil {
				f.Close()
				t.Errorf("openHostFile opened proc/cpuinfo out of the root")
			}
			ents, err := root.ReadDir(dev("0000:00:05.0"))
			if err == nil || len(ents) > 0 {
				t.Errorf("readDir listed the decoy: %v, %v", ents, err)
			}
			if _, err := root.Stat(dev("0000:00:05.0", "vendor")); err == nil {
				t.Errorf("stat found the decoy's vendor")
			}
			if _, err := root.Lstat(dev("0000:00:06.0", "vendor")); err == nil {
				t.Errorf("lstat found the decoy's vendor")
			}
			if root.Exists(dev("0000:00:02.0", "physfn", "vendor")) {
				t.Errorf("exists found the decoy through physfn")
			}
			if l, err := root.Readlink(dev("0000:00:05.0", "iommu_group")); err == nil {
				t.Errorf("readlink read the decoy's iommu_group: %q", l)
			}
			if _, err := IOMMUGroupID(root, MustParseAddress("0000:00:05.0")); err == nil {
				t.Errorf("IOMMUGroupID read the decoy's group")
			}
			// The per-function readers Scan uses, relative to an open directory.
			dd := root.devDir(dev("0000:00:02.0"))
			defer dd.close()
			v, err = dd.str("device")
			out("devDir.str of an attribute linked out", v, err)
			n, err := dd.int("subsystem_vendor")
			out("devDir.int of an attribute linked out by ..", n, err)
			n, err = dd.int("nvidia/current_vgpu_type")
			out("devDir.int through a subdirectory linked out by ..", n, err)
			v, err = dd.linkBase("physfn/iommu_group")
			out("devDir.linkBase through a directory linked out", v, err)
			phys := dd.sub("physfn")
			v, err = phys.str("vendor")
			phys.close()
			out("devDir.sub through a directory linked out", v, err)
			bus, _, err := root.listable(root.Sys("bus", "pci", "devices"))
			if err != nil {
				t.Fatal(err)
			}
			defer bus.close()
			var page [4096]byte
			fb, err := bus.fileIn("0000:00:05.0", "uevent", &page)
			out("the first pass's ADDR/uevent", string(fb), err)
			if fb, err := bus.fileIn("0000:00:02.0", "uevent", &page); err != nil || !strings.Contains(string(fb), "bochs-drm") {
				t.Errorf("the first pass's in-tree ADDR/uevent: %q, %v", fb, err)
			}
			v, err = bus.linkBaseRaw("0000:00:06.0", "iommu_group")
			out("the first pass's ADDR/iommu_group", v, err)
			if v, err := bus.linkBaseRaw("0000:00:02.0", "iommu_group"); err != nil || v != "1" {
				t.Errorf("the first pass's in-tree ADDR/iommu_group: %q, %v", v, err)
			}
			names, err := bus.names("0000:00:05.0")
			if err == nil || len(names) > 0 {
				t.Errorf("devDir.names listed the decoy: %v, %v", names, err)
			}
			// Whole readers: Scan, the group listing, the mdev parents.
			inv, err := Scan(root)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range inv.Devices {
				if d.VendorID == "10de" || d.Driver == "nvidia" {
					t.Errorf("Scan shows the decoy's device as %s: %+v", d.Address, d)
				}
			}
			if g, err := ReadGroup(root, 1); err == nil {
				for _, m := range g.Members {
					if m.Driver == "nvidia" || m.Class == "030200" || m.Class == "0x030200" {
						t.Errorf("ReadGroup shows the decoy as %s", m.Address)
					}
				}
			}
			parents, _, _ := ReadMdevParents(root)
			for _, p := range parents {
				for _, ty := range p.Types {
					if ty.Name == "decoy type" {
						t.Errorf("mdev parent %s read the decoy's types", p.Parent)
					}
				}
			}
			if _, err := os.Stat(decoy); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func stringOf(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case uint32:
		if v == 0x030200 {
			return "10de" // the decoy's class, flagged as the decoy's vendor is
		}
	case int64:
		if v == 0x10de {
			return "10de"
		}
	}
	return ""
}

// TestReadsOutsideRootRefused: a path that is not under the root is never read under it (a
// bug, since every path read under a root is built from it).
func TestReadsOutsideRootRefused(t *testing.T) {
	t.Parallel()
	root, decoy := linkOutTree(t, false)
	if _, err := root.ReadHostFile(filepath.Join(decoy, "cpuinfo"), 0); !errors.Is(err, errNotInRoot) {
		t.Errorf("a path beside the root: %v; want errNotInRoot", err)
	}
	if _, err := root.ReadDir(decoy); !errors.Is(err, errNotInRoot) || errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a directory beside the root: %v; want errNotInRoot", err)
	}
}
