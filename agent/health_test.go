package agent

import (
	"context"
	"testing"
)

// TestHealthLibvirtUnreachable: on a host without libvirt (a KubeVirt node) /v1/health says
// libvirt is unreachable and why, and the agent stays ready: its work there does not need it.
func TestHealthLibvirtUnreachable(t *testing.T) {
	s, _ := serve(t, &scriptRunner{}, func(s *Server) {
		s.Ready = func(context.Context) error { return nil }
		s.Libvirt = func() string { return "unreachable since 2026-01-01T00:00:00Z: no libvirt socket" }
	})
	var h healthInfo
	if err := (&Client{Socket: s.Socket}).Do(context.Background(), "GET", "/v1/health", nil, &h); err != nil {
		t.Fatalf("health: %v (an unreachable libvirt must not make the agent unready)", err)
	}
	if !h.Ready || h.Libvirt != "unreachable since 2026-01-01T00:00:00Z: no libvirt socket" {
		t.Fatalf("health %+v: want ready, with libvirt unreachable", h)
	}
}
