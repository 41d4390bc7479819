// Package lazy holds package-level values computed on first use, declared so that they cost a
// binary's start nothing.
//
// Every package initialiser runs at every start of every binary that links the package,
// `vgpu-host --version` included, and on a machine where a page fault is dear each one costs
// about its share of the start (docs/benchmarks.md, start-up: an initialiser's code and data are pages
// touched before main). A package-level Value or Regexp whose fields are constants or a
// function literal that captures nothing is laid out by the compiler as data: no initialiser
// runs for it. sync.OnceValue is a call, so a package-level sync.OnceValue is one, and
// allocates, at every start (internal/archtest: TestNoInitWork).
package lazy

import (
	"regexp"
	"sync"
)

// Value is a value New computes on the first Get; later Gets return the same value. Safe for
// concurrent use. Declare it at package level with New a function literal or a named function:
//
//	var table = lazy.Value[map[string]int]{New: func() map[string]int { return map[string]int{"a": 1} }}
type Value[T any] struct {
	// New computes the value, once.
	New  func() T
	once sync.Once
	v    T
}

// Get returns the value, computing it on the first call.
func (l *Value[T]) Get() T {
	l.once.Do(func() { l.v = l.New() })
	return l.v
}

// Regexp is a regular expression compiled on its first use. Expr must compile (as
// regexp.MustCompile: a bad expression panics on first use, and the tests of the package that
// declares it reach it).
//
//	var sizeRE = lazy.Regexp{Expr: `^([0-9]+)([A-Za-z]*)$`}
type Regexp struct {
	// Expr is the expression (regexp syntax).
	Expr string
	once sync.Once
	re   *regexp.Regexp
}

// Get returns the compiled expression.
func (r *Regexp) Get() *regexp.Regexp {
	r.once.Do(func() { r.re = regexp.MustCompile(r.Expr) })
	return r.re
}

// MatchString is regexp.Regexp.MatchString.
func (r *Regexp) MatchString(s string) bool { return r.Get().MatchString(s) }

// FindStringSubmatch is regexp.Regexp.FindStringSubmatch.
func (r *Regexp) FindStringSubmatch(s string) []string { return r.Get().FindStringSubmatch(s) }
