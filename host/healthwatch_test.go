package host_test

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
)

// watch runs a HealthWatch of tr (fast poll, no periodic full check) and returns its checks.
func watch(t *testing.T, tr *hosttest.Tree) (*host.HealthWatch, <-chan []host.DeviceHealth) {
	t.Helper()
	w := host.NewHealthWatch(tr.Root)
	w.Poll, w.Full = 50*time.Millisecond, time.Hour
	ch := make(chan []host.DeviceHealth, 16)
	w.Checked = func(hs []host.DeviceHealth, err error) {
		if err != nil {
			t.Errorf("check: %v", err)
		}
		ch <- hs
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return w, ch
}

// nextUnhealthy waits up to 5 s (the agent's promise, docs/health.md) for a check that finds
// a unhealthy with the problem check.
func nextUnhealthy(t *testing.T, ch <-chan []host.DeviceHealth, a host.Address, check string) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case hs := <-ch:
			for _, h := range hs {
				if h.Address == a && !h.Healthy && slices.Contains(problemChecks(h), check) {
					return time.Since(start)
				}
			}
		case <-deadline:
			t.Fatalf("no check found %s %s within 5 s", a, check)
		}
	}
}

// The agent's watch sees a function removed from the bus, AER errors rising on another, and
// an Xid, each in its health file within 5 s, on the kernel emulator; it resets and
// quarantines nothing.
func TestHealthWatchWithin5s(t *testing.T) {
	tr, k, gpu, other := healthTree(t)
	w, ch := watch(t, tr)
	first := <-ch
	if len(first) != 2 || !first[0].Healthy || !first[1].Healthy {
		t.Fatalf("first check %+v", first)
	}
	tr.RemoveFunction(gpu)
	took := nextUnhealthy(t, ch, gpu, host.HealthGone)
	t.Logf("remove seen after %v", took)
	if st, _ := host.LoadHealthState(tr.Root, gpu); st.Last == nil || st.Last.Healthy {
		t.Fatalf("health file not updated: %+v", st)
	}
	tr.SetAER(other, 2, 1, 0)
	nextUnhealthy(t, ch, other, host.HealthAERNonFatal)
	w.Xids() <- host.XidEvent{Address: other, Xid: 79, GPUInstance: -1, ComputeInstance: -1, Time: time.Now()}
	nextUnhealthy(t, ch, other, host.HealthXid)
	if len(k.Writes()) != 0 {
		t.Errorf("the watch wrote %v", k.Writes())
	}
	if qs, _ := host.Quarantines(tr.Root); len(qs) != 0 {
		t.Errorf("the watch quarantined %+v", qs)
	}
}

// A fatal Xid fails the GPU's check until a reset clears it; an informational one is counted
// only; a boot after the event clears it too.
func TestXidUntilReset(t *testing.T) {
	tr, k, gpu, _ := healthTree(t)
	now := time.Now().UTC()
	for _, x := range []uint64{13, 79, 13} {
		if err := host.RecordXid(tr.Root, host.XidEvent{Address: gpu, Xid: x, GPUInstance: -1, ComputeInstance: -1, Time: now}); err != nil {
			t.Fatal(err)
		}
	}
	st, _ := host.LoadHealthState(tr.Root, gpu)
	if st.Xid["13"] != 2 || st.Xid["79"] != 1 || len(st.XidPending) != 1 || st.Baseline == nil {
		t.Fatalf("state %+v", st)
	}
	h := host.CheckDevice(tr.Root, gpu, host.CheckOptions{})
	if h.Healthy || !slices.Equal(problemChecks(h), []string{host.HealthXid}) {
		t.Fatalf("check %+v", h)
	}
	// A boot after the event clears it.
	tr.WriteFile("proc/stat", "cpu  1 2 3\nbtime "+strconv.FormatInt(now.Add(time.Minute).Unix(), 10)+"\n")
	if h := host.CheckDevice(tr.Root, gpu, host.CheckOptions{}); !h.Healthy {
		t.Fatalf("after a reboot: %+v", h)
	}
	tr.WriteFile("proc/stat", "btime "+strconv.FormatInt(now.Add(-time.Hour).Unix(), 10)+"\n")
	// A handback resets it (flr) and the check after the reset is clean.
	res, err := host.Handback(context.Background(), tr.Root, k, []host.Released{{Address: gpu, Driver: "vfio-pci"}},
		host.HandbackOptions{Policy: host.HealthPolicy{Reset: host.ResetFLRIfSupported, ResetTimeout: time.Second}, Op: "unbind"})
	if err != nil || !res[0].Health.Healthy || res[0].Quarantined != nil || len(res[0].Resets) != 1 {
		t.Fatalf("handback %+v %v", res, err)
	}
	st, _ = host.LoadHealthState(tr.Root, gpu)
	if len(st.XidPending) != 0 || st.Xid["79"] != 1 || st.LastReset.IsZero() {
		t.Fatalf("after reset %+v", st)
	}
	// Without a reset allowed, the fatal Xid quarantines.
	if err := host.RecordXid(tr.Root, host.XidEvent{Address: gpu, Xid: 48, GPUInstance: 1, ComputeInstance: 0, Time: time.Now().UTC().Add(time.Second)}); err != nil {
		t.Fatal(err)
	}
	res, _ = host.Handback(context.Background(), tr.Root, k, []host.Released{{Address: gpu, Driver: "vfio-pci"}},
		host.HandbackOptions{Policy: host.HealthPolicy{Reset: host.ResetNever}, Op: "destroy vm"})
	if res[0].Quarantined == nil || res[0].Quarantined.Problems[0].Check != host.HealthXid {
		t.Fatalf("not quarantined for Xid 48: %+v", res[0])
	}
}

// BenchmarkHealthPoll is the cost of one fast poll of the agent's watch over eight GPUs
// with their audio functions (what it pays every second).
func BenchmarkHealthPoll(b *testing.B) {
	tr := hosttest.New(b)
	for i := range 8 {
		bridge := "0000:" + strconv.FormatInt(int64(0x40+i*0x10), 16) + ":01.0"
		gpu := "0000:" + strconv.FormatInt(int64(0x41+i*0x10), 16) + ":00.0"
		a := tr.DatacenterGPU(bridge, gpu, "vfio-pci", 0)
		tr.SetAER(a, 0, 0, 0)
		if err := host.RecordBaseline(tr.Root, a, time.Now()); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for b.Loop() {
		host.HealthPollOnce(tr.Root)
	}
}
