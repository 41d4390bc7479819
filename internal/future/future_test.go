package future

import (
	"runtime"
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

func TestMapInOrderAndConcurrent(t *testing.T) {
	const n = 50
	var mu sync.Mutex
	calls := map[int]int{}
	got := Map(n, func(i int) int {
		mu.Lock()
		calls[i]++
		mu.Unlock()
		return i * i
	})
	if len(got) != n {
		t.Fatalf("len = %d, want %d", len(got), n)
	}
	for i, v := range got {
		if v != i*i || calls[i] != 1 {
			t.Fatalf("result %d = %d after %d calls, want %d after one", i, v, calls[i], i*i)
		}
	}
	if Map(0, func(int) int { t.Fatal("called for n = 0"); return 0 }) == nil {
		t.Fatal("Map(0) = nil, want an empty slice")
	}
}

func TestMapOverlaps(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("one P: Map runs the calls one after another")
	}
	// Two calls that each wait for the other to start end only if they run at once.
	started := make(chan struct{}, 2)
	Map(2, func(int) int {
		started <- struct{}{}
		deadline := time.After(5 * time.Second)
		for len(started) < 2 {
			select {
			case <-deadline:
				t.Error("the other call never started: Map ran them one after another")
				return 0
			default:
				runtime.Gosched()
			}
		}
		return 0
	})
}

func TestMapPanicRaisedAfterAllCalls(t *testing.T) {
	var mu sync.Mutex
	ended := 0
	defer func() {
		if r := recover(); r != "bad 3" {
			t.Fatalf("recovered %v, want bad 3", r)
		}
		mu.Lock()
		defer mu.Unlock()
		if ended != 9 {
			t.Fatalf("%d calls ended before the panic was raised, want the other 9", ended)
		}
	}()
	Map(10, func(i int) int {
		if i == 3 {
			panic("bad 3")
		}
		mu.Lock()
		ended++
		mu.Unlock()
		return i
	})
}
