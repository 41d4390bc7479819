package mdev

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
)

// a100 is an A100 mdev parent with free slots per type ID and the types running on it.
func a100(name string, numa int, free map[string]int, running ...string) Parent {
	types := []Type{{ID: "nvidia-471", Name: "GRID A100-4C"}, {ID: "nvidia-474", Name: "GRID A100-10C"}, {ID: "nvidia-475", Name: "GRID A100-20C"}}
	for i := range types {
		types[i].Available = free[types[i].ID]
	}
	return Parent{Name: name, Backend: BackendMdev, NUMA: numa, Types: types, Running: running}
}

func TestPlace(t *testing.T) {
	l40s := Parent{Name: "0000:c1:00.0", Backend: BackendNvidiaVFIO, NUMA: 1,
		Types: []Type{{ID: "1160", Name: "NVIDIA L40S-8Q", Available: 4}, {ID: "1155", Name: "NVIDIA L40S-1Q", Available: 32}}}
	mbochs := Parent{Name: "mbochs", Backend: BackendMdev, NUMA: -1, Types: []Type{{ID: "mbochs-small", Name: "small", Available: 8}}}
	tests := []struct {
		name    string
		req     Request
		parents []Parent
		want    string // "parent:count,..." or the error text
		err     error
		note    bool
	}{
		{"best fit picks the tightest parent that fits",
			Request{Profile: "A100-4C", Count: 2, NUMA: -1},
			[]Parent{a100("0000:41:00.0", 0, map[string]int{"nvidia-471": 10}), a100("0000:81:00.0", 1, map[string]int{"nvidia-471": 3})},
			"0000:81:00.0:2", nil, false},
		{"exact fit beats a roomier parent",
			Request{Profile: "nvidia-471", Count: 3, NUMA: -1},
			[]Parent{a100("0000:41:00.0", 0, map[string]int{"nvidia-471": 4}), a100("0000:81:00.0", 1, map[string]int{"nvidia-471": 3})},
			"0000:81:00.0:3", nil, false},
		{"split when no single parent fits: roomiest first, then best fit",
			Request{Profile: "A100-20C", Count: 3, NUMA: -1},
			[]Parent{a100("0000:41:00.0", 0, map[string]int{"nvidia-475": 2}), a100("0000:81:00.0", 1, map[string]int{"nvidia-475": 1}), a100("0000:c1:00.0", 1, map[string]int{"nvidia-475": 2})},
			"0000:41:00.0:2,0000:81:00.0:1", nil, false},
		{"NUMA preference wins over best fit",
			Request{Profile: "A100-4C", Count: 1, NUMA: 0},
			[]Parent{a100("0000:41:00.0", 0, map[string]int{"nvidia-471": 10}), a100("0000:81:00.0", 1, map[string]int{"nvidia-471": 1})},
			"0000:41:00.0:1", nil, false},
		{"NUMA node too small: fill it, the rest elsewhere, with a note",
			Request{Profile: "A100-4C", Count: 3, NUMA: 1},
			[]Parent{a100("0000:41:00.0", 0, map[string]int{"nvidia-471": 10}), a100("0000:81:00.0", 1, map[string]int{"nvidia-471": 1})},
			"0000:81:00.0:1,0000:41:00.0:2", nil, true},
		{"refusal lists every parent",
			Request{Profile: "A100-20C", Count: 2, NUMA: -1},
			[]Parent{a100("0000:41:00.0", 0, map[string]int{"nvidia-475": 1}), a100("0000:81:00.0", 1, nil, "nvidia-471")},
			"no parent can host 2× A100-20C: 0000:41:00.0 has 1 free, 0000:81:00.0 runs A100-4C", host.ErrBusy, false},
		{"full parent without a running type",
			Request{Profile: "A100-10C", Count: 1, NUMA: -1},
			[]Parent{a100("0000:41:00.0", 0, nil)},
			"0000:41:00.0 is full (0 free)", host.ErrBusy, false},
		{"nobody offers the profile",
			Request{Profile: "H100-1-10C", Count: 1, NUMA: -1},
			[]Parent{a100("0000:41:00.0", 0, map[string]int{"nvidia-471": 10}), mbochs},
			"0000:41:00.0 does not offer it, mbochs does not offer it", host.ErrNotFound, false},
		{"vendor-VFIO parent by short name",
			Request{Profile: "L40S-8Q", Count: 2, NUMA: -1},
			[]Parent{a100("0000:41:00.0", 0, map[string]int{"nvidia-471": 10}), l40s},
			"0000:c1:00.0:2", nil, false},
		{"vendor-VFIO type by ID, limited to the backend",
			Request{Profile: "1155", Count: 1, NUMA: -1, Backend: BackendNvidiaVFIO},
			[]Parent{mbochs, l40s},
			"0000:c1:00.0:1", nil, false},
		{"mbochs by type ID",
			Request{Profile: "mbochs-small", Count: 8, NUMA: -1},
			[]Parent{mbochs},
			"mbochs:8", nil, false},
		{"no parents at all",
			Request{Profile: "small", Count: 1, NUMA: -1},
			nil,
			"the host has no vGPU parent", host.ErrNotFound, false},
		{"bad request", Request{Profile: "", Count: 1}, nil, "need a profile", host.ErrInvalid, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pl, err := Place(tc.req, tc.parents)
			if tc.err != nil {
				if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("err = %v, want %v containing %q", err, tc.err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			total := 0
			for _, a := range pl.Assignments {
				got = append(got, fmt.Sprintf("%s:%d", a.Parent, a.Count))
				total += a.Count
			}
			if strings.Join(got, ",") != tc.want {
				t.Fatalf("placement %s, want %s", strings.Join(got, ","), tc.want)
			}
			if total != tc.req.Count {
				t.Fatalf("placed %d of %d", total, tc.req.Count)
			}
			if (len(pl.Notes) > 0) != tc.note {
				t.Fatalf("notes %v", pl.Notes)
			}
		})
	}
}

// TestLookupTypeAmbiguous: a type ID wins over names; a whole name over a short one; a name
// that still matches several types is an error listing them (exit 2), never a guess.
func TestLookupTypeAmbiguous(t *testing.T) {
	p := Parent{Name: "0000:41:00.0", Types: []Type{
		{ID: "nvidia-1", Name: "GRID A100-4C"},
		{ID: "nvidia-2", Name: "NVIDIA A100-4C"},
		{ID: "small", Name: "tiny"},
		{ID: "mbochs-small", Name: "small"},
	}}
	for profile, want := range map[string]string{"GRID A100-4C": "nvidia-1", "nvidia a100-4c": "nvidia-2", "NVIDIA-2": "nvidia-2", "small": "small", "tiny": "small"} {
		if ty, err := LookupType(p, profile); err != nil || ty.ID != want {
			t.Errorf("LookupType(%q) = %q, %v; want %s", profile, ty.ID, err, want)
		}
	}
	_, err := LookupType(p, "A100-4C")
	if !errors.Is(err, host.ErrInvalid) || !strings.Contains(err.Error(), "nvidia-1 (GRID A100-4C), nvidia-2 (NVIDIA A100-4C)") {
		t.Fatalf("ambiguous A100-4C: %v", err)
	}
	if _, ok := FindType(p, "A100-4C"); ok {
		t.Fatal("FindType guessed an ambiguous name")
	}
	if _, err := Place(Request{Profile: "A100-4C", Count: 1, NUMA: -1}, []Parent{p}); !errors.Is(err, host.ErrInvalid) {
		t.Fatalf("Place with an ambiguous name: %v", err)
	}
	if _, err := LookupType(p, "H100-1-10C"); !errors.Is(err, host.ErrNotFound) {
		t.Fatalf("unknown type: %v", err)
	}
}
