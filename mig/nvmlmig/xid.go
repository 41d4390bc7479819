package nvmlmig

import (
	"context"
	"fmt"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/vgpu-host/vgpu-host/host"
)

// xidWatch is the NVML event set every GPU that offers Xid critical errors is registered on.
type xidWatch struct {
	set nvml.EventSet
	// skipped names the GPUs that do not offer them, and why.
	skipped []string
}

// noInstance is NVML's GPU or compute instance ID for an event of the whole GPU.
const noInstance = 0xFFFFFFFF

// WaitXid waits up to timeout for NVIDIA Xid critical errors on any GPU and returns those
// seen (none when the time ran out): nvmlEventSetCreate and nvmlDeviceRegisterEvents with
// nvmlEventTypeXidCriticalError on every GPU at the first call, then nvmlEventSetWait. Once
// one event came, the others already queued are collected without waiting. It does not hold
// the MIG lock: MIG calls go on while it waits. An error wrapping host.ErrUnsupported means
// no GPU offers Xid events.
func (b *Backend) WaitXid(ctx context.Context, timeout time.Duration) ([]host.XidEvent, error) {
	b.xmu.Lock()
	defer b.xmu.Unlock()
	if b.xid == nil {
		w, err := b.watchXid()
		if err != nil {
			return nil, err
		}
		b.xid = w
	}
	var out []host.XidEvent
	wait := uint32(timeout.Milliseconds())
	for ctx.Err() == nil {
		e, ret := b.xid.set.Wait(wait)
		switch {
		case ret == nvml.ERROR_TIMEOUT:
			return out, nil
		case ret != nvml.SUCCESS:
			return out, nvErr("wait for NVML events", ret)
		case e.EventType&nvml.EventTypeXidCriticalError == 0:
			continue
		}
		out = append(out, xidEvent(e))
		wait = 0 // collect what is queued already, then answer
	}
	return out, ctx.Err()
}

// xidEvent turns NVML's event into vgpu-host's: the GPU by its PCI address, the instance IDs
// -1 for the whole GPU.
func xidEvent(e nvml.EventData) host.XidEvent {
	x := host.XidEvent{Xid: e.EventData, GPUInstance: -1, ComputeInstance: -1, Time: time.Now().UTC()}
	if e.Device != nil {
		if p, ret := e.Device.GetPciInfo(); ret == nvml.SUCCESS {
			x.Address, _ = host.ParseAddress(BusID(p))
		}
	}
	if e.GpuInstanceId != noInstance {
		x.GPUInstance = int(e.GpuInstanceId)
	}
	if e.ComputeInstanceId != noInstance {
		x.ComputeInstance = int(e.ComputeInstanceId)
	}
	return x
}

// watchXid creates the event set and registers every GPU on it; GPUs that answer Not
// Supported are left out (a GeForce, a GPU in a guest), and none registered is ErrUnsupported.
func (b *Backend) watchXid() (*xidWatch, error) {
	n, ret := b.lib.DeviceGetCount()
	if err := nvErr("count GPUs", ret); err != nil {
		return nil, err
	}
	set, ret := b.lib.EventSetCreate()
	if err := nvErr("create an NVML event set", ret); err != nil {
		return nil, err
	}
	w := &xidWatch{set: set}
	registered := 0
	for i := 0; i < n; i++ {
		dev, ret := b.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			w.skipped = append(w.skipped, fmt.Sprintf("GPU %d: %s", i, ret.Error()))
			continue
		}
		if ret := dev.RegisterEvents(nvml.EventTypeXidCriticalError, set); ret != nvml.SUCCESS {
			w.skipped = append(w.skipped, fmt.Sprintf("GPU %d: register Xid events: %s", i, ret.Error()))
			continue
		}
		registered++
	}
	if registered == 0 {
		set.Free()
		return nil, fmt.Errorf("no GPU offers NVML Xid events (%v): %w", w.skipped, host.ErrUnsupported)
	}
	return w, nil
}
