// Package revert is vgpu-host's one way of undoing a multi-step host change that fails
// half-way, in the manner of Incus's revert package: record an undo after each step that
// changed something, and on failure run them newest first.
//
//	rv := revert.New()
//	defer rv.Fail()                 // a panic or an early return undoes too
//	for _, x := range xs {
//		if err := change(x); err != nil {
//			return errors.Join(err, rv.Fail())
//		}
//		rv.Add(func() error { return undo(x) })
//	}
//	rv.Success()                    // keep the changes; the deferred Fail does nothing
//
// A change that must survive the process being killed half-way (apply's) records its steps in
// the ledger's journal instead, and undoes them from there (package step); within one process,
// this stack is the only undo.
package revert

import (
	"errors"
	"fmt"
	"sync"
)

// Reverter collects undo functions. The zero value is ready to use.
type Reverter struct {
	mu   sync.Mutex
	undo []func() error
	done bool
}

// New returns an empty Reverter.
func New() *Reverter { return &Reverter{} }

// Add records the undo of a step just taken.
func (r *Reverter) Add(f func() error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.undo = append(r.undo, f)
}

// Len is the number of undo steps recorded.
func (r *Reverter) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.undo)
}

// Success keeps the changes: a later Fail does nothing.
func (r *Reverter) Success() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.done = true
}

// Fail runs every recorded undo, newest first, each once, and returns their errors joined
// (nil when everything was undone, or after Success). Every undo runs even when an earlier one
// fails, so as much as possible is put back.
func (r *Reverter) Fail() error {
	r.mu.Lock()
	if r.done {
		r.mu.Unlock()
		return nil
	}
	r.done = true
	undo := r.undo
	r.mu.Unlock()
	var errs []error
	for i := len(undo) - 1; i >= 0; i-- {
		if err := undo[i](); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Wrap joins a failure's cause with what its undo could not put back, saying so.
func Wrap(cause, undoErr error) error {
	if undoErr == nil {
		return cause
	}
	return fmt.Errorf("%w; undo also failed, check by hand: %w", cause, undoErr)
}
