package lifecycle

import "encoding/json"

// The JSON of plan, apply, destroy, status and verify (docs/apply.md) has arrays that are [] when
// empty, never null: a VM without host devices has "claims": [], an unchanged re-apply
// "steps": []. The results are built in many places (a nil slice is Go's natural empty
// value), so the rule is kept where they are encoded: each MarshalJSON below replaces the nil
// slices of its type with empty ones. Fields tagged omitempty stay omitted when empty.

// MarshalJSON encodes p with claims and steps (and allocation.gpus) as arrays.
func (p VMPlan) MarshalJSON() ([]byte, error) {
	type plain VMPlan
	q := plain(p)
	q.Claims = nonNil(q.Claims)
	q.Steps = nonNil(q.Steps)
	q.Refusals = nonNil(q.Refusals)
	if q.Alloc != nil && q.Alloc.GPUs == nil {
		a := *q.Alloc
		a.GPUs = nonNil(a.GPUs)
		q.Alloc = &a
	}
	return json.Marshal(q)
}

// MarshalJSON encodes r with steps and claims as arrays.
func (r VMApplyResult) MarshalJSON() ([]byte, error) {
	type plain VMApplyResult
	q := plain(r)
	q.Steps = nonNil(q.Steps)
	q.Claims = nonNil(q.Claims)
	return json.Marshal(q)
}

// MarshalJSON encodes r with undone and released as arrays.
func (r DestroyResult) MarshalJSON() ([]byte, error) {
	type plain DestroyResult
	q := plain(r)
	q.Undone = nonNil(q.Undone)
	q.Released = nonNil(q.Released)
	return json.Marshal(q)
}

// MarshalJSON encodes s with claims as an array.
func (s VMStatus) MarshalJSON() ([]byte, error) {
	type plain VMStatus
	q := plain(s)
	q.Claims = nonNil(q.Claims)
	return json.Marshal(q)
}

// MarshalJSON encodes r with checks as an array (a domain with nothing to look for has none).
func (r VerifyResult) MarshalJSON() ([]byte, error) {
	type plain VerifyResult
	q := plain(r)
	q.Checks = nonNil(q.Checks)
	return json.Marshal(q)
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
