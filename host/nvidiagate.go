package host

import (
	"context"
	"sync"
)

// NVIDIADriver is the name of NVIDIA's kernel driver, as a function's driver link names it.
const NVIDIADriver = "nvidia"

// NVIDIAGate lets this process's own users of the NVIDIA driver's device nodes (/dev/nvidia*:
// each NVML helper it starts holds them open from nvmlInit to its exit) step aside while a
// function moves off or onto the nvidia driver. Moving a GPU off nvidia waits in the kernel
// while any process holds those nodes, so bind refuses it then (CheckHeld), naming the
// holders; without the gate the agent's own Xid watch, which keeps a helper running for good,
// was that holder, and no NVIDIA GPU could be bound through the agent (seen on a real H200,
// 2026-11-27: the agent's vgpu-host-nvml held /dev/nvidiactl, /dev/nvidia0, /dev/nvidia-uvm
// and /dev/nvidia-caps/*).
//
// A user registers with a suspend function that closes its nodes (its helper exits) and
// returns once they are closed, and calls Wait before it opens them again. Pause suspends
// every user and keeps them waiting until its resume; pauses may overlap. The zero gate is
// ready; a nil gate has no users, pauses at once and never waits.
type NVIDIAGate struct {
	mu      sync.Mutex
	users   map[*NVIDIAUser]struct{}
	paused  int
	resumed chan struct{} // closed when the last pause ends; nil while none is on
	moved   chan struct{} // closed when the next pause ends; nil until Moved asks
}

// NVIDIAUser is one registered user of a gate.
type NVIDIAUser struct {
	gate    *NVIDIAGate
	suspend func()
}

// NVIDIANodes is this process's gate: every NVML helper that talks to the real driver
// registers with it (mig/remote), and every bind or unbind of an nvidia function pauses it
// (vfio).
var NVIDIANodes = &NVIDIAGate{}

// Register adds a user whose suspend closes its device nodes, waiting for a call it has in
// progress, and returns once they are closed. A nil gate registers nothing.
func (g *NVIDIAGate) Register(suspend func()) *NVIDIAUser {
	if g == nil {
		return nil
	}
	u := &NVIDIAUser{gate: g, suspend: suspend}
	g.mu.Lock()
	if g.users == nil {
		g.users = map[*NVIDIAUser]struct{}{}
	}
	g.users[u] = struct{}{}
	g.mu.Unlock()
	return u
}

// Unregister removes u (its nodes are closed for good); a nil user is none.
func (u *NVIDIAUser) Unregister() {
	if u == nil {
		return
	}
	u.gate.mu.Lock()
	delete(u.gate.users, u)
	u.gate.mu.Unlock()
}

// Paused reports whether a pause is on.
func (g *NVIDIAGate) Paused() bool {
	if g == nil {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.paused > 0
}

// Wait returns once no pause is on, or with ctx's error when ctx ends first.
func (g *NVIDIAGate) Wait(ctx context.Context) error {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	ch := g.resumed
	g.mu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Moved returns a channel closed when the next pause ends (nil for a nil gate: never): a
// function has moved off or onto the nvidia driver, so NVML, which lists the GPUs it finds
// at its start, may see others now (the agent's Xid watch, stopped for want of a GPU, tries
// again).
func (g *NVIDIAGate) Moved() <-chan struct{} {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.moved == nil {
		g.moved = make(chan struct{})
	}
	return g.moved
}

// Pause suspends every registered user, one after another, and returns when their nodes are
// closed; until resume is called (once), users wait before they open them again. A user
// registers before it first opens its nodes and, before each open, checks Paused under the
// lock its suspend takes (mig/remote.Client): so each pause either suspends it or keeps it
// from opening.
func (g *NVIDIAGate) Pause() (resume func()) { return g.PauseExcept(nil) }

// PauseExcept is Pause that leaves user self running: a MIG mode change made through self's
// helper, which NVIDIA leaves pending while another client holds the GPU ("All daemons holding
// handles on driver modules need to be stopped before MIG enablement", NVIDIA's MIG user
// guide), pauses this process's other users (the agent's Xid watch) for its duration. Self
// must not wait on the gate meanwhile.
func (g *NVIDIAGate) PauseExcept(self *NVIDIAUser) (resume func()) {
	if g == nil {
		return func() {}
	}
	g.mu.Lock()
	g.paused++
	if g.resumed == nil {
		g.resumed = make(chan struct{})
	}
	users := make([]*NVIDIAUser, 0, len(g.users))
	for u := range g.users {
		if u != self {
			users = append(users, u)
		}
	}
	g.mu.Unlock()
	for _, u := range users {
		u.suspend()
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			if g.paused--; g.paused == 0 {
				close(g.resumed)
				g.resumed = nil
				if g.moved != nil {
					close(g.moved)
					g.moved = nil
				}
			}
		})
	}
}
