package nvmlfacts

import (
	"fmt"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// Event is one NVML event a replay delivers (nvmlEventSetWait), recorded beside a capture's
// device facts: which GPU (its index in gpus), what (an Xid critical error: type "xid", its
// number in xid), in which MIG instance (gpu_instance and compute_instance; absent for the
// whole GPU, NVML's 0xFFFFFFFF), and how long after the event set was created it happens
// (after_ms). A capture (`vgpu-host-nvml --facts`) records no events: they are added by hand
// or by a test to replay a GPU failing.
//
//	"events": [{"gpu": 0, "type": "xid", "xid": 79, "after_ms": 500}]
type Event struct {
	GPU             int     `json:"gpu"`
	Type            string  `json:"type"`
	Xid             uint64  `json:"xid"`
	GPUInstance     *uint32 `json:"gpu_instance,omitempty"`
	ComputeInstance *uint32 `json:"compute_instance,omitempty"`
	AfterMS         int     `json:"after_ms,omitempty"`
}

// EventTypeXid is Event.Type of an Xid critical error.
const EventTypeXid = "xid"

// checkEvents checks the recorded events against the capture's GPUs.
func (f *Facts) checkEvents() error {
	for i, e := range f.Events {
		if e.Type != EventTypeXid {
			return fmt.Errorf("events[%d]: type %q: the replay delivers %q events only", i, e.Type, EventTypeXid)
		}
		if e.GPU < 0 || e.GPU >= len(f.GPUs) {
			return fmt.Errorf("events[%d]: gpu %d: the capture has GPUs 0 to %d", i, e.GPU, len(f.GPUs)-1)
		}
		if e.Xid == 0 || e.AfterMS < 0 {
			return fmt.Errorf("events[%d]: xid must be positive and after_ms not negative", i)
		}
	}
	return nil
}

// eventSet is one nvmlEventSetCreate of a replay: it delivers, in order and each no earlier
// than its after_ms, the recorded events of the GPUs registered on it for their type.
type eventSet struct {
	mock.EventSet
	s       *Server
	created time.Time
	types   map[*factsDevice]uint64
	next    int
}

func (s *Server) newEventSet() *eventSet {
	es := &eventSet{s: s, created: time.Now(), types: map[*factsDevice]uint64{}}
	es.FreeFunc = func() nvml.Return { return nvml.SUCCESS }
	es.WaitFunc = es.wait
	return es
}

// register is nvmlDeviceRegisterEvents: a replayed GPU offers Xid critical errors (a real H200
// does; the capture does not record nvmlDeviceGetSupportedEventTypes) and nothing else.
func (d *factsDevice) register(types uint64, set nvml.EventSet) nvml.Return {
	es, ok := set.(*eventSet)
	if !ok || es.s != d.s {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	if types&^nvml.EventTypeXidCriticalError != 0 {
		return nvml.ERROR_NOT_SUPPORTED
	}
	d.s.mu.Lock()
	defer d.s.mu.Unlock()
	es.types[d] |= types
	return nvml.SUCCESS
}

// wait is nvmlEventSetWait: the next due event of a registered GPU, else ERROR_TIMEOUT after
// waiting up to timeoutms for one to fall due.
func (es *eventSet) wait(timeoutms uint32) (nvml.EventData, nvml.Return) {
	deadline := time.Now().Add(time.Duration(timeoutms) * time.Millisecond)
	e, d, due, ok := es.peek()
	if !ok {
		time.Sleep(time.Until(deadline))
		return nvml.EventData{}, nvml.ERROR_TIMEOUT
	}
	if wait := time.Until(due); wait > 0 {
		if due.After(deadline) {
			time.Sleep(time.Until(deadline))
			return nvml.EventData{}, nvml.ERROR_TIMEOUT
		}
		time.Sleep(wait)
	}
	es.s.mu.Lock()
	es.next++
	es.s.mu.Unlock()
	out := nvml.EventData{Device: d, EventType: nvml.EventTypeXidCriticalError, EventData: e.Xid,
		GpuInstanceId: 0xFFFFFFFF, ComputeInstanceId: 0xFFFFFFFF}
	if e.GPUInstance != nil {
		out.GpuInstanceId = *e.GPUInstance
	}
	if e.ComputeInstance != nil {
		out.ComputeInstanceId = *e.ComputeInstance
	}
	return out, nvml.SUCCESS
}

// peek returns the next event this set delivers, skipping those of GPUs not registered for it.
func (es *eventSet) peek() (Event, *factsDevice, time.Time, bool) {
	es.s.mu.Lock()
	defer es.s.mu.Unlock()
	for ; es.next < len(es.s.facts.Events); es.next++ {
		e := es.s.facts.Events[es.next]
		d := es.s.devices[e.GPU]
		if es.types[d]&nvml.EventTypeXidCriticalError != 0 {
			return e, d, es.created.Add(time.Duration(e.AfterMS) * time.Millisecond), true
		}
	}
	return Event{}, nil, time.Time{}, false
}
