package host

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// blocked reports whether ch stays open for d.
func blocked(ch <-chan struct{}, d time.Duration) bool {
	select {
	case <-ch:
		return false
	case <-time.After(d):
		return true
	}
}

// waitDone runs g.Wait(ctx) in a goroutine and returns a channel closed when it returns, and
// its error.
func waitDone(ctx context.Context, g *NVIDIAGate) (<-chan struct{}, *error) {
	done, errp := make(chan struct{}), new(error)
	go func() {
		*errp = g.Wait(ctx)
		close(done)
	}()
	return done, errp
}

// A pause suspends every registered user before it returns, once each, and keeps Wait
// blocked until its resume; overlapping pauses keep it blocked until the last resume; a
// second call of a resume changes nothing; an unregistered user is not suspended.
func TestNVIDIAGatePauseSuspendsAndHolds(t *testing.T) {
	g := &NVIDIAGate{}
	var a, b, gone atomic.Int32
	g.Register(func() { time.Sleep(20 * time.Millisecond); a.Add(1) })
	g.Register(func() { b.Add(1) })
	g.Register(func() { gone.Add(1) }).Unregister()
	if err := g.Wait(context.Background()); err != nil || g.Paused() {
		t.Fatalf("before any pause: Wait %v, Paused %v", err, g.Paused())
	}
	moved := g.Moved()
	resume1 := g.Pause()
	if a.Load() != 1 || b.Load() != 1 || gone.Load() != 0 {
		t.Fatalf("after Pause: suspends a=%d b=%d unregistered=%d; want 1, 1, 0", a.Load(), b.Load(), gone.Load())
	}
	done, errp := waitDone(context.Background(), g)
	if !blocked(done, 50*time.Millisecond) || !g.Paused() {
		t.Fatal("Wait returned during a pause")
	}
	resume2 := g.Pause()
	if a.Load() != 2 || b.Load() != 2 {
		t.Fatalf("a second pause suspends every user again: a=%d b=%d", a.Load(), b.Load())
	}
	resume1()
	resume1() // once only: the second pause is still on
	if !blocked(done, 50*time.Millisecond) {
		t.Fatal("Wait returned while the second pause was on (or a resume counted twice)")
	}
	if !blocked(moved, 0) {
		t.Fatal("Moved closed before the last pause ended")
	}
	resume2()
	if blocked(done, time.Second) || *errp != nil {
		t.Fatalf("Wait after the last resume: still blocked, or %v", *errp)
	}
	if blocked(moved, time.Second) {
		t.Fatal("Moved not closed when the last pause ended")
	}
	if g.Paused() {
		t.Fatal("Paused after every resume")
	}
	if !blocked(g.Moved(), 0) {
		t.Fatal("a new Moved is closed already")
	}
}

// PauseExcept suspends every user but the one it names.
func TestNVIDIAGatePauseExcept(t *testing.T) {
	g := &NVIDIAGate{}
	var mine, other atomic.Int32
	self := g.Register(func() { mine.Add(1) })
	g.Register(func() { other.Add(1) })
	resume := g.PauseExcept(self)
	if mine.Load() != 0 || other.Load() != 1 || !g.Paused() {
		t.Fatalf("PauseExcept: self suspended %d times, the other %d, paused %v", mine.Load(), other.Load(), g.Paused())
	}
	resume()
	if g.Paused() {
		t.Fatal("paused after the resume")
	}
}

// Wait ends with the context's error when the context ends during a pause.
func TestNVIDIAGateWaitEndsWithContext(t *testing.T) {
	g := &NVIDIAGate{}
	defer g.Pause()()
	ctx, cancel := context.WithCancel(context.Background())
	done, errp := waitDone(ctx, g)
	cancel()
	if blocked(done, time.Second) || !errors.Is(*errp, context.Canceled) {
		t.Fatalf("Wait after cancel: blocked, or %v", *errp)
	}
}

// A nil gate has no users: it registers nothing, pauses at once and never waits.
func TestNVIDIAGateNil(t *testing.T) {
	var g *NVIDIAGate
	u := g.Register(func() { t.Error("a nil gate suspended a user") })
	u.Unregister()
	g.Pause()()
	if err := g.Wait(context.Background()); err != nil || g.Paused() || g.Moved() != nil {
		t.Fatalf("nil gate: Wait %v, Paused %v", err, g.Paused())
	}
}
