//go:build !crashtest

package clitree

import "github.com/vgpu-host/vgpu-host/lifecycle"

// crashHook does nothing in a release build: VGPU_HOST_CRASH_AT_STEP is a test-only hook.
func crashHook(*lifecycle.Options) error { return nil }
