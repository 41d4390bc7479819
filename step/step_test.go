package step

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
)

// Every step survives the journal: Decode(Action, Target, Params) gives back the same typed
// step, and plan's JSON round-trips through Planned. Path fields are for Text only.
func TestDecodeRoundTrip(t *testing.T) {
	steps := []Step{
		BindGroup{Functions: []host.Address{host.MustParseAddress("0000:41:00.0"), host.MustParseAddress("0000:41:00.1")}},
		CreateMdev{UUID: "2af52898-0000-5000-8000-000000000000", Parent: "0000:22:00.0", Type: "nvidia-471", Index: 3},
		AssignVGPU{VF: host.MustParseAddress("0000:41:00.4"), Type: 1160, TypeName: "NVIDIA L40S-8Q", Index: 1},
		EnsurePool{Pool: "vgpu-host", Path: "/var/lib/vgpu-host/images"},
		CreateOverlay{Volume: "vm-root.qcow2", Pool: "vgpu-host", Backing: "/img/base.qcow2", BackingFormat: "qcow2", Size: 1 << 30},
		CreateBlank{Volume: "vm-system.qcow2", Pool: "vgpu-host", Format: "qcow2", Size: 64 << 30},
		WriteSeed{Volume: "vm-seed.iso", Pool: "vgpu-host"},
		Define{VM: "vm"},
		Start{VM: "vm"},
	}
	seen := map[Action]bool{}
	for _, s := range steps {
		seen[s.Action()] = true
		got, err := Decode(string(s.Action()), s.Target(), s.Params())
		if err != nil || !reflect.DeepEqual(got, s) {
			t.Errorf("Decode(%s) = %#v, %v; want %#v", s.Action(), got, err, s)
		}
		b, err := json.Marshal(Planned{Step: s})
		if err != nil {
			t.Fatal(err)
		}
		var back Planned
		if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back.Step, s) {
			t.Errorf("JSON %s round trip = %#v, %v", b, back.Step, err)
		}
		if s.Text() == "" || s.Target() == "" {
			t.Errorf("%s: empty text or target", s.Action())
		}
	}
	if len(seen) != 9 {
		t.Fatalf("%d actions covered, want every one", len(seen))
	}
}

func TestDecodeRejects(t *testing.T) {
	for _, c := range []struct{ action, target string }{
		{"bind-group", "0000:41:00.0"}, // no functions
		{"assign-vgpu", "not-an-address"},
		{"format-disk", "x"},
		{"create-overlay", "../../etc/passwd"}, // a journal is input: no path out of the pool
		{"write-seed", "a/b"},
		{"create-blank", "../x.qcow2"},
	} {
		if _, err := Decode(c.action, c.target, nil); err == nil {
			t.Errorf("Decode(%s %s) accepted", c.action, c.target)
		}
	}
}

// An old journal entry without the mdev index (written before typed steps) still decodes.
func TestDecodeOldCreateMdev(t *testing.T) {
	s, err := Decode("create-mdev", "u", map[string]string{"parent": "mbochs", "type": "mbochs-small"})
	if err != nil || s.(CreateMdev).Index != 0 || s.(CreateMdev).Parent != "mbochs" {
		t.Fatalf("%#v %v", s, err)
	}
}
