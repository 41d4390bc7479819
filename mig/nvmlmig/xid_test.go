package nvmlmig

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/mig/nvmlmig/nvmlfacts"
)

// H200XidFacts writes the real H200 capture with events appended (the device facts stay the
// capture's) and returns its path.
func h200XidFacts(t *testing.T, events string) string {
	t.Helper()
	b, err := os.ReadFile(hosttest.SharedFixture(t, "nvidia-h200/nvml-facts.json"))
	if err != nil {
		t.Fatal(err)
	}
	s := strings.TrimRight(string(b), "\n }")
	p := filepath.Join(t.TempDir(), "nvml-facts.json")
	if err := os.WriteFile(p, []byte(s+"\n  ,\"events\": "+events+"\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// The replay of the real H200 delivers its recorded Xids through nvmlEventSetWait, each no
// earlier than its after_ms; WaitXid names the GPU by the kernel's address and the MIG
// instance when there is one; with nothing due it answers none after the timeout.
func TestWaitXidH200Replay(t *testing.T) {
	f, err := nvmlfacts.Load(h200XidFacts(t, `[{"gpu": 0, "type": "xid", "xid": 79, "after_ms": 300},
		{"gpu": 0, "type": "xid", "xid": 94, "gpu_instance": 1, "compute_instance": 0, "after_ms": 300}]`))
	if err != nil {
		t.Fatal(err)
	}
	s := nvmlfacts.NewServer(f)
	if err := Init(s); err != nil {
		t.Fatal(err)
	}
	b := New(s).(*Backend)
	ctx := context.Background()
	start := time.Now()
	evs, err := b.WaitXid(ctx, 100*time.Millisecond)
	if err != nil || len(evs) != 0 {
		t.Fatalf("before the events are due: %+v %v", evs, err)
	}
	evs, err = b.WaitXid(ctx, 2*time.Second)
	if err != nil || len(evs) != 2 || time.Since(start) < 300*time.Millisecond {
		t.Fatalf("events %+v %v after %v", evs, err, time.Since(start))
	}
	gpu := host.MustParseAddress("0000:00:06.0")
	if evs[0].Address != gpu || evs[0].Xid != 79 || evs[0].GPUInstance != -1 || evs[0].ComputeInstance != -1 {
		t.Errorf("first %+v", evs[0])
	}
	if evs[1].Xid != 94 || evs[1].GPUInstance != 1 || evs[1].ComputeInstance != 0 {
		t.Errorf("second %+v", evs[1])
	}
	if evs, err := b.WaitXid(ctx, 50*time.Millisecond); err != nil || len(evs) != 0 {
		t.Fatalf("delivered twice: %+v %v", evs, err)
	}
	// A bad event list is refused when the capture is loaded.
	if _, err := nvmlfacts.Load(h200XidFacts(t, `[{"gpu": 3, "type": "xid", "xid": 79}]`)); err == nil || !strings.Contains(err.Error(), "gpu 3") {
		t.Fatalf("event of a GPU the capture lacks: %v", err)
	}
}

// go-nvml's own DGX A100 mock as a second source: WaitXid registers every GPU for Xid
// critical errors only, skips one that answers Not Supported, and reads NVML's event data.
func TestWaitXidDGXA100Mock(t *testing.T) {
	s := newDGXA100(t)
	var registered []string
	queue := make(chan nvml.EventData, 4)
	set := &mock.EventSet{
		WaitFunc: func(ms uint32) (nvml.EventData, nvml.Return) {
			select {
			case e := <-queue:
				return e, nvml.SUCCESS
			default:
			}
			select {
			case e := <-queue:
				return e, nvml.SUCCESS
			case <-time.After(time.Duration(ms) * time.Millisecond):
				return nvml.EventData{}, nvml.ERROR_TIMEOUT
			}
		},
		FreeFunc: func() nvml.Return { return nvml.SUCCESS },
	}
	s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return set, nvml.SUCCESS }
	for i, d := range s.Devices {
		d := d.(*dgxa100.Device)
		d.RegisterEventsFunc = func(types uint64, es nvml.EventSet) nvml.Return {
			if i == 7 {
				return nvml.ERROR_NOT_SUPPORTED
			}
			if types != nvml.EventTypeXidCriticalError || es != set {
				t.Errorf("GPU %d registered for %#x on %v", i, types, es)
			}
			registered = append(registered, d.PciBusID)
			return nvml.SUCCESS
		}
	}
	b := New(s).(*Backend)
	queue <- nvml.EventData{Device: s.Devices[2], EventType: nvml.EventTypeXidCriticalError, EventData: 48, GpuInstanceId: noInstance, ComputeInstanceId: noInstance}
	queue <- nvml.EventData{Device: s.Devices[2], EventType: nvml.EventTypeXidCriticalError, EventData: 119, GpuInstanceId: noInstance, ComputeInstanceId: noInstance}
	evs, err := b.WaitXid(context.Background(), time.Second)
	if err != nil || len(evs) != 2 || evs[0].Xid != 48 || evs[1].Xid != 119 {
		t.Fatalf("events %+v %v", evs, err)
	}
	want, _ := s.Devices[2].GetPciInfo()
	if evs[0].Address.String() != BusID(want) {
		t.Errorf("address %s, want %s", evs[0].Address, BusID(want))
	}
	if len(registered) != 7 || slices.Contains(registered, "") {
		t.Errorf("registered %v", registered)
	}
	// No GPU offering Xid events is unsupported.
	s2 := newDGXA100(t)
	s2.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return set, nvml.SUCCESS }
	for _, d := range s2.Devices {
		d.(*dgxa100.Device).RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.ERROR_NOT_SUPPORTED }
	}
	if _, err := New(s2).(*Backend).WaitXid(context.Background(), 10*time.Millisecond); err == nil || !strings.Contains(err.Error(), "no GPU offers") {
		t.Fatalf("no GPU registered: %v", err)
	}
}
