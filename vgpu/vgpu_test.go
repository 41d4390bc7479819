package vgpu

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/vgpu-host/vgpu-host/host"
)

var a100 = []Profile{{"nvidia-471", "GRID A100-4C"}, {"nvidia-474", "GRID A100-10C"}, {"nvidia-475", "GRID A100-20C"}}

func TestLookupProfileRules(t *testing.T) {
	for want, id := range map[string]string{
		"nvidia-474": "nvidia-474", "NVIDIA-474": "nvidia-474", // ID, any case
		"GRID A100-4C": "nvidia-471", "grid a100-20c": "nvidia-475", // whole name
		"A100-4C": "nvidia-471", "a100-10c": "nvidia-474", " A100-20C ": "nvidia-475", // short name
		"NVIDIA A100-4C": "nvidia-471", // another vendor prefix, same short name
	} {
		i, err := LookupProfile(a100, want, "on 0000:22:00.0")
		if err != nil || a100[i].ID != id {
			t.Errorf("LookupProfile(%q) = %d, %v; want %s", want, i, err, id)
		}
	}
}

func TestLookupProfileIDBeatsName(t *testing.T) {
	ts := []Profile{{"small", "large"}, {"large", "huge"}}
	if i, err := LookupProfile(ts, "large", ""); err != nil || ts[i].ID != "large" {
		t.Fatalf("got %d %v: a type ID must win over another type's name", i, err)
	}
}

func TestLookupProfileAmbiguousAndMissing(t *testing.T) {
	amb := []Profile{{"nvidia-1", "GRID A100-4C"}, {"nvidia-2", "NVIDIA A100-4C"}}
	_, err := LookupProfile(amb, "A100-4C", "on X")
	if !errors.Is(err, host.ErrInvalid) || !strings.Contains(err.Error(), "nvidia-1 (GRID A100-4C), nvidia-2 (NVIDIA A100-4C)") {
		t.Fatalf("ambiguous: %v", err)
	}
	_, err = LookupProfile(a100, "A100-5C", "on 0000:22:00.0")
	if !errors.Is(err, host.ErrNotFound) || !strings.Contains(err.Error(), "did you mean nvidia-471 (GRID A100-4C)?") ||
		!strings.Contains(err.Error(), "nvidia-475 (GRID A100-20C)") || !strings.Contains(err.Error(), "on 0000:22:00.0") {
		t.Fatalf("missing: %v", err)
	}
	_, err = LookupProfile(a100, "mbochs-large", "")
	if !errors.Is(err, host.ErrNotFound) || strings.Contains(err.Error(), "did you mean") || !strings.Contains(err.Error(), "offered: ") {
		t.Fatalf("far: %v", err)
	}
	if _, err := LookupProfile(nil, "x", ""); !strings.Contains(err.Error(), "no vGPU types are offered") {
		t.Fatalf("none: %v", err)
	}
}

func TestInstanceUUID(t *testing.T) {
	a, b := InstanceUUID("demo", 0), InstanceUUID("demo", 1)
	if a == b || a != InstanceUUID("demo", 0) || a == InstanceUUID("demo2", 0) {
		t.Fatalf("%s %s", a, b)
	}
	// Pinned: changing the scheme changes every VM's instances on every host.
	if a != "2af52898-bf72-5684-a2e9-ca513313e7fd" {
		t.Fatalf("InstanceUUID(demo, 0) = %s, want the UUID mdev create --name demo has always made", a)
	}
	if u, err := ParseUUID(strings.ToUpper(a)); err != nil || u != a {
		t.Fatalf("ParseUUID: %s %v", u, err)
	}
	if _, err := ParseUUID("2af52898"); !errors.Is(err, host.ErrInvalid) {
		t.Fatalf("short uuid: %v", err)
	}
}

func TestShortName(t *testing.T) {
	for in, want := range map[string]string{"GRID A100-4C": "A100-4C", "NVIDIA L40S-8Q": "L40S-8Q", "small": "small", "GRID ": "GRID"} {
		if got := ShortName(in); got != want {
			t.Errorf("ShortName(%q) = %q", in, got)
		}
	}
}

func TestMIGBacking(t *testing.T) {
	for _, c := range []struct{ name, profile, board string }{
		{"NVIDIA A100D-3-40C", "3g.40gb", "A100D"},
		{"GRID A100-1-5C", "1g.5gb", "A100"},
		{"H100-1-10CME", "1g.10gb+me", "H100"},
		{"NVIDIA H100-7-80C", "7g.80gb", "H100"},
		{"A30-2-12C", "2g.12gb", "A30"},
	} {
		p, b, ok := MIGBacking(c.name)
		if !ok || p != c.profile || b != c.board {
			t.Errorf("MIGBacking(%q) = %q, %q, %v; want %q, %q", c.name, p, b, ok, c.profile, c.board)
		}
	}
	for _, name := range []string{"GRID A100-4C", "NVIDIA L40S-8Q", "NVIDIA H100-80C", "mbochs-small", ""} {
		if p, _, ok := MIGBacking(name); ok {
			t.Errorf("MIGBacking(%q) = %q: a time-sliced type taken for MIG-backed", name, p)
		}
	}
}

// TestNamespacesWrittenOut: the namespaces written out as bytes are the ones their comments
// name (changing them would change every derived UUID).
func TestNamespacesWrittenOut(t *testing.T) {
	if want := uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://github.com/vgpu-host/vgpu-host/mdev")); Namespace != want {
		t.Errorf("Namespace = %s, want %s", Namespace, want)
	}
	if want := uuid.MustParse("8a3f6c1e-2b0d-5e4f-9c7a-6d1b0e2f3a45"); domainNamespace != want {
		t.Errorf("domainNamespace = %s, want %s", domainNamespace, want)
	}
}
