package clitree

// Environment hooks for the crash tests: a binary built with `-tags crashtest` makes apply exit
// hard (code 137, as after kill -9) at the N-th step it takes, after taking it (or before, with
// VGPU_HOST_CRASH_BEFORE=1). A release build has no such hook: it ignores both variables
// (crashhook_release.go), so nobody can make an installed vgpu-host stop half-way on purpose.
const (
	envCrashAt     = "VGPU_HOST_CRASH_AT_STEP"
	envCrashBefore = "VGPU_HOST_CRASH_BEFORE"
)
