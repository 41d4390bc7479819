package domains_test

import (
	"errors"
	"strings"
	"testing"

	"libvirt.org/go/libvirtxml"

	"github.com/vgpu-host/vgpu-host/domains"
	"github.com/vgpu-host/vgpu-host/host"
)

// TestXMLPatchesRender: each kind of patch changes exactly what it names, the result is still a
// typed domain (read back through libvirtxml) and libvirt's schema accepts it (render checks
// with virt-xml-validate, which make test installs).
func TestXMLPatchesRender(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, yaml string
		want, not  []string
	}{
		{"set attribute", "  xmlPatches:\n    - {set: \"/domain/devices/disk[1]/driver/@cache\", value: none}\n",
			[]string{`<driver name="qemu" type="qcow2" cache="none"`}, nil},
		{"set attribute by attribute test", "  xmlPatches:\n    - {set: \"/domain/devices/interface[@type='network']/model/@type\", value: e1000e}\n",
			[]string{`<model type="e1000e">`}, []string{`<model type="virtio">`}},
		{"set text, creating the element", "  xmlPatches:\n    - {set: /domain/on_crash, value: restart}\n",
			[]string{`<on_crash>restart</on_crash>`}, nil},
		{"remove element", "  xmlPatches:\n    - {remove: /domain/devices/memballoon}\n",
			nil, []string{`<memballoon`}},
		{"remove attribute", "  xmlPatches:\n    - {remove: \"/domain/devices/graphics/@listen\"}\n",
			nil, []string{`listen="127.0.0.1"`}},
		{"add fragment", "  xmlPatches:\n    - add: /domain/devices\n      xml: <watchdog model=\"i6300esb\" action=\"reset\"/>\n",
			[]string{`<watchdog model="i6300esb" action="reset">`}, nil},
		{"in order", "  xmlPatches:\n    - add: /domain/devices\n      xml: <watchdog model=\"i6300esb\" action=\"reset\"/>\n    - {set: \"/domain/devices/watchdog/@action\", value: poweroff}\n",
			[]string{`<watchdog model="i6300esb" action="poweroff">`}, nil},
	}
	base := minimal + "  disks: [{image: /img/debian.qcow2, size: 10GiB}]\n"
	plain := render(t, base, "kvm")
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			x := render(t, base+c.yaml, "kvm")
			if x == plain {
				t.Fatalf("the patch changed nothing:\n%s", x)
			}
			for _, w := range c.want {
				if !strings.Contains(x, w) {
					t.Errorf("lacks %s\n%s", w, x)
				}
			}
			for _, n := range c.not {
				if strings.Contains(x, n) {
					t.Errorf("still has %s\n%s", n, x)
				}
			}
		})
	}
}

// TestXMLPatchesInvalid: a patch's own mistakes are spec errors (path and line); mistakes that
// need the document (nothing matches, several match, libvirtxml would drop it) fail the build,
// naming the patch.
func TestXMLPatchesInvalid(t *testing.T) {
	t.Parallel()
	spec := []struct{ name, yaml, want string }{
		{"two ops", "  xmlPatches:\n    - {set: /domain/on_crash, remove: /domain/on_reboot}\n", "spec.xmlPatches[0]: give exactly one of set, remove, add"},
		{"relative", "  xmlPatches:\n    - {set: devices/disk, value: x}\n", "must start at /domain"},
		{"attr not last", "  xmlPatches:\n    - {set: \"/domain/@id/x\", value: x}\n", "an @attribute can only be the last step"},
		{"bad predicate", "  xmlPatches:\n    - {remove: \"/domain/devices/disk[first]\"}\n", "want [N] or [@attr='value']"},
		{"index zero", "  xmlPatches:\n    - {remove: \"/domain/devices/disk[0]\"}\n", "indexes start at 1"},
		{"remove root", "  xmlPatches:\n    - {remove: /domain}\n", "cannot remove /domain itself"},
		{"add bad xml", "  xmlPatches:\n    - {add: /domain/devices, xml: \"<watchdog>\"}\n", "spec.xmlPatches[0]: xml: <watchdog> is not closed"},
		{"add entity", "  xmlPatches:\n    - {add: /domain/devices, xml: \"<!DOCTYPE x [<!ENTITY a 'b'>]><x/>\"}\n", "directives"},
		{"add to attribute", "  xmlPatches:\n    - {add: \"/domain/@type\", xml: \"<x/>\"}\n", "use set"},
		{"owned name", "  xmlPatches:\n    - {set: /domain/name, value: other}\n", "/domain/name is vgpu-host's (metadata.name)"},
		{"owned metadata", "  xmlPatches:\n    - {remove: /domain/metadata}\n", "is vgpu-host's"},
		{"unknown key", "  xmlPatches:\n    - {replace: /domain/on_crash}\n", `unknown field "replace"`},
	}
	for _, c := range spec {
		t.Run(c.name, func(t *testing.T) {
			vm, err := domains.Parse([]byte(minimal + c.yaml))
			if err == nil {
				err = vm.Validate()
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v lacks %q", err, c.want)
			}
		})
	}
	build := []struct{ name, yaml, want string }{
		{"no match", "  xmlPatches:\n    - {remove: /domain/devices/watchdog}\n", "spec.xmlPatches[0] (remove /domain/devices/watchdog): /domain/devices has no <watchdog>"},
		{"ambiguous", "  disks: [{path: /a.raw}, {path: /b.raw}]\n  xmlPatches:\n    - {set: \"/domain/devices/disk/@device\", value: lun}\n", "has 2 <disk> elements: say which"},
		{"index past end", "  xmlPatches:\n    - {remove: \"/domain/devices/disk[3]\"}\n", "has 0 <disk> elements, not 3"},
		{"unmodelled element", "  xmlPatches:\n    - {add: /domain/devices, xml: \"<frobnicator/>\"}\n", "do not model /domain/devices/frobnicator, so it would be dropped"},
		{"unmodelled attribute", "  xmlPatches:\n    - {set: \"/domain/devices/graphics/@colour\", value: blue}\n", "do not model it"},
		{"text on a parent", "  xmlPatches:\n    - {set: /domain/devices, value: x}\n", "has child elements"},
		// covers names what libvirtxml dropped by its path, [N] only among several.
		{"unmodelled element in the second disk", "  disks: [{path: /a.raw}, {path: /b.raw}]\n  xmlPatches:\n    - {add: \"/domain/devices/disk[2]\", xml: \"<frobnicator/>\"}\n",
			"do not model /domain/devices/disk[2]/frobnicator, so it would be dropped"},
		{"unmodelled attribute of an added element", "  xmlPatches:\n    - add: /domain/devices\n      xml: <watchdog model=\"i6300esb\" colour=\"blue\"/>\n",
			"do not model /domain/devices/watchdog/@colour, so it would be dropped"},
	}
	for _, c := range build {
		t.Run(c.name, func(t *testing.T) {
			vm, err := domains.Parse([]byte(minimal + c.yaml))
			if err != nil {
				t.Fatal(err)
			}
			if err := vm.Validate(); err != nil {
				t.Fatal(err)
			}
			alloc, err := domains.Resolve(vm, nil, domains.ResolveOptions{Offline: true, VirtType: "kvm"})
			if err != nil {
				t.Fatal(err)
			}
			_, err = domains.Build(vm, alloc, domains.BuildOptions{})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v lacks %q", err, c.want)
			}
			if !errors.Is(err, host.ErrInvalid) {
				t.Errorf("%v is not ErrInvalid (exit 2)", err)
			}
		})
	}
}

// TestPatchReadBackMatchesUnmarshal: reading a patched domain back by decoding only what the
// patches changed gives the domain that decoding the whole patched document gives, byte for
// byte once marshalled (or the same error), for every kind of patch and where it lands: plain
// structs, lists, types that decode themselves (a disk), elements set into being, several
// patches on one list.
func TestPatchReadBackMatchesUnmarshal(t *testing.T) {
	t.Parallel()
	patches := []string{
		"    - {set: \"/domain/devices/disk[1]/driver/@cache\", value: none}\n",
		"    - {set: \"/domain/devices/interface[@type='network']/model/@type\", value: e1000e}\n",
		"    - {set: /domain/on_crash, value: restart}\n",
		"    - {set: /domain/on_reboot, value: destroy}\n",
		"    - {set: /domain/features/hyperv/relaxed/@state, value: \"on\"}\n",
		"    - {set: /domain/cpu/@mode, value: host-model}\n",
		"    - {set: /domain/os/type/@machine, value: pc-q35-8.2}\n",
		"    - {remove: /domain/devices/memballoon}\n",
		"    - {remove: \"/domain/devices/graphics/@listen\"}\n",
		"    - {remove: /domain/clock}\n",
		"    - {remove: \"/domain/devices/disk[1]/driver\"}\n",
		"    - add: /domain/devices\n      xml: <watchdog model=\"i6300esb\" action=\"reset\"/>\n",
		"    - add: /domain/devices\n      xml: <watchdog model=\"i6300esb\" action=\"reset\"/>\n    - add: /domain/devices\n      xml: <watchdog model=\"itco\" action=\"poweroff\"/>\n",
		"    - add: /domain/devices\n      xml: <watchdog model=\"i6300esb\" action=\"reset\"/>\n    - {set: \"/domain/devices/watchdog/@action\", value: poweroff}\n",
		"    - add: \"/domain/devices/disk[1]\"\n      xml: <serial>abc</serial>\n",
		"    - add: /domain/devices\n      xml: <disk type=\"file\" device=\"cdrom\"><source file=\"/x.iso\"/><target dev=\"sdz\" bus=\"sata\"/></disk>\n",
		"    - add: /domain/devices\n      xml: <disk type=\"file\" device=\"cdrom\"><source file=\"/x.iso\"/><target dev=\"sdz\" bus=\"sata\"/></disk>\n    - {set: \"/domain/devices/disk[1]/driver/@cache\", value: none}\n",
		"    - add: /domain/devices\n      xml: <frobnicator/>\n",
		"    - {set: \"/domain/devices/graphics/@colour\", value: blue}\n",
		"    - {set: \"/domain/@type\", value: qemu}\n",
		"    - add: /domain\n      xml: <devices><watchdog model=\"itco\"/></devices>\n",
		"    - {set: /domain/vcpu, value: \"x\"}\n",
		"    - {set: \"/domain/vcpu/@placement\", value: auto}\n",
	}
	base := minimal + "  disks: [{image: /img/debian.qcow2, size: 10GiB}, {path: /b.raw}]\n"
	for _, p := range append(patches, strings.Join(patches[:12], "")) {
		vm, err := domains.Parse([]byte(base + "  xmlPatches:\n" + p))
		if err != nil {
			t.Fatal(err)
		}
		alloc, err := domains.Resolve(vm, nil, domains.ResolveOptions{Offline: true, VirtType: "kvm"})
		if err != nil {
			t.Fatal(err)
		}
		var out [2]string
		for i, opts := range []domains.BuildOptions{{}, domains.WholeReadBack(domains.BuildOptions{})} {
			x, err := domains.Render(vm, alloc, opts)
			if err != nil {
				x = "error: " + err.Error()
			}
			out[i] = x
		}
		if out[0] != out[1] {
			t.Errorf("patches\n%s: reading back only the changes differs from reading the whole document:\n%s", p, diffAt(out[0], out[1]))
		}
	}
}

// TestBuiltDomainsRoundTrip: every example's domain, marshalled, decoded and marshalled
// again, is what it was: what a patch leaves alone keeps its built value, as a whole round
// trip would give it.
func TestBuiltDomainsRoundTrip(t *testing.T) {
	t.Parallel()
	for _, r := range renderExamples(t) {
		var back libvirtxml.Domain
		if err := back.Unmarshal(r.xml); err != nil {
			t.Fatal(err)
		}
		again, err := back.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if again != r.xml {
			t.Errorf("%s: a round trip through libvirtxml changes it:\n%s", r.name, diffAt(again, r.xml))
		}
	}
}
