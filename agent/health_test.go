package agent

import (
	"context"
	"testing"
	"time"
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
