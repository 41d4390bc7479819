package virt

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestOpenAsync: calls wait for the background open and then reach the opened Conn; an open
// that failed is every call's error (and Opened's), and Close then has nothing to close.
func TestOpenAsync(t *testing.T) {
	ctx := context.Background()
	release := make(chan struct{})
	fake := NewFake()
	p := OpenAsync("fake:///", func() (Conn, error) { <-release; return fake, nil })
	got := make(chan error, 1)
	go func() { _, err := p.State(ctx, "vm"); got <- err }()
	select {
	case err := <-got:
		t.Fatalf("State returned before the open ended: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if err := p.Opened(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Opened while opening, with a short context: %v", err)
	}
	close(release)
	if err := <-got; !errors.Is(err, ErrNoDomain) {
		t.Fatalf("State after the open: %v, want the opened Conn's ErrNoDomain", err)
	}
	if p.URI() != "fake:///" || p.Opened(ctx) != nil || p.Close() != nil {
		t.Fatal("an opened Pending: wrong URI, Opened or Close")
	}

	failed := errors.New("no libvirtd")
	q := OpenAsync("x:///", func() (Conn, error) { return nil, failed })
	if _, err := q.Define(ctx, "<domain/>"); !errors.Is(err, failed) {
		t.Fatalf("Define after a failed open: %v", err)
	}
	if err := q.Opened(ctx); !errors.Is(err, failed) {
		t.Fatalf("Opened after a failed open: %v", err)
	}
	if err := q.Close(); err != nil {
		t.Fatalf("Close after a failed open: %v", err)
	}
}
