// Package future runs a computation in its own goroutine while its caller does other work,
// and hands its result over when the caller needs it.
//
// A command that makes several independent reads of the host (bind's safety checks, the
// handback's check of each function) overlaps them this way: each read is short, but under
// the lab's emulated CPU, or on a host with thousands of processes to search, they add up
// (#32). A panic in the computation is raised again by Wait, in the caller's goroutine, where
// the command's recover reports it as a bug, instead of ending the process from a goroutine
// that nothing recovers in.
package future

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// Value is the result of a computation started by Go.
type Value[T any] struct {
	done  chan struct{}
	v     T
	panic any
}

// Go starts f in a new goroutine and returns its Value.
func Go[T any](f func() T) *Value[T] {
	v := &Value[T]{done: make(chan struct{})}
	go func() {
		defer close(v.done)
		defer func() {
			if r := recover(); r != nil {
				v.panic = r
			}
		}()
		v.v = f()
	}()
	return v
}

// Ready is a Value that holds v already: what a caller with nothing to overlap passes where a
// Value is expected.
func Ready[T any](v T) *Value[T] {
	r := &Value[T]{done: make(chan struct{}), v: v}
	close(r.done)
	return r
}

// Wait waits for the computation to end and returns its result; it panics with the
// computation's panic, if it had one. Every call returns the same result.
func (v *Value[T]) Wait() T {
	<-v.done
	if v.panic != nil {
		panic(v.panic)
	}
	return v.v
}

// Map returns f(0), …, f(n-1), computed by up to GOMAXPROCS goroutines at once, the caller's
// among them (n of 1 starts none). f must be safe to call concurrently. Every call is made
// even when one panics; the first panic is raised again in the caller's goroutine once every
// call has ended.
func Map[T any](n int, f func(i int) T) []T {
	out := make([]T, n)
	workers := min(n, runtime.GOMAXPROCS(0))
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var raised any
	call := func(i int) {
		defer func() {
			if r := recover(); r != nil {
				once.Do(func() { raised = r })
			}
		}()
		out[i] = f(i)
	}
	work := func() {
		for {
			i := int(next.Add(1) - 1)
			if i >= n {
				return
			}
			call(i)
		}
	}
	for range workers - 1 {
		wg.Add(1)
		go func() { defer wg.Done(); work() }()
	}
	work()
	wg.Wait()
	if raised != nil {
		panic(raised)
	}
	return out
}
