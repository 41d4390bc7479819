package vgpu

import (
	"fmt"
	"strings"

	"github.com/vgpu-host/vgpu-host/internal/lazy"
)

// migTypeName is NVIDIA's name of a MIG-backed vGPU type: BOARD-SLICES-MEMORYC with an optional
// ME (media extensions): "A100-1-5C", "A100D-3-40C", "H100-1-10CME". Time-sliced types have no
// slice count ("A100-4C", "L40S-8Q"). Compiled on first use: at package init it cost every
// vgpu-host command its start (#19).
var migTypeName = lazy.Regexp{Expr: `^([A-Za-z0-9]+)-([0-9])-([0-9]+)C(ME)?$`}

// MIGBacking returns the MIG GPU-instance profile a vGPU type of this name runs on ("3g.40gb"
// for "NVIDIA A100D-3-40C", "1g.10gb+me" for "H100-1-10CME") and the board ("A100D"); ok is
// false for a time-sliced type. NVIDIA's vGPU documentation names every MIG-backed type so: the
// number of compute slices, then the frame buffer in GB, which is the GPU instance's memory.
func MIGBacking(typeName string) (profile, board string, ok bool) {
	m := migTypeName.FindStringSubmatch(ShortName(typeName))
	if m == nil {
		return "", "", false
	}
	profile = fmt.Sprintf("%sg.%sgb", m[2], m[3])
	if m[4] != "" {
		profile += "+me"
	}
	return profile, strings.ToUpper(m[1]), true
}
