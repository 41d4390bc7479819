// Package future runs a computation in its own goroutine while its caller does other work,
// and hands its result over when the caller needs it.
//
// A command that makes independent reads of the host overlaps them this way (bind's search of
// every process's open files runs while it reads the groups, takes its lock and reads its
// ledger): each read is short, but under the lab's emulated CPU, or on a host with thousands
// of processes to search, they add up (#32). A panic in the computation is raised again by
// Wait, in the caller's goroutine, where the command's recover reports it as a bug, instead of
// ending the process from a goroutine that nothing recovers in.
package future

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
