package remote

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/vgpu-host/vgpu-host/virt"
)

// Domain events over the pipe. The wire is request/response, so the stream is a long poll:
// the client's SubscribeEvents makes the helper subscribe (virt.EventSource on its libvirt
// connection) and queue events; each WaitEvents returns what is queued, waiting up to
// WaitArgs.MS for the first one. The server answers every request in its own goroutine, so a
// waiting WaitEvents holds up no other call.
//
//	→ {"id":7,"method":"SubscribeEvents","args":{}}
//	→ {"id":8,"method":"WaitEvents","args":{"MS":2000}}
//	← {"id":8,"reply":[{"domain":"train-01","event":"undefined","detail":0}]}

// WaitArgs bounds a WaitEvents call, in milliseconds.
type WaitArgs struct{ MS int }

// eventPollMS is how long one WaitEvents waits for an event.
const eventPollMS = 2000

// maxQueued bounds the helper's queue of events not yet fetched.
const maxQueued = 1024

// events is the helper's side of a subscription.
type events struct {
	mu     sync.Mutex
	cond   *sync.Cond
	queue  []virt.DomainEvent
	ended  bool // the stream ended (connection lost, helper closing)
	cancel context.CancelFunc
}

// SubscribeEvents subscribes to the libvirt connection's domain events (once per helper).
func (s *Server) SubscribeEvents(_ Empty, _ *Empty) error {
	s.evMu.Lock()
	defer s.evMu.Unlock()
	if s.ev != nil && !s.ev.isEnded() {
		return nil
	}
	c, err := s.c()
	if err != nil {
		return err
	}
	src, ok := c.(virt.EventSource)
	if !ok {
		return toWire(fmt.Errorf("domain events: the connection cannot stream them"))
	}
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := src.DomainEvents(ctx)
	if err != nil {
		cancel()
		return toWire(err)
	}
	ev := &events{cancel: cancel}
	ev.cond = sync.NewCond(&ev.mu)
	s.ev = ev
	go func() {
		for e := range ch {
			ev.mu.Lock()
			if len(ev.queue) < maxQueued {
				ev.queue = append(ev.queue, e)
			}
			ev.cond.Broadcast()
			ev.mu.Unlock()
		}
		ev.end()
	}()
	return nil
}

func (ev *events) end() {
	ev.mu.Lock()
	ev.ended = true
	ev.cond.Broadcast()
	ev.mu.Unlock()
	ev.cancel()
}

func (ev *events) isEnded() bool {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	return ev.ended
}

// WaitEvents returns the queued events, waiting up to a.MS for one. A stream that ended (the
// libvirt connection was lost) is an error wrapping virt.ErrConnection once the queue is empty.
func (s *Server) WaitEvents(a WaitArgs, r *[]virt.DomainEvent) error {
	s.evMu.Lock()
	ev := s.ev
	s.evMu.Unlock()
	if ev == nil {
		return toWire(errors.New("domain events: not subscribed (SubscribeEvents first)"))
	}
	deadline := time.Now().Add(time.Duration(a.MS) * time.Millisecond)
	timer := time.AfterFunc(time.Duration(a.MS)*time.Millisecond, func() {
		ev.mu.Lock()
		ev.cond.Broadcast()
		ev.mu.Unlock()
	})
	defer timer.Stop()
	ev.mu.Lock()
	defer ev.mu.Unlock()
	for len(ev.queue) == 0 && !ev.ended && time.Now().Before(deadline) {
		ev.cond.Wait()
	}
	*r = ev.queue
	ev.queue = nil
	if len(*r) == 0 && ev.ended {
		return toWire(fmt.Errorf("domain events: %w: the stream ended", virt.ErrConnection))
	}
	if *r == nil {
		*r = []virt.DomainEvent{}
	}
	return nil
}

// endEvents ends the subscription (the helper is closing its connection).
func (s *Server) endEvents() {
	s.evMu.Lock()
	ev := s.ev
	s.ev = nil
	s.evMu.Unlock()
	if ev != nil {
		ev.end()
	}
}

// DomainEvents implements virt.EventSource over the helper: it subscribes, then long-polls
// WaitEvents until ctx ends or the helper reports the stream ended.
func (c *Client) DomainEvents(ctx context.Context) (<-chan virt.DomainEvent, error) {
	if err := c.call(ctx, "SubscribeEvents", Empty{}, &Empty{}); err != nil {
		return nil, err
	}
	ch := make(chan virt.DomainEvent, 256)
	go func() {
		defer close(ch)
		for ctx.Err() == nil {
			var evs []virt.DomainEvent
			if err := c.call(ctx, "WaitEvents", WaitArgs{MS: eventPollMS}, &evs); err != nil {
				return
			}
			for _, e := range evs {
				select {
				case ch <- e:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return ch, nil
}
