//go:build fakekernel

package main

import (
	"os"
	"sync"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/internal/clitree"
)

// envFakeKernel makes a binary built with `-tags fakekernel` send its sysfs writes under a fake
// --host-root to hosttest's kernel emulator (the Go tests' withKernel), so that a separate
// process (the agent the browser test of the Cockpit page starts, cockpit/test) binds,
// unbinds and creates mdevs on the lab snapshot as the kernel would. A release build has no
// such hook: it ignores the variable, and never writes anywhere but sysfs.
const envFakeKernel = "VGPU_HOST_FAKE_KERNEL"

// fakeKernel gives env the kernel emulator when VGPU_HOST_FAKE_KERNEL=1.
func fakeKernel(env *clitree.Env) {
	if os.Getenv(envFakeKernel) != "1" {
		return
	}
	var mu sync.Mutex
	kernels := map[string]*hosttest.Kernel{}
	env.HostIO = func(root host.Root) (host.Writer, host.ModuleLoader) {
		mu.Lock()
		defer mu.Unlock()
		k, ok := kernels[root.Dir()]
		if !ok {
			// One emulator per root for the process's life: it knows each function's native
			// driver as it was when the first change came.
			k = hosttest.NewKernel(hosttest.Adopt(hosttest.ProgramTB("vgpu-host (fakekernel)", root.Dir()), root.Dir()))
			kernels[root.Dir()] = k
		}
		return k, k
	}
}
