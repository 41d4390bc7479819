package vfio

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/internal/filelock"
)

// LedgerVersion is the format version of vfio.json.
const LedgerVersion = 1

// Binding records what a function looked like before vgpu-host moved it to vfio-pci.
type Binding struct {
	Address host.Address `json:"address"`
	Group   int          `json:"iommu_group"`
	// Driver is the original driver, "" when the function had none (it stays driverless on
	// unbind).
	Driver string `json:"driver"`
	// Module is the kernel module providing Driver ("" when built in or driverless); the
	// persisted modprobe softdep names it.
	Module string `json:"module,omitempty"`
	// Override is the original driver_override, "" when unset.
	Override string `json:"driver_override"`
	// Owner is who asked for the binding (a VM name from apply; "" from the CLI).
	Owner string `json:"owner,omitempty"`
	// Persist is true when the binding was made to survive a reboot (bind --persist).
	Persist bool      `json:"persist,omitempty"`
	BoundAt time.Time `json:"bound_at"`
}

// Bindings is the vfio state file (vfio.json): every function vgpu-host moved to vfio-pci and not yet restored,
// and the persistence files bind --persist wrote and unbind --persist has not yet removed.
type Bindings struct {
	Version int                `json:"version"`
	Devices map[string]Binding `json:"devices"`
	// Files are the driverctl overrides bind --persist wrote, by host path
	// (/etc/driverctl.d/pci-ADDR): only these does unbind --persist remove or put back.
	Files map[string]PersistedFile `json:"files,omitempty"`
}

// PersistedFile records a configuration file bind --persist wrote, and what was there before.
type PersistedFile struct {
	Address host.Address `json:"address"`
	// Previous is the file's content before vgpu-host wrote it; nil when there was no file.
	Previous *string `json:"previous"`
}

// ErrLedgerCorrupt is returned when the ledger file cannot be parsed. Nothing is changed and
// the file is left as it is.
var ErrLedgerCorrupt = errors.New("vgpu-host ledger is corrupt")

// LedgerPath returns ROOT/var/lib/vgpu-host/vfio.json.
func LedgerPath(root host.Root) string { return root.StateDir("vfio.json") }

// lockPath is a separate file: the ledger itself is replaced by rename on every save, and a
// lock on a replaced inode would protect nothing.
func lockPath(root host.Root) string { return root.StateDir("vfio.lock") }

// LoadLedger reads the ledger; a missing file is an empty ledger.
func LoadLedger(root host.Root) (*Bindings, error) {
	p := LedgerPath(root)
	l := &Bindings{Version: LedgerVersion, Devices: map[string]Binding{}, Files: map[string]PersistedFile{}}
	b, err := root.ReadFileLimit(p, host.MaxStateFileSize)
	if errors.Is(err, fs.ErrNotExist) {
		return l, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read ledger %s: %w", p, err)
	}
	if err := json.Unmarshal(b, l); err != nil {
		return nil, fmt.Errorf("read ledger %s: not valid JSON (%v): vgpu-host will not overwrite it, as it records the original driver of every function it bound; repair it, or if no device is on vfio-pci because of vgpu-host, move it aside (mv %s %s.bad) and run again: %w",
			p, err, p, p, ErrLedgerCorrupt)
	}
	if l.Version > LedgerVersion {
		return nil, fmt.Errorf("read ledger %s: version %d is newer than this vgpu-host understands (%d): %w", p, l.Version, LedgerVersion, host.ErrUnsupported)
	}
	if l.Devices == nil {
		l.Devices = map[string]Binding{}
	}
	// Driver and module names are joined into sysfs paths and given to modprobe on unbind:
	// the file is input like any other.
	for key, e := range l.Devices {
		for what, name := range map[string]string{"driver": e.Driver, "module": e.Module} {
			if name == "" {
				continue
			}
			if err := host.CheckComponent(what, name); err != nil {
				return nil, fmt.Errorf("read ledger %s: entry %s: %w: repair it (the original %s of the function), or move it aside (mv %s %s.bad) and run again: %w", p, key, err, what, p, p, ErrLedgerCorrupt)
			}
		}
	}
	if l.Files == nil {
		l.Files = map[string]PersistedFile{}
	}
	return l, nil
}

// Lookup returns the entry of a, if vgpu-host bound it.
func (l *Bindings) Lookup(a host.Address) (Binding, bool) {
	e, ok := l.Devices[a.String()]
	return e, ok
}

// Entries returns every entry sorted by address.
func (l *Bindings) Entries() []Binding {
	out := make([]Binding, 0, len(l.Devices))
	for _, e := range l.Devices {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Address.String() < out[j].Address.String() })
	return out
}

// save writes the ledger atomically (temporary file, fsync, rename).
func (l *Bindings) save(root host.Root) error {
	l.Version = LedgerVersion
	b, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return err
	}
	p := LedgerPath(root)
	if err := root.WriteFileAtomic(p, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("save ledger: %w", err)
	}
	return nil
}

// lock takes an exclusive flock on ROOT/var/lib/vgpu-host/vfio.lock, waiting up to timeout for
// another vgpu-host run to finish. The returned func releases it.
func lock(root host.Root, timeout time.Duration) (func(), error) {
	l, err := filelock.AcquireIn(root, lockPath(root), filelock.Exclusive, timeout)
	if errors.Is(err, filelock.ErrTimeout) {
		return nil, fmt.Errorf("another vgpu-host bind/unbind is running: %w", err)
	}
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}
