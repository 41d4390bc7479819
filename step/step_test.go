package step

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
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
		FetchISO{File: "win11.iso", URL: "https://example.com/win11.iso", Checksum: "sha256:00ff"},
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
	if len(seen) != 10 {
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

// A damaged journal entry is refused naming the step, the field and what it holds, as bad
// input (host.ErrInvalid), never read as a zero: an undo of "index": "x" must not act on
// instance 0. Each case damages one field of a well-formed entry.
func TestDecodeRejectsDamagedField(t *testing.T) {
	good := map[Action]struct {
		target string
		params map[string]string
	}{
		ActBindGroup:     {"0000:41:00.0", map[string]string{"functions": "0000:41:00.0,0000:41:00.1"}},
		ActCreateMdev:    {"2af52898-0000-5000-8000-000000000000", map[string]string{"parent": "0000:22:00.0", "type": "nvidia-471", "index": "3"}},
		ActAssignVGPU:    {"0000:41:00.4", map[string]string{"type": "1160", "type_name": "NVIDIA L40S-8Q", "index": "1"}},
		ActCreateOverlay: {"vm-root.qcow2", map[string]string{"pool": "p", "backing": "/img/b.qcow2", "backing_format": "qcow2", "size": "1073741824"}},
		ActCreateBlank:   {"vm-system.qcow2", map[string]string{"pool": "p", "format": "qcow2", "size": "68719476736"}},
	}
	for _, c := range []struct {
		action     Action
		field, bad string // bad "" with missing: the field is deleted
		missing    bool
		says       string
	}{
		{ActBindGroup, "functions", "0000:41:00.0,nonsense", false, `functions "0000:41:00.0,nonsense"`},
		{ActBindGroup, "functions", "", true, "functions is missing"},
		{ActCreateMdev, "index", "x", false, `index "x"`},
		{ActCreateMdev, "index", "-1", false, `index "-1"`},
		{ActCreateMdev, "parent", "", true, "parent is missing"},
		{ActCreateMdev, "type", "", false, `type ""`},
		{ActAssignVGPU, "type", "L40S-8Q", false, `type "L40S-8Q"`},
		{ActAssignVGPU, "type", "", true, "type is missing"},
		{ActAssignVGPU, "index", "1.5", false, `index "1.5"`},
		{ActAssignVGPU, "index", "", true, "index is missing"},
		{ActCreateOverlay, "size", "1G", false, `size "1G"`},
		{ActCreateOverlay, "size", "", true, "size is missing"},
		{ActCreateOverlay, "backing", "", true, "backing is missing"},
		{ActCreateBlank, "size", "-5", false, `size "-5"`},
		{ActCreateBlank, "format", "", true, "format is missing"},
	} {
		g := good[c.action]
		params := map[string]string{}
		for k, v := range g.params {
			params[k] = v
		}
		if c.missing {
			delete(params, c.field)
		} else {
			params[c.field] = c.bad
		}
		s, err := Decode(string(c.action), g.target, params)
		want := "journal step " + string(c.action) + " " + g.target + ": " + c.says
		if err == nil || !errors.Is(err, host.ErrInvalid) || !strings.Contains(err.Error(), want) || s != nil {
			t.Errorf("%s with %s=%q (missing %v): got %v, %v; want an error saying %q", c.action, c.field, c.bad, c.missing, s, err, want)
		}
	}
	for a, g := range good { // the table's own entries are well formed
		if _, err := Decode(string(a), g.target, g.params); err != nil {
			t.Errorf("good %s: %v", a, err)
		}
	}
}
