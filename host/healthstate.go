package host

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// HealthStateVersion is the format version of health/ADDR.json and quarantine/ADDR.json.
const HealthStateVersion = 1

// HealthState is a function's health file, ROOT/var/lib/vgpu-host/health/ADDR.json: the
// baseline later checks compare with, and the last check.
type HealthState struct {
	Version  int             `json:"version"`
	Address  Address         `json:"address"`
	Baseline *HealthBaseline `json:"baseline,omitempty"`
	Last     *DeviceHealth   `json:"last,omitempty"`
	// Resets counts the resets vgpu-host made of the function, by method.
	Resets map[string]int `json:"resets,omitempty"`
	// LastReset is when vgpu-host last reset the function successfully: fatal Xids before it
	// are cleared.
	LastReset time.Time `json:"last_reset,omitzero"`
	// Xid counts the NVIDIA Xid errors NVML reported for the GPU, by Xid number
	// (vgpuhost_nvidia_xid_total).
	Xid map[string]uint64 `json:"xid,omitempty"`
	// XidPending are the fatal Xids reported (the newest 16); each fails the GPU's checks until
	// it is reset or the host rebooted after it.
	XidPending []XidEvent `json:"xid_pending,omitempty"`
}

// Quarantine is a function vgpu-host found unhealthy when it was handed back, and will not
// hand to a VM again until `vgpu-host host release-quarantine ADDR` finds it healthy. Its
// record is ROOT/var/lib/vgpu-host/quarantine/ADDR.json.
type Quarantine struct {
	Version  int       `json:"version"`
	Address  Address   `json:"address"`
	Problems []Problem `json:"problems"`
	Since    time.Time `json:"since"`
	// Op is what released the device ("unbind", "destroy web-1", "mdev remove", ...).
	Op string `json:"op,omitempty"`
	// Resets are the reset methods tried, and how each ended.
	Resets []ResetAttempt `json:"resets,omitempty"`
	// Path is the record's host path (filled in on load, not stored).
	Path string `json:"-"`
}

// Reason is the quarantine's problems in one line.
func (q Quarantine) Reason() string {
	var s []string
	for _, p := range q.Problems {
		s = append(s, p.String())
	}
	return strings.Join(s, "; ")
}

// Refusal is the sentence plan, apply, bind and layout print when they refuse the function.
func (q Quarantine) Refusal() string {
	return fmt.Sprintf("is quarantined since %s (%s; record %s): it failed its health check when it was handed back; "+
		"fix the device (docs/health.md), then run `vgpu-host host release-quarantine %s`, which checks it again",
		q.Since.Format(time.RFC3339), q.Reason(), q.Path, q.Address)
}

// ErrQuarantined is wrapped when a quarantined function is asked for. It is also ErrRefused
// (exit 4) without ErrRefused's words, whose "use --force to override" no quarantine obeys.
var ErrQuarantined error = quarantinedError{}

type quarantinedError struct{}

func (quarantinedError) Error() string { return "refused: device is quarantined" }

// Is makes errors.Is(err, ErrRefused) hold for a quarantine refusal.
func (quarantinedError) Is(target error) bool { return target == ErrRefused }

// HealthStatePath is ROOT/var/lib/vgpu-host/health/ADDR.json.
func HealthStatePath(root Root, a Address) string { return root.StateDir("health", a.String()+".json") }

// QuarantinePath is ROOT/var/lib/vgpu-host/quarantine/ADDR.json.
func QuarantinePath(root Root, a Address) string {
	return root.StateDir("quarantine", a.String()+".json")
}

// LoadHealthState reads a function's health file; nil when there is none.
func LoadHealthState(root Root, a Address) (*HealthState, error) {
	var st HealthState
	ok, err := loadJSONState(root, HealthStatePath(root, a), &st)
	if !ok || err != nil {
		return nil, err
	}
	return &st, nil
}

// SaveHealthState writes a function's health file atomically.
func SaveHealthState(root Root, st *HealthState) error {
	return saveHealthStates(root, []*HealthState{st})
}

// RecordBaseline stores what the function looks like now as its health baseline (bind does,
// when it takes a function): later checks compare BAR sizes, AER counters and link width with it.
func RecordBaseline(root Root, a Address, now time.Time) error {
	return errors.Join(RecordBaselines(root, []Address{a}, now)...)
}

// RecordBaselines is RecordBaseline for several functions (the ones a bind moved): each file is
// replaced on its own, and the health directory made and synced once for all of them. The
// errors are one per function that could not be recorded.
func RecordBaselines(root Root, addrs []Address, now time.Time) []error {
	var errs []error
	sts := make([]*HealthState, 0, len(addrs))
	for _, a := range addrs {
		b, err := BaselineOf(root, a, now)
		if err != nil {
			errs = append(errs, fmt.Errorf("record health baseline of %s: %w", a, err))
			continue
		}
		st, err := LoadHealthState(root, a)
		if err != nil || st == nil {
			st = &HealthState{Address: a}
		}
		st.Baseline = &b
		sts = append(sts, st)
	}
	if err := saveHealthStates(root, sts); err != nil {
		errs = append(errs, fmt.Errorf("record health baseline: %w", err))
	}
	return errs
}

// saveHealthStates writes health files atomically, each on its own (one that fails does not
// stop the others; each error names its file), with their directory made once and synced once
// after the last rename.
func saveHealthStates(root Root, sts []*HealthState) error {
	if len(sts) == 0 {
		return nil
	}
	dir := root.StateDir("health")
	if err := root.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var errs []error
	wrote := false
	for _, st := range sts {
		st.Version = HealthStateVersion
		p := HealthStatePath(root, st.Address)
		b, err := json.MarshalIndent(st, "", "  ")
		if err == nil {
			err = root.CheckInside(p)
		}
		if err == nil {
			err = ReplaceFileVia(dir, p, append(b, '\n'), 0o644)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("save %s: %w", p, err))
			continue
		}
		wrote = true
	}
	if wrote {
		SyncDir(dir)
	}
	return errors.Join(errs...)
}

// LoadQuarantine reads a function's quarantine record; nil when it is not quarantined.
func LoadQuarantine(root Root, a Address) (*Quarantine, error) {
	var q Quarantine
	p := QuarantinePath(root, a)
	ok, err := loadJSONState(root, p, &q)
	if !ok || err != nil {
		return nil, err
	}
	q.Path = HostPath(root, p)
	return &q, nil
}

// Quarantines lists every quarantine record, by address.
func Quarantines(root Root) ([]Quarantine, error) {
	return loadAll(root, "quarantine", LoadQuarantine)
}

// HealthStates lists every health file, by address.
func HealthStates(root Root) ([]HealthState, error) {
	return loadAll(root, "health", LoadHealthState)
}

// loadAll loads every ADDR.json of the state directory dir with load, by address: those read
// before one that cannot be, with its error.
func loadAll[T any](root Root, dir string, load func(Root, Address) (*T, error)) ([]T, error) {
	addrs, err := stateAddrs(root, dir)
	if err != nil {
		return nil, err
	}
	var out []T
	for _, a := range addrs {
		v, err := load(root, a)
		if err != nil {
			return out, err
		}
		if v != nil {
			out = append(out, *v)
		}
	}
	return out, nil
}

// stateAddrs lists the ADDR.json files of a state directory, sorted; files with other names
// are ignored.
func stateAddrs(root Root, dir string) ([]Address, error) {
	d := root.StateDir(dir)
	// Most hosts have no such directory (nothing was ever quarantined): one stat says so and
	// nothing is read, where CheckInside resolves the path component by component (on a
	// --host-root, two dozen system calls for every inspect and check).
	if _, err := os.Lstat(d); errors.Is(err, fs.ErrNotExist) { // CheckInside refuses a link out
		return nil, nil
	}
	if err := root.CheckInside(d); err != nil {
		return nil, err
	}
	ents, err := root.ReadDir(d)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", d, err)
	}
	var out []Address
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok {
			continue
		}
		if a, err := ParseAddress(name); err == nil && a.String() == name {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(x, y Address) int { return strings.Compare(x.String(), y.String()) })
	return out, nil
}

// SaveQuarantine writes a quarantine record atomically.
func SaveQuarantine(root Root, q *Quarantine) error {
	q.Version = HealthStateVersion
	p := QuarantinePath(root, q.Address)
	if err := saveJSONState(root, p, q); err != nil {
		return err
	}
	q.Path = HostPath(root, p)
	return nil
}

// RemoveQuarantine removes a function's quarantine record; none is not an error.
func RemoveQuarantine(root Root, a Address) error {
	p := QuarantinePath(root, a)
	if err := root.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("release quarantine of %s: %w", a, err)
	}
	SyncDir(filepath.Dir(p))
	return nil
}

// loadJSONState reads a small state file strictly; ok is false when it does not exist.
func loadJSONState(root Root, p string, v any) (ok bool, err error) {
	b, err := root.ReadFileLimit(p, MaxStateFileSize)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read %s: %w", p, err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		// Damaged state is exit 1, not the 2 of bad input (docs/security.md).
		return false, fmt.Errorf("read %s: not a vgpu-host health or quarantine file (%v): check the device (vgpu-host host health ADDR), then repair or remove it", p, err)
	}
	return true, nil
}

// saveJSONState writes a state file atomically, its directory created inside the root.
func saveJSONState(root Root, p string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := root.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	if err := root.WriteFileAtomic(p, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("save %s: %w", p, err)
	}
	return nil
}

// Reset policies of /etc/vgpu-host/health.yaml's `reset:`.
const (
	// ResetNever never resets: a function that fails its check is quarantined at once.
	ResetNever = "never"
	// ResetFLRIfSupported (the default) tries a function-level reset when reset_method lists
	// flr, the one reset that touches only this function.
	ResetFLRIfSupported = "flr-if-supported"
	// ResetAuto tries every method reset_method lists, in the kernel's order.
	ResetAuto = "auto"
)

// HealthPolicy is /etc/vgpu-host/health.yaml.
type HealthPolicy struct {
	// Reset is never, flr-if-supported (default) or auto.
	Reset string `yaml:"reset" json:"reset"`
	// ResetTimeout bounds each reset write (default 10s): a write that hangs is abandoned.
	ResetTimeout time.Duration `yaml:"reset_timeout" json:"reset_timeout"`
}

// HealthPolicyPath is ROOT/etc/vgpu-host/health.yaml.
func HealthPolicyPath(root Root) string { return root.Etc("vgpu-host", "health.yaml") }

// DefaultHealthPolicy is the policy without /etc/vgpu-host/health.yaml.
var DefaultHealthPolicy = HealthPolicy{Reset: ResetFLRIfSupported, ResetTimeout: 10 * time.Second}

// LoadHealthPolicy reads /etc/vgpu-host/health.yaml; a missing file is the default policy. A
// file that is not valid returns the error with the default policy, which a handback (whose
// operation is already done) goes on with.
func LoadHealthPolicy(root Root) (HealthPolicy, error) {
	pol, err := loadHealthPolicy(root)
	if err != nil {
		return DefaultHealthPolicy, err
	}
	return pol, nil
}

func loadHealthPolicy(root Root) (HealthPolicy, error) {
	pol := DefaultHealthPolicy
	p := HealthPolicyPath(root)
	b, err := root.ReadFileLimit(p, MaxStateFileSize)
	if errors.Is(err, fs.ErrNotExist) {
		return pol, nil
	}
	if err != nil {
		return pol, fmt.Errorf("read %s: %w", p, err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&pol); err != nil && !errors.Is(err, io.EOF) { // an empty file is the default
		return pol, fmt.Errorf("read %s: %v: %w", p, err, ErrInvalid)
	}
	switch pol.Reset {
	case ResetNever, ResetFLRIfSupported, ResetAuto:
	default:
		return pol, fmt.Errorf("read %s: reset %q: use never, flr-if-supported or auto: %w", p, pol.Reset, ErrInvalid)
	}
	if pol.ResetTimeout <= 0 {
		pol.ResetTimeout = 10 * time.Second
	}
	return pol, nil
}
