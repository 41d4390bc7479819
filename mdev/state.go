package mdev

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/internal/filelock"
)

// The state file records which instances vgpu-host created and for whom, so that a release
// only undoes what this tool did, and so that vendor-VFIO types (which the driver forgets at
// reboot) can be restored. It lives at root.StateDir("vgpu-instances.json"), is replaced
// atomically, and every read-modify-write holds an exclusive flock on a sibling lock file.
const (
	stateFileName = "vgpu-instances.json"
	stateLockName = "vgpu-instances.lock"
)

// stateEntry is one instance vgpu-host created.
type stateEntry struct {
	Backend string `json:"backend"`
	Parent  string `json:"parent"`
	Type    string `json:"type"`
	// TypeName is a vendor-VFIO type's name ("NVIDIA L40S-8Q") as the driver listed it when
	// vgpu-host set it: once the GPU is full no VF lists it any more.
	TypeName string `json:"type_name,omitempty"`
	UUID     string `json:"uuid,omitempty"`
	VF       string `json:"vf,omitempty"`
	Owner    string `json:"owner,omitempty"`
	Index    int    `json:"index"`
}

func (e stateEntry) id() string {
	if e.VF != "" {
		return e.VF
	}
	return e.UUID
}

type state struct {
	Version   int          `json:"version"`
	Instances []stateEntry `json:"instances"`
	// Autoprobe maps a PF's address to the value its sriov_drivers_autoprobe had before
	// vgpu-host set it to 0 (vf enable --driver vfio-pci); vf disable writes it back and drops
	// the record. Recorded before the write, so a crash in between still restores it.
	Autoprobe map[string]string `json:"sriov_drivers_autoprobe,omitempty"`
}

func (s *state) find(id string) (int, bool) {
	for i, e := range s.Instances {
		if e.id() == id {
			return i, true
		}
	}
	return -1, false
}

func (s *state) put(e stateEntry) {
	if i, ok := s.find(e.id()); ok {
		s.Instances[i] = e
		return
	}
	s.Instances = append(s.Instances, e)
}

func (s *state) drop(id string) {
	if i, ok := s.find(id); ok {
		s.Instances = append(s.Instances[:i], s.Instances[i+1:]...)
	}
}

// ownerEntry finds the entry of owner's instance number index on backend.
func (s *state) ownerEntry(backend, owner string, index int) (stateEntry, bool) {
	for _, e := range s.Instances {
		if e.Backend == backend && e.Owner == owner && e.Index == index && owner != "" {
			return e, true
		}
	}
	return stateEntry{}, false
}

func (m *Manager) statePath() string { return m.Root.StateDir(stateFileName) }

// readState reads the state file without locking (a missing file is an empty state).
func (m *Manager) readState() (*state, error) {
	st := &state{Version: 1}
	b, err := m.Root.ReadFileLimit(m.statePath(), host.MaxStateFileSize)
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read vGPU state %s: %w", m.statePath(), err)
	}
	if err := json.Unmarshal(b, st); err != nil {
		return nil, fmt.Errorf("read vGPU state %s: %w: %v (vgpu-host replaces it atomically, so another program wrote it: move it away to start over, e.g. mv %s %s.bad; instances in the kernel stay as they are, but vgpu-host forgets their owners and the vendor vGPU types it set, so re-run 'vgpu-host mdev create --name VM' for each VM to record them again)", m.statePath(), host.ErrInvalid, err, m.statePath(), m.statePath())
	}
	return st, nil
}

// updateState runs f on the state under an exclusive file lock and writes the result back
// atomically if f succeeds. In a dry run f still runs (it decides what would happen) but
// nothing is written.
func (m *Manager) updateState(f func(*state) error) error {
	if m.DryRun {
		st, err := m.readState()
		if err != nil {
			return err
		}
		return f(st)
	}
	dir := m.Root.StateDir()
	if err := m.Root.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create state directory %s: %w", dir, err)
	}
	lock, err := filelock.AcquireIn(m.Root, m.Root.StateDir(stateLockName), filelock.Exclusive, filelock.DefaultTimeout)
	if err != nil {
		return err
	}
	defer lock.Release()
	st, err := m.readState()
	if err != nil {
		return err
	}
	ferr := f(st)
	// Write even when f failed: f records what it did before failing (or after reverting).
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return errors.Join(ferr, fmt.Errorf("encode vGPU state: %w", err))
	}
	if err := m.Root.WriteFileAtomic(m.statePath(), append(b, '\n'), 0o644); err != nil {
		return errors.Join(ferr, err)
	}
	return ferr
}
