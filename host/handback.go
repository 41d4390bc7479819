package host

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// ResetAttempt is one reset vgpu-host tried on a function.
type ResetAttempt struct {
	Method   string        `json:"method"`
	OK       bool          `json:"ok"`
	Error    string        `json:"error,omitempty"`
	Duration time.Duration `json:"duration"`
}

// ResetOrder returns the reset methods policy allows for a function that lists methods in
// its reset_method, in the kernel's order (the order reset_method prints them):
// flr-if-supported allows flr and af_flr only; auto allows every method, but device_specific
// only while the vendor-reset module is loaded (without it the kernel's own quirk for AMD
// GPUs does not bring them back); never allows none.
func ResetOrder(root Root, policy string, methods []string) []string {
	var out []string
	for _, m := range methods {
		switch policy {
		case ResetFLRIfSupported:
			if m == "flr" || m == "af_flr" {
				out = append(out, m)
			}
		case ResetAuto:
			if m == "device_specific" && !root.Exists(root.Sys("module", "vendor_reset")) {
				continue
			}
			out = append(out, m)
		}
	}
	return out
}

// ResetFunction resets a with one method, as an admin would by hand, each write bounded by
// timeout (a reset that hangs in the kernel is abandoned with ErrWriteTimeout; the kernel
// may still finish it):
//
//	# echo flr > /sys/bus/pci/devices/0000:41:00.0/reset_method
//	# echo 1 > /sys/bus/pci/devices/0000:41:00.0/reset
//	# echo 'flr bus' > /sys/bus/pci/devices/0000:41:00.0/reset_method   (what it listed before)
//
// Narrowing reset_method first makes the kernel use that method and no other; the list is put
// back afterwards whatever happened.
func ResetFunction(ctx context.Context, root Root, w Writer, a Address, method string, was []string, timeout time.Duration) error {
	write := func(attr, v string) error {
		wctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return w.Write(wctx, root.PCIDevice(a, attr), v)
	}
	if err := write("reset_method", method); err != nil {
		return fmt.Errorf("reset %s with %s: %w", a, method, err)
	}
	err := write("reset", "1")
	if len(was) > 0 {
		if rerr := write("reset_method", strings.Join(was, " ")); rerr != nil && err == nil {
			err = rerr
		}
	}
	if err != nil {
		return fmt.Errorf("reset %s with %s: %w", a, method, err)
	}
	return nil
}

// Released is a function an operation handed back to the host.
type Released struct {
	Address Address
	// Driver is the driver it should now be on ("" any, "-" none), as CheckOptions.Driver.
	Driver string
	// CheckOnly is set for a function that still serves others (an mdev parent with other
	// instances, a PF on its host driver): it is checked, and quarantined when it fails, but
	// never reset, which would take every other user's device down with it.
	CheckOnly bool
}

// HandbackOptions control Handback.
type HandbackOptions struct {
	Policy HealthPolicy
	// Reset resets every function (with every method policy auto allows) even when it checks
	// healthy: the --reset flag.
	Reset bool
	// Op names what released the functions, for the quarantine record ("unbind", "destroy web").
	Op  string
	Now func() time.Time
}

// HandbackResult is what Handback found for one function.
type HandbackResult struct {
	Health DeviceHealth   `json:"health"`
	Resets []ResetAttempt `json:"resets,omitempty"`
	// Quarantined is the record written when the function stayed unhealthy.
	Quarantined *Quarantine `json:"quarantined,omitempty"`
}

// Handback checks every released function before anything can hand it to the next VM: a
// function that fails its check is reset as the policy allows, in the kernel's order, and
// checked again after each reset; one still unhealthy is quarantined (a record under
// /var/lib/vgpu-host/quarantine naming why and when), which plan, apply, bind and layout then
// refuse. The check is recorded in the function's health file either way. Errors are those
// of writing the state files; what the check finds is in the results.
func Handback(ctx context.Context, root Root, w Writer, rel []Released, o HandbackOptions) ([]HandbackResult, error) {
	now := o.Now
	if now == nil {
		now = func() time.Time { return time.Now().UTC() }
	}
	var out []HandbackResult
	var errs []error
	// Each function's health file is read once (its baseline for the check, the rest kept in
	// the record) and the records are written together, the directory synced once.
	states := make([]*HealthState, 0, len(rel))
	for _, r := range rel {
		st, err := LoadHealthState(root, r.Address)
		res := handbackOne(ctx, root, w, r, o, now, st, err)
		if err != nil {
			st = nil // damaged: the check warned of it, and the record starts afresh
		}
		states = append(states, checkedState(root, st, res.Health, res.Resets))
		out = append(out, res)
	}
	if err := saveHealthStates(root, states); err != nil {
		errs = append(errs, fmt.Errorf("record health: %w", err))
	}
	for i, r := range rel {
		res := &out[i]
		if !res.Health.Healthy {
			q := &Quarantine{Address: r.Address, Problems: res.Health.Problems, Since: now(), Op: o.Op, Resets: res.Resets}
			if err := SaveQuarantine(root, q); err != nil {
				errs = append(errs, fmt.Errorf("quarantine %s: %w", r.Address, err))
			} else {
				res.Quarantined = q
			}
		}
	}
	return out, errors.Join(errs...)
}

// handbackOne checks one function and resets it as the options allow.
// st is its health file as read before (stErr: why it could not be).
func handbackOne(ctx context.Context, root Root, w Writer, r Released, o HandbackOptions, now func() time.Time, st *HealthState, stErr error) HandbackResult {
	var resetAt time.Time // a reset clears the fatal Xids before it
	check := func() DeviceHealth {
		return checkDevice(root, r.Address, CheckOptions{Driver: r.Driver, Now: now(), ResetAt: resetAt}, st, stErr)
	}
	res := HandbackResult{Health: check()}
	if res.Health.Healthy && !o.Reset {
		return res
	}
	if r.CheckOnly || slices.ContainsFunc(res.Health.Problems, func(p Problem) bool { return p.Check == HealthGone }) {
		return res // shared, or nothing left to reset
	}
	policy := o.Policy.Reset
	if o.Reset {
		policy = ResetAuto
	}
	was := res.Health.ResetMethods
	order := ResetOrder(root, policy, was)
	if len(order) == 0 {
		if policy != ResetNever {
			res.Health.warn(HealthNoResetMethod, "reset_method lists %q; policy %s allows none of them", strings.Join(was, " "), policy)
		}
		return res
	}
	timeout := o.Policy.ResetTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	var failed []string
	for _, m := range order {
		start := time.Now()
		err := ResetFunction(ctx, root, w, r.Address, m, was, timeout)
		at := ResetAttempt{Method: m, OK: err == nil, Duration: time.Since(start).Round(time.Millisecond)}
		if err != nil {
			at.Error = err.Error()
			failed = append(failed, m+": "+err.Error())
		}
		res.Resets = append(res.Resets, at)
		if err != nil {
			continue
		}
		resetAt = now()
		if res.Health = check(); res.Health.Healthy {
			return res
		}
	}
	if len(failed) == len(order) {
		res.Health.fail(HealthResetFailed, "every reset failed: %s", strings.Join(failed, "; "))
	}
	return res
}

// recordCheck stores a check as the function's last and moves the AER baseline to the counts
// seen, so the next check judges what rose since this one (a quarantine record keeps the
// evidence). A healthy function with no baseline yet gets one.
func recordCheck(root Root, h DeviceHealth, resets []ResetAttempt) error {
	st, err := LoadHealthState(root, h.Address)
	if err != nil {
		st = nil
	}
	if err := saveHealthStates(root, []*HealthState{checkedState(root, st, h, resets)}); err != nil {
		return fmt.Errorf("record health of %s: %w", h.Address, err)
	}
	return nil
}

// checkedState is st (the function's health file as read; nil for none) with check h and its
// resets recorded, as recordCheck stores it.
func checkedState(root Root, st *HealthState, h DeviceHealth, resets []ResetAttempt) *HealthState {
	if st == nil {
		st = &HealthState{Address: h.Address}
	}
	st.Last = &h
	switch {
	case st.Baseline == nil && h.Healthy:
		if b, err := BaselineOf(root, h.Address, h.CheckedAt); err == nil {
			st.Baseline = &b
		}
	case st.Baseline != nil && h.AER != nil:
		st.Baseline.AER = *h.AER
	}
	for _, r := range resets {
		if r.OK {
			if st.Resets == nil {
				st.Resets = map[string]int{}
			}
			st.Resets[r.Method]++
			st.LastReset = h.CheckedAt
		}
	}
	// Fatal Xids a reset or a reboot cleared are kept no longer (their count stays). The boot
	// time (/proc/stat, which the kernel formats with every IRQ's count) is read only when
	// there is one to judge.
	if len(st.XidPending) > 0 {
		boot, _ := BootTime(root)
		st.XidPending = slices.DeleteFunc(st.XidPending, func(e XidEvent) bool {
			return !e.Time.After(st.LastReset) || (!boot.IsZero() && e.Time.Before(boot))
		})
	}
	return st
}

// ReleaseQuarantine checks a quarantined function again and, when it is healthy, removes its
// record. A function still unhealthy stays quarantined and the error (ErrRefused) says why.
func ReleaseQuarantine(root Root, a Address, now time.Time) (DeviceHealth, error) {
	q, err := LoadQuarantine(root, a)
	if err != nil {
		return DeviceHealth{}, err
	}
	if q == nil {
		// Neither quarantined nor a device: a mistyped address, told as every command tells
		// one, and no health file is written for it.
		if missing := DeviceMissing(root, a); missing != nil {
			return DeviceHealth{}, fmt.Errorf("release quarantine of %s: %w", a, missing)
		}
	}
	h := CheckDevice(root, a, CheckOptions{Now: now})
	if err := recordCheck(root, h, nil); err != nil {
		return h, err
	}
	if !h.Healthy {
		return h, fmt.Errorf("release quarantine of %s: it still fails its check (%s): %w", a, h.Reason(), ErrRefused)
	}
	if q == nil {
		return h, nil
	}
	return h, RemoveQuarantine(root, a)
}

// ObserveAll checks every function that has a health file, as the agent does periodically, and
// stores each check as the function's last. Unlike a handback it never resets or quarantines
// (the function may be in a running guest) and it leaves the baseline alone, so the handback
// still sees every AER error since vgpu-host took the function. The checks are returned in
// address order; the error is the first health file that could not be read or written.
func ObserveAll(root Root, now time.Time) ([]DeviceHealth, error) {
	states, err := HealthStates(root)
	var out []DeviceHealth
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	for _, st := range states {
		h := CheckDevice(root, st.Address, CheckOptions{Baseline: st.Baseline, Now: now, Xids: st.XidPending, ResetAt: st.LastReset})
		st.Last = &h
		if err := SaveHealthState(root, &st); err != nil {
			errs = append(errs, fmt.Errorf("record health of %s: %w", st.Address, err))
		}
		out = append(out, h)
	}
	return out, errors.Join(errs...)
}
