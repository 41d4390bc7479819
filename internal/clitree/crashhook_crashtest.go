//go:build crashtest

package clitree

import (
	"os"
	"strconv"

	"github.com/vgpu-host/vgpu-host/lifecycle"
)

// crashHook arms apply's crash injection from the environment (crashtest builds only).
func crashHook(o *lifecycle.Options) error {
	s := os.Getenv(envCrashAt)
	if s == "" {
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return usageErr("%s=%q: want a step number from 1", envCrashAt, s)
	}
	o.CrashAt, o.CrashBefore = n, os.Getenv(envCrashBefore) == "1"
	o.Crash = func() { os.Exit(137) }
	return nil
}
