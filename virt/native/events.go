package native

import (
	"context"
	"fmt"
	"sync"

	"libvirt.org/go/libvirt"

	"github.com/vgpu-host/vgpu-host/internal/lazy"
	"github.com/vgpu-host/vgpu-host/virt"
)

// libvirt delivers events only to connections opened after an event loop implementation is
// registered, and only while something runs it: Open registers libvirt's default one once per
// process and runs it in a goroutine (a thread blocked in poll(2) until an event or a
// keepalive is due). It also turns on the connection's keepalive, so a dead libvirtd is noticed.
var eventLoop sync.Once

func startEventLoop() {
	eventLoop.Do(func() {
		if err := libvirt.EventRegisterDefaultImpl(); err != nil {
			return // events stay unavailable; DomainEvents then fails to register
		}
		go func() {
			for {
				if err := libvirt.EventRunDefaultImpl(); err != nil {
					return
				}
			}
		}()
	})
}

var lifecycleNames = lazy.Value[map[libvirt.DomainEventType]string]{New: func() map[libvirt.DomainEventType]string {
	return map[libvirt.DomainEventType]string{
		libvirt.DOMAIN_EVENT_DEFINED:     "defined",
		libvirt.DOMAIN_EVENT_UNDEFINED:   "undefined",
		libvirt.DOMAIN_EVENT_STARTED:     "started",
		libvirt.DOMAIN_EVENT_SUSPENDED:   "suspended",
		libvirt.DOMAIN_EVENT_RESUMED:     "resumed",
		libvirt.DOMAIN_EVENT_STOPPED:     "stopped",
		libvirt.DOMAIN_EVENT_SHUTDOWN:    "shutdown",
		libvirt.DOMAIN_EVENT_PMSUSPENDED: "pmsuspended",
		libvirt.DOMAIN_EVENT_CRASHED:     "crashed",
	}
}}

// DomainEvents implements virt.EventSource: every domain's lifecycle events until ctx ends or
// the connection closes.
func (l *Libvirt) DomainEvents(ctx context.Context) (<-chan virt.DomainEvent, error) {
	ch := make(chan virt.DomainEvent, 256)
	var mu sync.Mutex
	closed := false
	send := func(e virt.DomainEvent) {
		mu.Lock()
		defer mu.Unlock()
		if closed {
			return
		}
		select {
		case ch <- e:
		default: // the receiver is far behind: it looks again anyway
		}
	}
	end := func() {
		mu.Lock()
		defer mu.Unlock()
		if !closed {
			closed = true
			close(ch)
		}
	}
	var once sync.Once
	id, err := l.conn.DomainEventLifecycleRegister(nil, func(_ *libvirt.Connect, d *libvirt.Domain, e *libvirt.DomainEventLifecycle) {
		name, _ := d.GetName()
		ev, ok := lifecycleNames.Get()[e.Event]
		if !ok {
			ev = "other"
		}
		send(virt.DomainEvent{Domain: name, Event: ev, Detail: e.Detail})
	})
	if err != nil {
		return nil, lverr(err, fmt.Sprintf("subscribe to domain events on %s", l.uri))
	}
	// stop deregisters once, from ctx's end or from Close (before the connection goes).
	stop := func() {
		once.Do(func() {
			_ = l.conn.DomainEventDeregister(id)
			end()
		})
	}
	l.subMu.Lock()
	if l.subs == nil {
		l.subs = map[int]func(){}
	}
	l.subN++
	n := l.subN
	l.subs[n] = stop
	l.subMu.Unlock()
	// The connection closing (libvirtd gone, keepalive timeout) ends the stream.
	_ = l.conn.RegisterCloseCallback(func(*libvirt.Connect, libvirt.ConnectCloseReason) { end() })
	go func() {
		<-ctx.Done()
		l.subMu.Lock()
		f, ok := l.subs[n]
		delete(l.subs, n)
		l.subMu.Unlock()
		if ok {
			f()
		}
	}()
	return ch, nil
}

// endSubscriptions ends every event subscription (Close calls it first).
func (l *Libvirt) endSubscriptions() {
	l.subMu.Lock()
	subs := l.subs
	l.subs = nil
	l.subMu.Unlock()
	for _, f := range subs {
		f()
	}
	_ = l.conn.UnregisterCloseCallback()
}
