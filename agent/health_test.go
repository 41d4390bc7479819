package agent

import (
	"context"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
)

// TestHealthLibvirtUnreachable: on a host without libvirt (a KubeVirt node) /v1/health says
// libvirt is unreachable and why, and the agent stays ready: its work there does not need it.
func TestHealthLibvirtUnreachable(t *testing.T) {
	s, _ := serve(t, &scriptRunner{}, func(s *Server) {
		s.Ready = func(context.Context) error { return nil }
		s.Libvirt = func() string { return "unreachable since 2026-01-01T00:00:00Z: no libvirt socket" }
	})
	// Ready runs once the server is up: until it has returned, health says "starting" (503).
	var h healthInfo
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if err = (&Client{Socket: s.Socket}).Do(context.Background(), "GET", "/v1/health", nil, &h); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("health: %v (an unreachable libvirt must not make the agent unready)", err)
	}
	if !h.Ready || h.Libvirt != "unreachable since 2026-01-01T00:00:00Z: no libvirt socket" {
		t.Fatalf("health %+v: want ready, with libvirt unreachable", h)
	}
}

// TestHealthUnhealthyDevices: /v1/health lists the devices whose last check failed and the
// quarantined ones, from the health files the agent's watch keeps, and stays ready.
func TestHealthUnhealthyDevices(t *testing.T) {
	s, _ := serve(t, &scriptRunner{}, func(s *Server) { s.Ready = func(context.Context) error { return nil } })
	gone, quar, ok := host.MustParseAddress("0000:41:00.0"), host.MustParseAddress("0000:61:00.0"), host.MustParseAddress("0000:81:00.0")
	now := time.Now().UTC()
	for _, st := range []*host.HealthState{
		{Address: gone, Last: &host.DeviceHealth{Address: gone, Problems: []host.Problem{{Check: host.HealthGone, Detail: "removed"}}, CheckedAt: now}},
		{Address: ok, Last: &host.DeviceHealth{Address: ok, Healthy: true, CheckedAt: now}},
	} {
		if err := host.SaveHealthState(s.Root, st); err != nil {
			t.Fatal(err)
		}
	}
	if err := host.SaveQuarantine(s.Root, &host.Quarantine{Address: quar, Problems: []host.Problem{{Check: host.HealthXid, Detail: "Xid 79"}}, Since: now}); err != nil {
		t.Fatal(err)
	}
	var h healthInfo
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if err = (&Client{Socket: s.Socket}).Do(context.Background(), "GET", "/v1/health", nil, &h); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil || !h.Ready {
		t.Fatalf("health %+v %v", h, err)
	}
	if len(h.UnhealthyDevices) != 2 || h.UnhealthyDevices[0].Address != gone || h.UnhealthyDevices[0].Quarantined ||
		h.UnhealthyDevices[0].Problems[0].Check != host.HealthGone || h.UnhealthyDevices[1].Address != quar || !h.UnhealthyDevices[1].Quarantined {
		t.Fatalf("unhealthy devices %+v", h.UnhealthyDevices)
	}
}
