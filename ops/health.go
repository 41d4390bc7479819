package ops

import (
	"context"
	"slices"
	"strings"

	"github.com/vgpu-host/vgpu-host/host"
)

// HealthRequest is `host health [ADDR]`: every device's last health check and quarantine, or
// one device checked now.
type HealthRequest struct {
	// Address is the PCI function to check now; empty: list what was recorded.
	Address string `json:"address,omitempty"`
}

// Op is "host health".
func (HealthRequest) Op() string { return "host health" }

// Bool is false: host health has no boolean setting.
func (HealthRequest) Bool(string) bool { return false }

// IsSet is false: host health has no flag.
func (HealthRequest) IsSet(string) bool { return false }

// HealthEntry is one line of `host health`: the last check and the quarantine of a function.
type HealthEntry struct {
	Address    host.Address       `json:"address"`
	Last       *host.DeviceHealth `json:"last,omitempty"`
	Quarantine *host.Quarantine   `json:"quarantine,omitempty"`
	// Resets counts the resets vgpu-host made, by method.
	Resets map[string]int `json:"resets,omitempty"`
	// Xid counts the NVIDIA Xid errors NVML reported for the GPU, by Xid number; XidPending
	// are the fatal ones not yet cleared by a reset or a reboot.
	Xid        map[string]uint64 `json:"xid,omitempty"`
	XidPending []host.XidEvent   `json:"xid_pending,omitempty"`
}

// HealthResult is what host health lists: its JSON is the command's --output json.
type HealthResult []HealthEntry

// Health is host health: with an address, that device checked now against its baseline
// (nothing is written) with its quarantine and counters; without, the recorded checks and
// quarantine records joined by address.
func Health(_ context.Context, env Env, req HealthRequest) (*HealthResult, error) {
	root := env.Root
	if req.Address == "" {
		entries, err := healthEntries(root)
		if err != nil {
			return nil, err
		}
		return &entries, nil
	}
	a, err := host.ParseAddress(req.Address)
	if err != nil {
		return nil, Usagef("%v", err)
	}
	var o host.CheckOptions
	if env.Now != nil {
		o.Now = env.Now()
	}
	q, err := host.LoadQuarantine(root, a)
	if err != nil {
		return nil, err
	}
	st, serr := host.LoadHealthState(root, a)
	if q == nil && (serr != nil || st == nil) {
		// Nothing recorded and, when it is no device either, a mistyped address: told as
		// every command tells one (a device vgpu-host knew that went away still shows "gone").
		if missing := host.DeviceMissing(root, a); missing != nil {
			return nil, missing
		}
	}
	h := host.CheckDevice(root, a, o)
	e := HealthEntry{Address: a, Last: &h, Quarantine: q}
	if serr == nil && st != nil {
		e.Resets, e.Xid, e.XidPending = st.Resets, st.Xid, st.XidPending
	}
	return &HealthResult{e}, nil
}

// healthEntries joins the health files and the quarantine records, by address.
func healthEntries(root host.Root) (HealthResult, error) {
	states, err := host.HealthStates(root)
	if err != nil {
		return nil, err
	}
	qs, err := host.Quarantines(root)
	if err != nil {
		return nil, err
	}
	byAddr := map[host.Address]*HealthEntry{}
	var order []host.Address
	get := func(a host.Address) *HealthEntry {
		if e, ok := byAddr[a]; ok {
			return e
		}
		byAddr[a] = &HealthEntry{Address: a}
		order = append(order, a)
		return byAddr[a]
	}
	for _, st := range states {
		e := get(st.Address)
		e.Last, e.Resets, e.Xid, e.XidPending = st.Last, st.Resets, st.Xid, st.XidPending
	}
	for _, q := range qs {
		get(q.Address).Quarantine = &q
	}
	slices.SortFunc(order, func(x, y host.Address) int { return strings.Compare(x.String(), y.String()) })
	out := HealthResult{}
	for _, a := range order {
		out = append(out, *byAddr[a])
	}
	return out, nil
}
