package host_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
)

// labSnapshot unpacks the real-kernel lab's sysfs snapshot (host/testdata): the seed corpora
// of the fuzz targets and the real-kernel cases of the reader tests.
func labSnapshot(tb testing.TB) host.Root {
	tb.Helper()
	p := hosttest.RepoFile(tb, "host/testdata/lab-snapshot.tar.gz")
	if p == "" {
		tb.Fatal("host/testdata/lab-snapshot.tar.gz is missing (make lab-snapshot captures it)")
	}
	return hosttest.Snapshot(tb, p)
}

// FuzzParseAddress: PCI addresses as users, sysfs and state files write them. Invariant: no
// panic; an accepted address prints in canonical form and parses back to itself.
// Seeds: every device name and link target of the lab snapshot's PCI bus.
func FuzzParseAddress(f *testing.F) {
	root := labSnapshot(f)
	ents, err := os.ReadDir(root.Sys("bus", "pci", "devices"))
	if err != nil {
		f.Fatal(err)
	}
	for _, e := range ents {
		f.Add(e.Name())
		if t, err := os.Readlink(root.Sys("bus", "pci", "devices", e.Name())); err == nil {
			f.Add(filepath.Base(filepath.Dir(t)))
		}
		f.Add(strings.TrimPrefix(e.Name(), "0000:"))
	}
	for _, s := range []string{"41:00.0", "0000:41:00.7", "ffff:ff:1f.7", "1:2.3", "0000:41:00.8", "00:20.0", "+0:1:2.3", " 0000:01:00.0", "0x41:00.0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := host.ParseAddress(s)
		if err != nil {
			return
		}
		b, err := host.ParseAddress(a.String())
		if err != nil || b != a {
			t.Fatalf("%q -> %s does not parse back (%v, %v)", s, a, b, err)
		}
		if a.Function > 7 || a.Device > 31 {
			t.Fatalf("%q parsed to an impossible address %+v", s, a)
		}
		var u host.Address
		if err := u.UnmarshalText([]byte(a.String())); err != nil || u != a {
			t.Fatalf("UnmarshalText(%s) = %v, %v", a, u, err)
		}
	})
}

// FuzzParseCreatableVGPUTypes: nvidia/creatable_vgpu_types as the vGPU driver writes it
// (documented layout; no machine here has the driver). Invariant: no panic; every type parsed
// has a name without surrounding space.
func FuzzParseCreatableVGPUTypes(f *testing.F) {
	f.Add("ID    : vGPU Name\n1155  : NVIDIA L40S-1Q\n1156  : NVIDIA L40S-2Q\n")
	f.Add("ID    : vGPU Name\n")
	f.Add("")
	f.Add("1155 : NVIDIA L40S-1Q\nbroken line\n")
	f.Add("ID : vGPU Name\nx : y\n")
	f.Add("  42:NVIDIA H100-1-10C  \r\n43 : NVIDIA H100-2-20C")
	f.Fuzz(func(t *testing.T, s string) {
		types, err := host.ParseCreatableVGPUTypes(s)
		if err == nil && types == nil {
			t.Fatal("nil types without an error")
		}
		for _, ty := range types {
			if ty.Name != strings.TrimSpace(ty.Name) {
				t.Fatalf("name %q not trimmed", ty.Name)
			}
		}
	})
}

// FuzzMdevSupportedTypes: the attribute files of an mdev type (name, description, device_api,
// available_instances) with arbitrary content, read by the host scanner. Invariant: no panic
// and no error for the parent as a whole (a bad attribute is a warning). Seeds: the lab
// snapshot's mbochs types. One fake tree per fuzz worker (making one takes ~50 ms).
func FuzzMdevSupportedTypes(f *testing.F) {
	lab := labSnapshot(f)
	types, _ := filepath.Glob(lab.Sys("devices", "virtual", "*", "*", "mdev_supported_types", "*"))
	for _, td := range types {
		read := func(n string) string { b, _ := os.ReadFile(filepath.Join(td, n)); return string(b) }
		f.Add(read("name"), read("description"), read("device_api"), read("available_instances"))
	}
	if len(types) == 0 {
		f.Fatal("no mdev types in the lab snapshot")
	}
	f.Add("", "", "", "-1")
	f.Add("x\x00y", "\n\n", "vfio-pci\n", "0x7fffffffffffffff")
	f.Add("", "", "", "99999999999999999999")
	tr := hosttest.New(f)
	dir := tr.MdevParentVirtual("fz", []hosttest.MdevType{{ID: "fz-1", Name: "n", Available: 1}})
	td := filepath.Join(tr.Dir(), dir, "mdev_supported_types", "fz-1")
	f.Fuzz(func(t *testing.T, name, desc, api, avail string) {
		for n, v := range map[string]string{"name": name, "description": desc, "device_api": api, "available_instances": avail} {
			if err := os.WriteFile(filepath.Join(td, n), []byte(v), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		ps, _, err := host.ReadMdevParents(tr.Root)
		if err != nil {
			t.Fatalf("one bad type failed the whole scan: %v", err)
		}
		if len(ps) != 1 || len(ps[0].Types) != 1 || ps[0].Types[0].ID != "fz-1" {
			t.Fatalf("parents %+v", ps)
		}
	})
}
