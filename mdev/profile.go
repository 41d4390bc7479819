package mdev

import (
	"github.com/vgpu-host/vgpu-host/vgpu"
)

// InstanceUUID is vgpu.InstanceUUID: the UUID of owner's instance number index.
func InstanceUUID(owner string, index int) string { return vgpu.InstanceUUID(owner, index) }

// ParseUUID is vgpu.ParseUUID.
func ParseUUID(s string) (string, error) { return vgpu.ParseUUID(s) }

// profiles returns the (ID, name) pairs of ts for the one profile matcher.
func profiles(ts []Type) []vgpu.Profile {
	out := make([]vgpu.Profile, len(ts))
	for i, t := range ts {
		out[i] = vgpu.Profile{ID: t.ID, Name: t.Name}
	}
	return out
}

// MatchType reports whether profile names t (vgpu.Matches).
func MatchType(t Type, profile string) bool {
	return vgpu.Matches(vgpu.Profile{ID: t.ID, Name: t.Name}, profile)
}

// FindType returns the type of p that profile names, when exactly one does (see LookupType).
func FindType(p Parent, profile string) (Type, bool) {
	t, err := LookupType(p, profile)
	return t, err == nil
}

// LookupType returns the type of p that profile names, by vgpu.LookupProfile's rules (type
// ID, whole name, name without vendor prefix; case-insensitive). Ambiguity is host.ErrInvalid
// listing the candidates; no match is host.ErrNotFound with a did-you-mean.
func LookupType(p Parent, profile string) (Type, error) {
	i, err := vgpu.LookupProfile(profiles(p.Types), profile, "on "+p.Name)
	if err != nil {
		return Type{}, err
	}
	return p.Types[i], nil
}

// typeList renders "ID (NAME)" for an error message.
func typeList(ts []Type) string {
	return vgpu.List(profiles(ts))
}
