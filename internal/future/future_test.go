package future

import (
	"sync"
	"testing"
	"time"
)

func TestGoRunsConcurrently(t *testing.T) {
	release := make(chan struct{})
	v := Go(func() int { <-release; return 7 })
	// The caller goes on while f waits: Go did not run f in the caller's goroutine.
	close(release)
	if got := v.Wait(); got != 7 {
		t.Fatalf("Wait = %d, want 7", got)
	}
	if got := v.Wait(); got != 7 {
		t.Fatalf("second Wait = %d, want 7", got)
	}
}

func TestWaitWaits(t *testing.T) {
	var mu sync.Mutex
	finished := false
	v := Go(func() string {
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		finished = true
		mu.Unlock()
		return "done"
	})
	if got := v.Wait(); got != "done" {
		t.Fatalf("Wait = %q", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if !finished {
		t.Fatal("Wait returned before the computation ended")
	}
}

func TestPanicRaisedInWaiter(t *testing.T) {
	v := Go(func() int { panic("boom") })
	defer func() {
		if r := recover(); r != "boom" {
			t.Fatalf("recovered %v, want the computation's panic", r)
		}
	}()
	v.Wait()
	t.Fatal("Wait returned after a panic")
}

func TestReady(t *testing.T) {
	if got := Ready(3).Wait(); got != 3 {
		t.Fatalf("Ready(3).Wait() = %d", got)
	}
}
