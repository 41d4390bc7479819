package drift

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/vgpu-host/vgpu-host/virt"
)

// Back-off between attempts to (re)open the libvirt connection: it doubles from MinBackoff
// after each failed attempt, up to MaxBackoff. On a host without libvirt (a KubeVirt node,
// whose libvirt runs inside each VM's virt-launcher pod, or a container host) that is one
// attempt every 30 s once settled, and no log line after the first (docs/agent.md).
const (
	MinBackoff = 250 * time.Millisecond
	MaxBackoff = 30 * time.Second
)

// ErrNotConnected is returned (wrapped, with the last open error) by a call made while the
// connection is down and the back-off has not yet allowed another attempt.
var ErrNotConnected = errors.New("not connected to libvirt")

// Conn is a virt.Conn that holds ONE libvirt connection for the agent's life: opened on first
// use (the agent starts before libvirtd, which is ordered after it), kept warm between calls,
// and opened again when a call reports the connection lost (virt.ErrConnection: libvirtd
// restarted, its helper process died). Attempts to open are spaced by an exponential back-off
// from MinBackoff to MaxBackoff, so a libvirtd that is down costs one failed open per back-off,
// not one per call. It logs transitions only: one line when the connection goes down (or
// cannot be opened at all), one when it is back; attempts in between are logged at debug
// level. It is safe for concurrent use; calls share the connection.
type Conn struct {
	open func() (virt.Conn, error)
	uri  string
	log  *slog.Logger

	mu         sync.Mutex
	c          virt.Conn
	lastErr    error
	backoff    time.Duration
	nextTry    time.Time
	reconnects int
	connected  bool      // a connection was opened once
	down       bool      // the last attempt failed or the connection was lost (logged once)
	downSince  time.Time // when it went down
	now        func() time.Time
}

var _ virt.Conn = (*Conn)(nil)

// NewConn returns a warm connection that opens libvirt at uri with open (remote.Open for the
// helper; native.Open in the helper itself; a fake in tests). Nothing is opened until the
// first call or Connect. log may be nil.
func NewConn(uri string, open func() (virt.Conn, error), log *slog.Logger) *Conn {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Conn{open: open, uri: uri, log: log, now: time.Now}
}

// Connect opens the connection now if it is down and the back-off allows (the agent calls it
// at start so the first request finds it warm). It returns the open error, if any.
func (c *Conn) Connect() error {
	_, err := c.get()
	return err
}

// Connected reports whether a connection is held now.
func (c *Conn) Connected() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.c != nil
}

// Reconnects is how many times the connection was opened again after it was lost.
func (c *Conn) Reconnects() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reconnects
}

func (c *Conn) get() (virt.Conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.c != nil {
		return c.c, nil
	}
	if now := c.now(); now.Before(c.nextTry) {
		return nil, fmt.Errorf("libvirt at %s: %w (next attempt in %s): %w", c.uri, ErrNotConnected, c.nextTry.Sub(now).Round(time.Millisecond), c.lastErr)
	}
	conn, err := c.open()
	if err != nil {
		c.backoff = min(max(2*c.backoff, MinBackoff), MaxBackoff)
		c.nextTry = c.now().Add(c.backoff)
		if !c.down {
			c.down, c.downSince = true, c.now()
			c.log.Warn("libvirt: unreachable; retrying with back-off, logged again when it is back", "uri", c.uri, "error", err.Error(),
				"backoff_max", MaxBackoff)
		} else {
			c.log.Debug("libvirt: still unreachable", "uri", c.uri, "error", err.Error(), "backoff", c.backoff)
		}
		c.lastErr = err
		return nil, fmt.Errorf("libvirt at %s: %w: %w", c.uri, ErrNotConnected, err)
	}
	switch {
	case c.connected:
		c.reconnects++
		c.log.Info("libvirt: connected again", "uri", c.uri, "reconnects", c.reconnects, "down_for", c.now().Sub(c.downSince).Round(time.Millisecond))
	case c.down:
		c.log.Info("libvirt: connected", "uri", c.uri, "unreachable_for", c.now().Sub(c.downSince).Round(time.Millisecond))
	default:
		c.log.Info("libvirt: connected", "uri", c.uri)
	}
	c.connected, c.down = true, false
	c.c, c.lastErr, c.backoff, c.nextTry = conn, nil, 0, time.Time{}
	return conn, nil
}

// Status says, for /v1/health, whether libvirt is reachable: "connected", "not connected yet"
// (nothing asked for it), or "unreachable since TIME: ERROR (next attempt in D)".
func (c *Conn) Status() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.c != nil:
		return "connected"
	case !c.down:
		return "not connected yet"
	}
	msg := "unreachable since " + c.downSince.UTC().Format(time.RFC3339)
	if c.lastErr != nil {
		msg += ": " + c.lastErr.Error()
	}
	if d := c.nextTry.Sub(c.now()); d > 0 {
		msg += fmt.Sprintf(" (next attempt in %s)", d.Round(time.Second))
	}
	return msg
}

// lost drops conn after a call reported the connection gone; the next call opens another.
func (c *Conn) lost(conn virt.Conn, err error) {
	c.mu.Lock()
	if c.c != conn {
		c.mu.Unlock()
		return // another caller dropped it already
	}
	c.c, c.lastErr = nil, err
	wasDown := c.down
	c.down, c.downSince = true, c.now()
	c.mu.Unlock()
	if !wasDown {
		c.log.Warn("libvirt: connection lost; reconnecting with back-off, logged again when it is back", "uri", c.uri, "error", err.Error())
	}
	_ = conn.Close()
}

func (c *Conn) do(f func(virt.Conn) error) error {
	conn, err := c.get()
	if err != nil {
		return err
	}
	err = f(conn)
	if errors.Is(err, virt.ErrConnection) {
		c.lost(conn, err)
	}
	return err
}

// URI implements virt.Conn.
func (c *Conn) URI() string { return c.uri }

// Close closes the held connection (a later call opens another).
func (c *Conn) Close() error {
	c.mu.Lock()
	conn := c.c
	c.c = nil
	c.mu.Unlock()
	if conn == nil {
		return nil
	}
	return conn.Close()
}

// VirtTypes implements virt.Conn.
func (c *Conn) VirtTypes(ctx context.Context) (r []string, err error) {
	err = c.do(func(v virt.Conn) (e error) { r, e = v.VirtTypes(ctx); return })
	return
}

// Define implements virt.Conn.
func (c *Conn) Define(ctx context.Context, xml string) (r string, err error) {
	err = c.do(func(v virt.Conn) (e error) { r, e = v.Define(ctx, xml); return })
	return
}

// Start implements virt.Conn.
func (c *Conn) Start(ctx context.Context, name string) error {
	return c.do(func(v virt.Conn) error { return v.Start(ctx, name) })
}

// Shutdown implements virt.Conn.
func (c *Conn) Shutdown(ctx context.Context, name string) error {
	return c.do(func(v virt.Conn) error { return v.Shutdown(ctx, name) })
}

// Destroy implements virt.Conn.
func (c *Conn) Destroy(ctx context.Context, name string) error {
	return c.do(func(v virt.Conn) error { return v.Destroy(ctx, name) })
}

// Undefine implements virt.Conn.
func (c *Conn) Undefine(ctx context.Context, name string) error {
	return c.do(func(v virt.Conn) error { return v.Undefine(ctx, name) })
}

// State implements virt.Conn.
func (c *Conn) State(ctx context.Context, name string) (r virt.State, err error) {
	err = c.do(func(v virt.Conn) (e error) { r, e = v.State(ctx, name); return })
	return
}

// DomainXML implements virt.Conn.
func (c *Conn) DomainXML(ctx context.Context, name string) (r string, err error) {
	err = c.do(func(v virt.Conn) (e error) { r, e = v.DomainXML(ctx, name); return })
	return
}

// ListDomainXMLs implements virt.Conn.
func (c *Conn) ListDomainXMLs(ctx context.Context) (r map[string]string, err error) {
	err = c.do(func(v virt.Conn) (e error) { r, e = v.ListDomainXMLs(ctx); return })
	return
}

// QMP implements virt.Conn.
func (c *Conn) QMP(ctx context.Context, name, command string) (r string, err error) {
	err = c.do(func(v virt.Conn) (e error) { r, e = v.QMP(ctx, name, command); return })
	return
}

// EnsureDirPool implements virt.Conn.
func (c *Conn) EnsureDirPool(ctx context.Context, name, path string) error {
	return c.do(func(v virt.Conn) error { return v.EnsureDirPool(ctx, name, path) })
}

// CreateVolume implements virt.Conn.
func (c *Conn) CreateVolume(ctx context.Context, pool string, vol virt.Volume) error {
	return c.do(func(v virt.Conn) error { return v.CreateVolume(ctx, pool, vol) })
}

// UploadVolume implements virt.Conn.
func (c *Conn) UploadVolume(ctx context.Context, pool, name string, data []byte) error {
	return c.do(func(v virt.Conn) error { return v.UploadVolume(ctx, pool, name, data) })
}

// VolumePath implements virt.Conn.
func (c *Conn) VolumePath(ctx context.Context, pool, name string) (r string, err error) {
	err = c.do(func(v virt.Conn) (e error) { r, e = v.VolumePath(ctx, pool, name); return })
	return
}

// DeleteVolume implements virt.Conn.
func (c *Conn) DeleteVolume(ctx context.Context, pool, name string) error {
	return c.do(func(v virt.Conn) error { return v.DeleteVolume(ctx, pool, name) })
}

var _ virt.EventSource = (*Conn)(nil)

// DomainEvents implements virt.EventSource on the held connection, when it can stream events
// (the helper and the native adapter can; a fake may not: the error says so). The channel
// closes when ctx ends or that connection is lost; subscribe again to follow the next one.
func (c *Conn) DomainEvents(ctx context.Context) (<-chan virt.DomainEvent, error) {
	conn, err := c.get()
	if err != nil {
		return nil, err
	}
	src, ok := conn.(virt.EventSource)
	if !ok {
		return nil, fmt.Errorf("libvirt at %s: %w", c.uri, ErrNoEvents)
	}
	ch, err := src.DomainEvents(ctx)
	if errors.Is(err, virt.ErrConnection) {
		c.lost(conn, err)
	}
	return ch, err
}

// ErrNoEvents is returned by DomainEvents when the connection cannot stream events.
var ErrNoEvents = errors.New("the connection does not stream domain events")

// AttachDevice implements virt.Conn.
func (c *Conn) AttachDevice(ctx context.Context, name, deviceXML string, scope virt.DeviceScope) error {
	return c.do(func(v virt.Conn) error { return v.AttachDevice(ctx, name, deviceXML, scope) })
}

// DetachDevice implements virt.Conn.
func (c *Conn) DetachDevice(ctx context.Context, name, deviceXML string, scope virt.DeviceScope) error {
	return c.do(func(v virt.Conn) error { return v.DetachDevice(ctx, name, deviceXML, scope) })
}

// LiveDomainXML implements virt.Conn.
func (c *Conn) LiveDomainXML(ctx context.Context, name string) (r string, err error) {
	err = c.do(func(v virt.Conn) (e error) { r, e = v.LiveDomainXML(ctx, name); return })
	return
}
