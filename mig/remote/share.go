package remote

import (
	"strings"
	"sync"

	"github.com/vgpu-host/vgpu-host/host"
)

// Shared is one client kept for every Open of the Envs that carry it (Env.Shared): the agent's,
// so that mig show, mig plan and apply, inspect --mig and the MIG state cache served by it pay
// NVML's start (~35 ms on a real H200, where the whole `mig show` took 32 ms through the agent)
// once, not per request. Its client's calls run one at a time, as any client's do.
//
// A shared helper is kept only while it can still answer for the host:
//   - NVML lists the GPUs at its start, so a helper started before a function was bound to
//     nvidia, or unbound from it, past vgpu-host (driverctl, a write to sysfs), would not know of
//     the change. Open compares the functions bound to nvidia under Root with those at the
//     helper's start, and starts a new helper when they differ;
//   - binds and unbinds through vgpu-host already stop it (host.NVIDIANodes) and the next call
//     starts another;
//   - a helper that died is replaced at the next call (Client).
//
// Close stops it for good.
type Shared struct {
	// Root is the host whose nvidia functions are compared (nil: never compared).
	Root *host.Root

	mu     sync.Mutex
	c      *Client
	stamp  string // the functions on nvidia when c's helper started
	closed bool
}

// open returns the shared client, started with e at the first call, and with a new helper when
// the host's nvidia functions changed since the last started.
func (s *Shared) open(e Env) (*Client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return e.open() // the agent is stopping: a client of its own, as without Shared
	}
	stamp := s.nvidiaFunctions()
	if s.c != nil {
		if stamp != s.stamp {
			s.c.suspend() // its next call starts a new helper, which lists the GPUs again
			s.stamp = stamp
		}
		return s.c, nil
	}
	c, err := e.open()
	if err != nil {
		return nil, err
	}
	c.shared = true
	s.c, s.stamp = c, stamp
	return c, nil
}

// nvidiaFunctions names the functions bound to nvidia under Root, "" without a Root.
func (s *Shared) nvidiaFunctions() string {
	if s.Root == nil {
		return ""
	}
	var names []string
	for _, a := range host.DriverFunctions(*s.Root, "nvidia") {
		names = append(names, a.String())
	}
	return strings.Join(names, " ")
}

// Starts is how many helpers the shared client has started (tests).
func (s *Shared) Starts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.c == nil {
		return 0
	}
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	return s.c.starts
}

// Close stops the shared helper; later Opens start clients of their own.
func (s *Shared) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.c == nil {
		return nil
	}
	c := s.c
	s.c = nil
	return c.close()
}
