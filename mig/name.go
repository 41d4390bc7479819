package mig

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/vgpu-host/vgpu-host/host"
)

// NVML's GPU-instance profile indices (nvml.GPU_INSTANCE_PROFILE_*, go-nvml v0.13.0-1): the
// argument of Device.GetGpuInstanceProfileInfo, which says what kind of profile it is (its
// compute slices and its "+me", "-me", "+gfx", "+me.all" attribute). The index is not the
// profile's ID: NVML answers with GpuInstanceProfileInfo.Id, the number nvidia-smi prints as
// "ID" and creating an instance by profile ID takes. On an H200 (driver 580) index 0
// (1_SLICE) has ID 19, index 7 (1_SLICE_REV1, 1g.18gb+me) ID 20, index 9 (1_SLICE_REV2) ID 15,
// index 4 (7_SLICE) ID 0. The indices are repeated here because this package must not import
// go-nvml (cgo); mig/nvmlmig's tests check them against go-nvml's constants.
const (
	Profile1Slice      = 0  // GPU_INSTANCE_PROFILE_1_SLICE
	Profile2Slice      = 1  // GPU_INSTANCE_PROFILE_2_SLICE
	Profile3Slice      = 2  // GPU_INSTANCE_PROFILE_3_SLICE
	Profile4Slice      = 3  // GPU_INSTANCE_PROFILE_4_SLICE
	Profile7Slice      = 4  // GPU_INSTANCE_PROFILE_7_SLICE
	Profile8Slice      = 5  // GPU_INSTANCE_PROFILE_8_SLICE
	Profile6Slice      = 6  // GPU_INSTANCE_PROFILE_6_SLICE
	Profile1SliceRev1  = 7  // GPU_INSTANCE_PROFILE_1_SLICE_REV1 (media extensions: "+me")
	Profile2SliceRev1  = 8  // GPU_INSTANCE_PROFILE_2_SLICE_REV1 ("+me")
	Profile1SliceRev2  = 9  // GPU_INSTANCE_PROFILE_1_SLICE_REV2 (twice the memory: 1g.10gb on an A100-40GB)
	Profile1SliceGfx   = 10 // GPU_INSTANCE_PROFILE_1_SLICE_GFX ("+gfx")
	Profile2SliceGfx   = 11 // GPU_INSTANCE_PROFILE_2_SLICE_GFX
	Profile4SliceGfx   = 12 // GPU_INSTANCE_PROFILE_4_SLICE_GFX
	Profile1SliceNoME  = 13 // GPU_INSTANCE_PROFILE_1_SLICE_NO_ME ("-me")
	Profile2SliceNoME  = 14 // GPU_INSTANCE_PROFILE_2_SLICE_NO_ME
	Profile1SliceAllME = 15 // GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME ("+me.all")
	Profile2SliceAllME = 16 // GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME
	// ProfileCount is nvml.GPU_INSTANCE_PROFILE_COUNT: indices run from 0 to ProfileCount-1.
	ProfileCount = 17
)

// ProfileSlices is the number of compute slices ("g") of the GPU-instance profile at NVML
// profile index, 0 for an index this package does not know.
func ProfileSlices(index int) int {
	switch index {
	case Profile1Slice, Profile1SliceRev1, Profile1SliceRev2, Profile1SliceGfx, Profile1SliceNoME, Profile1SliceAllME:
		return 1
	case Profile2Slice, Profile2SliceRev1, Profile2SliceGfx, Profile2SliceNoME, Profile2SliceAllME:
		return 2
	case Profile3Slice:
		return 3
	case Profile4Slice, Profile4SliceGfx:
		return 4
	case Profile6Slice:
		return 6
	case Profile7Slice:
		return 7
	case Profile8Slice:
		return 8
	}
	return 0
}

// ProfileName names the GPU-instance profile at NVML profile index (not its ID: see the
// constants above) of memoryMiB on a GPU with deviceMemory bytes the way NVIDIA does (nvidia-smi, mig-parted, the GPU operator), following go-nvlib's
// pkg/nvlib/device/mig_profile.go (NewMigProfile, MigProfileInfo.String, getMigMemorySizeGB):
//
//   - "<g>g.<gb>gb": g is the compute slices of the profile's kind (the index); the compute-instance part "<c>c." is left
//     out because vgpu-host makes one compute instance covering the whole GPU instance (c == g);
//   - gb is the instance's share of the GPU's memory rounded up to an eighth, times the GPU's
//     memory in whole GiB (rounded up), rounded to the nearest integer: 4864 MiB of a 40 GiB
//     A100 is 1/8 → "5gb", 19968 MiB is 4/8 → "20gb"; on an H200 (150754820096 bytes, 141
//     GiB rounded up) 16384 MiB is 1/8 → 17.6 → "18gb", 33280 MiB 2/8 → "35gb", 71424 MiB
//     4/8 → 70.5 → "71gb", 143360 MiB 8/8 → "141gb";
//   - attributes: "+me" for the REV1 (media extension) profiles, "+me.all" for ALL_ME, "+gfx"
//     for GFX, and "-me" for NO_ME.
func ProfileName(index int, memoryMiB, deviceMemory uint64) (string, error) {
	g := ProfileSlices(index)
	if g == 0 {
		return "", fmt.Errorf("GPU instance profile index %d: unknown to vgpu-host", index)
	}
	if deviceMemory == 0 {
		return "", fmt.Errorf("GPU instance profile index %d: the GPU's memory size is unknown", index)
	}
	suffix := ""
	switch index {
	case Profile1SliceRev1, Profile2SliceRev1:
		suffix = "+me"
	case Profile1SliceAllME, Profile2SliceAllME:
		suffix = "+me.all"
	case Profile1SliceGfx, Profile2SliceGfx, Profile4SliceGfx:
		suffix = "+gfx"
	case Profile1SliceNoME, Profile2SliceNoME:
		suffix = "-me"
	}
	return fmt.Sprintf("%dg.%dgb%s", g, memoryGB(deviceMemory, memoryMiB), suffix), nil
}

// memoryGB is go-nvlib's getMigMemorySizeGB.
func memoryGB(deviceMemory, memoryMiB uint64) uint64 {
	const eighths = 8
	const mib, gib = 1 << 20, 1 << 30
	frac := float64(memoryMiB) * mib / float64(deviceMemory)
	frac = math.Ceil(frac*eighths) / eighths
	totalGB := float64((deviceMemory + gib - 1) / gib)
	return uint64(math.Round(frac * totalGB))
}

// ProfileRef is a GPU-instance profile as a user names it, parsed by ParseProfile: by name
// (Name set, ID -1) or by the profile ID nvidia-smi prints (Name empty).
type ProfileRef struct {
	// Name is the canonical name: lower case, without "MIG " and without a "<c>c." prefix
	// equal to its "<g>g" ("3g.40gb", "1g.18gb+me").
	Name string
	// ID is the profile ID (GpuInstanceProfileInfo.Id, nvidia-smi's ID column) when the user
	// gave a number, -1 otherwise.
	ID int
	// ComputeSlices is the name's "<g>g", 0 when the profile is named by ID.
	ComputeSlices int
}

// profileName matches NVIDIA's profile name, after normalisation: compute slices, memory in
// GB and an optional attribute ("+me", "-me", "+gfx", "+me.all", and whatever NVIDIA adds in
// the same shape). It is the regular expression
//
//	^([1-8])g\.([0-9]+)gb((?:\+|-)[a-z]+(?:\.[a-z]+)?)?$
//
// matched by hand (TestProfileNameMatchesRegexp holds it to that expression): inspect's MIG
// section parses every profile name, and in a page-fault profile of inspect on the H200
// capture the expression's compile and matches were about 8 of ParseProfile's 20 faults
// (#32; the wall time measured the same within noise). It returns the slices digit, the GB
// digits and the attribute ("" when none).
func profileName(n string) (slices, gb, attr string, ok bool) {
	if len(n) < 6 || n[0] < '1' || n[0] > '8' || n[1] != 'g' || n[2] != '.' {
		return "", "", "", false
	}
	i := 3
	for i < len(n) && n[i] >= '0' && n[i] <= '9' {
		i++
	}
	if i == 3 || !strings.HasPrefix(n[i:], "gb") {
		return "", "", "", false
	}
	slices, gb, rest := n[:1], n[3:i], n[i+2:]
	if rest == "" {
		return slices, gb, "", true
	}
	if rest[0] != '+' && rest[0] != '-' {
		return "", "", "", false
	}
	word, more, dot := strings.Cut(rest[1:], ".")
	if !lowerWord(word) || dot && !lowerWord(more) {
		return "", "", "", false
	}
	return slices, gb, rest, true
}

// lowerWord reports whether s is one or more of a to z.
func lowerWord(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 'a' || s[i] > 'z' {
			return false
		}
	}
	return true
}

// ParseProfile is the one parser of GPU-instance profile names, for every place a user names
// one (mig plan/apply --profiles, host layouts, MIG-backed vGPU types, specs). It accepts
// what NVIDIA's tools and documents print: "3g.40gb", "1g.18gb+me", "MIG 2g.35gb" (nvidia-smi
// mig -lgip's Name column), "1c.1g.10gb" (a compute-instance prefix equal to the slices), in
// any case, and a profile ID ("9", nvidia-smi's ID column). It checks the shape only; whether
// a GPU offers the profile is GPU.LookupProfile's to say. A malformed name wraps host.ErrInvalid.
func ParseProfile(s string) (ProfileRef, error) {
	n := strings.ToLower(strings.TrimSpace(s))
	if rest, ok := strings.CutPrefix(n, "mig "); ok {
		n = strings.TrimSpace(rest)
	}
	if id, err := strconv.Atoi(n); err == nil && id >= 0 {
		return ProfileRef{ID: id}, nil
	}
	if c, rest, ok := strings.Cut(n, "c."); ok {
		if g, _, ok := strings.Cut(rest, "g."); ok && g == c {
			n = rest
		}
	}
	sl, _, _, ok := profileName(n)
	if !ok {
		return ProfileRef{}, fmt.Errorf("MIG profile %q: %w: want a name as nvidia-smi prints it (3g.40gb, 1g.18gb+me, MIG 2g.35gb) or a profile ID (9)", s, host.ErrInvalid)
	}
	return ProfileRef{Name: n, ID: -1, ComputeSlices: int(sl[0] - '0')}, nil
}

// normName is a profile name as compared: ParseProfile's canonical name, or the name trimmed
// and lower-cased when it does not parse.
func normName(s string) string {
	if r, err := ParseProfile(s); err == nil && r.Name != "" {
		return r.Name
	}
	return strings.ToLower(strings.TrimSpace(s))
}
