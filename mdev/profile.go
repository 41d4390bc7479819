package mdev

import (
	"fmt"
	"strings"

	"github.com/google/uuid"

	"github.com/vgpu-host/vgpu-host/host"
)

// Namespace is the fixed name-based UUID namespace of vgpu-host (UUID v5 of
// "https://github.com/vgpu-host/vgpu-host/mdev" in the URL namespace). Changing it would change
// every derived instance UUID, so it is a constant.
var Namespace = uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://github.com/vgpu-host/vgpu-host/mdev"))

// InstanceUUID returns the UUID of owner's instance number index: a name-based UUID (v5) of
// "OWNER/INDEX" in Namespace. The same VM name and index always give the same UUID, so
// creating instances for a VM twice converges instead of piling up instances.
func InstanceUUID(owner string, index int) string {
	return uuid.NewSHA1(Namespace, []byte(fmt.Sprintf("%s/%d", owner, index))).String()
}

// ParseUUID validates an mdev UUID and returns it in the kernel's lower-case form.
func ParseUUID(s string) (string, error) {
	u, err := uuid.Parse(s)
	if err != nil || len(s) != 36 {
		return "", fmt.Errorf("mdev uuid %q: not a UUID like 83c32df7-d52e-4ec1-9668-1f3c7e4df107", s)
	}
	return u.String(), nil
}

// MatchType reports whether profile names t, by type ID ("nvidia-471", "mbochs-small",
// "1160") or by name: the whole name ("GRID A100-4C", "NVIDIA H100-1-10C") or the name
// without its vendor prefix ("A100-4C", "H100-1-10C", "L40S-8Q"). Case does not matter.
func MatchType(t Type, profile string) bool {
	p := strings.TrimSpace(profile)
	if p == "" {
		return false
	}
	if strings.EqualFold(t.ID, p) || strings.EqualFold(t.Name, p) {
		return true
	}
	return strings.EqualFold(ShortName(t.Name), ShortName(p))
}

// ShortName strips the vendor prefix from a type name: "GRID A100-4C" → "A100-4C",
// "NVIDIA L40S-8Q" → "L40S-8Q". Other names are returned unchanged.
func ShortName(name string) string {
	n := strings.TrimSpace(name)
	for _, p := range []string{"GRID ", "NVIDIA ", "Nvidia "} {
		if len(n) > len(p) && strings.EqualFold(n[:len(p)], p) {
			return strings.TrimSpace(n[len(p):])
		}
	}
	return n
}

// FindType returns the type of p that profile names, when exactly one does (see LookupType).
func FindType(p Parent, profile string) (Type, bool) {
	t, err := LookupType(p, profile)
	return t, err == nil
}

// LookupType returns the type of p that profile names. A type ID matches first ("nvidia-471",
// "1160"); then the whole name ("GRID A100-4C"); then the name without its vendor prefix
// ("A100-4C"). When a step matches several types the profile is ambiguous: host.ErrInvalid,
// listing the candidates, rather than a guess. No match is host.ErrNotFound.
func LookupType(p Parent, profile string) (Type, error) {
	prof := strings.TrimSpace(profile)
	if prof != "" {
		steps := []func(Type) bool{
			func(t Type) bool { return strings.EqualFold(t.ID, prof) },
			func(t Type) bool { return strings.EqualFold(t.Name, prof) },
			func(t Type) bool { return strings.EqualFold(ShortName(t.Name), ShortName(prof)) },
		}
		for _, match := range steps {
			var hits []Type
			for _, t := range p.Types {
				if match(t) {
					hits = append(hits, t)
				}
			}
			switch {
			case len(hits) == 1:
				return hits[0], nil
			case len(hits) > 1:
				return Type{}, fmt.Errorf("vGPU type %q on %s: %w: it names several types: %s (use the type ID)", profile, p.Name, host.ErrInvalid, typeList(hits))
			}
		}
	}
	return Type{}, fmt.Errorf("vGPU type %q on %s: %w", profile, p.Name, host.ErrNotFound)
}

// typeList renders "ID (NAME)" for an error message.
func typeList(ts []Type) string {
	var s []string
	for _, t := range ts {
		if t.Name != "" && t.Name != t.ID {
			s = append(s, fmt.Sprintf("%s (%s)", t.ID, t.Name))
		} else {
			s = append(s, t.ID)
		}
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
