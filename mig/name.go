package mig

import (
	"fmt"
	"math"
	"strings"
)

// NVML's GPU-instance profile ids (nvml.GPU_INSTANCE_PROFILE_*, go-nvml v0.13.0-1). They are
// repeated here because this package must not import go-nvml (cgo); mig/nvmlmig's tests check
// them against go-nvml's constants.
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
	// ProfileCount is nvml.GPU_INSTANCE_PROFILE_COUNT: ids run from 0 to ProfileCount-1.
	ProfileCount = 17
)

// ProfileSlices is the number of compute slices ("g") of GPU-instance profile id, 0 for an id
// this package does not know.
func ProfileSlices(id int) int {
	switch id {
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

// ProfileName names GPU-instance profile id of memoryMiB on a GPU with deviceMemory bytes the
// way NVIDIA does (nvidia-smi, mig-parted, the GPU operator), following go-nvlib's
// pkg/nvlib/device/mig_profile.go (NewMigProfile, MigProfileInfo.String, getMigMemorySizeGB):
//
//   - "<g>g.<gb>gb": g is the profile's slice count; the compute-instance part "<c>c." is left
//     out because vgpu-host makes one compute instance covering the whole GPU instance (c == g);
//   - gb is the instance's share of the GPU's memory rounded up to an eighth, times the GPU's
//     memory in whole GiB (rounded up), rounded to the nearest integer: 4864 MiB of a 40 GiB
//     A100 is 1/8 → "5gb", 19968 MiB is 4/8 → "20gb";
//   - attributes: "+me" for the REV1 (media extension) profiles, "+me.all" for ALL_ME, "+gfx"
//     for GFX, and "-me" for NO_ME.
func ProfileName(id int, memoryMiB, deviceMemory uint64) (string, error) {
	g := ProfileSlices(id)
	if g == 0 {
		return "", fmt.Errorf("GPU instance profile id %d: unknown to vgpu-host", id)
	}
	if deviceMemory == 0 {
		return "", fmt.Errorf("GPU instance profile id %d: the GPU's memory size is unknown", id)
	}
	suffix := ""
	switch id {
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

// normName is a profile name as compared: trimmed, lower case, and without a "<c>c." prefix
// equal to its "<g>g" ("1c.1g.5gb" is "1g.5gb").
func normName(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	if c, rest, ok := strings.Cut(s, "c."); ok {
		if g, _, ok := strings.Cut(rest, "g."); ok && g == c {
			return rest
		}
	}
	return s
}
