//go:build !fakekernel

package main

import "github.com/vgpu-host/vgpu-host/internal/clitree"

// fakeKernel does nothing in a release build: VGPU_HOST_FAKE_KERNEL is a test-only hook.
func fakeKernel(*clitree.Env) {}
