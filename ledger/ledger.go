// Package ledger is vgpu-host's allocation ledger: which VM holds which PCI function, VF,
// mdev instance or vendor vGPU type, and the journal of every host or libvirt step an apply
// takes, each recorded before it is taken.
//
// The ledger is one JSON document, ROOT/var/lib/vgpu-host/ledger.json, so an operator can read
// it with jq. Every change is a transaction: Update takes an exclusive flock(2) on
// ledger.lock, reads the document, lets the caller change it, and replaces the file by an
// atomic rename (host.WriteFileAtomic), all before releasing the lock. Two vgpu-host processes
// therefore never both see a device as free: the second one reads the first one's claim.
// A process killed mid-transaction leaves the previous document intact (the rename never
// happened) and the kernel drops its lock.
package ledger

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/internal/filelock"
)

// FormatVersion is the "version" of the JSON document this package writes.
const FormatVersion = 1

// Claim kinds.
const (
	KindPCI        = "pci"         // a whole PCI function (GPU, companion, or VF) given to the VM
	KindMdev       = "mdev"        // an mdev instance, by UUID
	KindVendorVGPU = "vendor-vgpu" // a VF whose nvidia/current_vgpu_type this VM set
)

// JournalStep statuses.
const (
	StepStarted = "started" // recorded, about to be taken (or the process died while taking it)
	StepDone    = "done"    // taken
	StepUndone  = "undone"  // rolled back by a failed apply, a re-converging apply or destroy
)

// VM phases.
const (
	PhaseApplying   = "applying"
	PhaseApplied    = "applied"
	PhaseDestroying = "destroying"
)

// Book is the whole ledger document.
type Book struct {
	Version int            `json:"version"`
	VMs     map[string]*VM `json:"vms"`
}

// VM is one VM's entry.
type VM struct {
	Name string `json:"name"`
	// SpecHash identifies the spec (and resolved allocation) last applied, so a re-apply of
	// the same spec can be a no-op.
	SpecHash string `json:"spec_hash"`
	// URI is the libvirt connection the domain lives on; Pool the storage pool of its volumes.
	URI  string `json:"uri"`
	Pool string `json:"pool,omitempty"`
	// Phase is "applying", "applied" or "destroying".
	Phase string `json:"phase"`
	// Claims are the devices the VM holds.
	Claims []Claim `json:"claims"`
	// Fallback says why a gpus[] entry fell back to virtio-gpu, if one did.
	Fallback []string `json:"fallback,omitempty"`
	// Journal lists the steps taken for this VM, oldest first.
	Journal   []JournalStep `json:"journal"`
	UpdatedAt time.Time     `json:"updated_at"`
}

// Claim is one device held by a VM.
type Claim struct {
	Kind string `json:"kind"` // pci, mdev, vendor-vgpu
	ID   string `json:"id"`   // PCI address or mdev UUID
	// Detail says what the claim is for: the mdev type, the vGPU type id, "companion".
	Detail string `json:"detail,omitempty"`
}

// Key returns "kind:id", the unit of exclusivity.
func (c Claim) Key() string { return c.Kind + ":" + c.ID }

// JournalStep is one journal entry: a host or libvirt change with what is needed to undo it.
type JournalStep struct {
	N      int               `json:"n"`
	Action string            `json:"action"`
	Target string            `json:"target"`
	Params map[string]string `json:"params,omitempty"`
	Status string            `json:"status"`
	At     time.Time         `json:"at"`
}

// Ledger is the on-disk ledger.
type Ledger struct {
	path string
	lock string
	// WriteFile replaces the ledger file with data (default host.WriteFileAtomic: a temporary
	// file, fsync, rename, fsync of the directory). Tests inject a failing writer (ENOSPC) to
	// prove a failed write loses nothing.
	WriteFile func(path string, data []byte, perm os.FileMode) error
	// LockTimeout is how long a transaction waits for another process's (0:
	// filelock.DefaultTimeout); the error on timeout names the holder's pid.
	LockTimeout time.Duration
}

// Open returns the ledger under root's state directory (ROOT/var/lib/vgpu-host/ledger.json).
// Its writes refuse a path that symlinks in the tree lead out of root (Root.WriteFileAtomic).
func Open(root host.Root) *Ledger {
	l := OpenPath(root.StateDir("ledger.json"))
	l.WriteFile = root.WriteFileAtomic
	return l
}

// OpenPath returns the ledger stored at path (its lock file is path with ".lock").
func OpenPath(path string) *Ledger {
	return &Ledger{path: path, lock: filelock.Sibling(path)}
}

// Path returns the ledger file.
func (l *Ledger) Path() string { return l.path }

func (l *Ledger) locked(mode filelock.Mode, fn func() error) error {
	timeout := l.LockTimeout
	if timeout == 0 {
		timeout = filelock.DefaultTimeout
	}
	release, err := filelock.Acquire(l.lock, mode, timeout)
	if err != nil {
		return fmt.Errorf("ledger %s: %w", l.path, err)
	}
	defer release()
	return fn()
}

func (l *Ledger) load() (*Book, error) {
	b := &Book{Version: FormatVersion, VMs: map[string]*VM{}}
	data, err := host.ReadFileLimit(l.path, host.MaxStateFileSize)
	if errors.Is(err, os.ErrNotExist) {
		return b, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read ledger: %w", err)
	}
	if len(data) == 0 {
		return nil, l.corrupt(errors.New("the file is empty (truncated)"))
	}
	if err := json.Unmarshal(data, b); err != nil {
		return nil, l.corrupt(err)
	}
	if b.Version > FormatVersion {
		return nil, fmt.Errorf("read ledger %s: format version %d is newer than this vgpu-host (%d): %w", l.path, b.Version, FormatVersion, host.ErrUnsupported)
	}
	if b.VMs == nil {
		b.VMs = map[string]*VM{}
	}
	var empty []string
	for name, e := range b.VMs {
		if e == nil {
			empty = append(empty, strconv.Quote(name))
			delete(b.VMs, name)
		}
	}
	if len(empty) > 0 {
		sort.Strings(empty)
		return b, l.corrupt(fmt.Errorf("the entry of VM %s is null, so its devices are unknown", strings.Join(empty, ", ")))
	}
	return b, nil
}

// corrupt explains a ledger that cannot be read. vgpu-host never starts from an empty ledger in
// its place: that would hand devices other VMs hold to the next apply.
func (l *Ledger) corrupt(why error) error {
	return fmt.Errorf("ledger %s is damaged: %w; it records which VM holds which device, so vgpu-host stops "+
		"rather than guess: repair the JSON by hand, or, if no VM vgpu-host created is left (virsh list --all), "+
		"move the file aside and re-apply", l.path, why)
}

// removeStaleTemps deletes temporary ledger files (".ledger.json.tmp*", host.WriteFileAtomic's)
// that a writer killed between writing and renaming left. Only a holder of the exclusive lock
// writes one, so while we hold the lock (exclusive, or shared: no writer then) every such file
// is a dead process's.
func (l *Ledger) removeStaleTemps() {
	stale, _ := filepath.Glob(filepath.Join(filepath.Dir(l.path), "."+filepath.Base(l.path)+".tmp*"))
	for _, f := range stale {
		_ = os.Remove(f)
	}
}

// Read returns a snapshot of the ledger (under a shared lock). When the document parses but
// some entries are damaged (null), it returns the intact entries together with the error, so
// a read-only command can still show them; a writer (Update) stops.
func (l *Ledger) Read() (*Book, error) {
	var b *Book
	// The lock file is never removed: when it exists now, the shared lock below is a real
	// one, no writer holds the exclusive lock, and any temporary ledger file is a dead
	// writer's, which a reader may clear too (a destroy of a VM that a killed apply never
	// recorded reads, finds nothing and ends: it would leave the dead apply's file behind).
	_, serr := os.Stat(l.lock)
	err := l.locked(filelock.Shared, func() error {
		if serr == nil {
			l.removeStaleTemps()
		}
		var err error
		b, err = l.load()
		return err
	})
	return b, err
}

// Update runs fn on the ledger under an exclusive lock and writes the result atomically.
// If fn returns an error nothing is written and the error is returned.
func (l *Ledger) Update(fn func(*Book) error) error {
	return l.locked(filelock.Exclusive, func() error {
		l.removeStaleTemps()
		b, err := l.load()
		if err != nil {
			return err
		}
		if err := fn(b); err != nil {
			return err
		}
		b.Version = FormatVersion
		data, err := json.MarshalIndent(b, "", "  ")
		if err != nil {
			return fmt.Errorf("encode ledger: %w", err)
		}
		write := l.WriteFile
		if write == nil {
			write = host.WriteFileAtomic
		}
		if err := write(l.path, append(data, '\n'), 0o644); err != nil {
			return fmt.Errorf("write ledger %s (the previous version is intact): %w", l.path, err)
		}
		return nil
	})
}

// LockVM takes an exclusive, non-blocking lock on vm for the length of an apply or destroy
// (ROOT/var/lib/vgpu-host/vms/VM.lock, flock(2)): a second apply or destroy of the same VM
// while the first runs gets host.ErrBusy instead of tearing the first one's half-applied
// steps down under it. The kernel drops the lock when the process dies (kill -9), so an
// interrupted apply never blocks the next one. Call the returned function to release it.
func (l *Ledger) LockVM(vm string) (unlock func(), err error) {
	if err := host.CheckComponent("VM name", vm); err != nil {
		return nil, fmt.Errorf("lock VM: %w", err)
	}
	dir := filepath.Join(filepath.Dir(l.path), "vms")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("VM lock directory %s: %w", dir, err)
	}
	path := filepath.Join(dir, vm+".lock")
	release, err := filelock.Acquire(path, filelock.Exclusive, 0)
	if errors.Is(err, filelock.ErrTimeout) {
		return nil, fmt.Errorf("VM %s is being applied or destroyed by another vgpu-host process: %w; wait for it to finish", vm, err)
	}
	if err != nil {
		return nil, fmt.Errorf("lock VM %s: %w", vm, err)
	}
	return release, nil
}

// Holder returns the VM holding the claim kind:id, or "".
func (b *Book) Holder(c Claim) string {
	names := make([]string, 0, len(b.VMs))
	for n := range b.VMs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		for _, have := range b.VMs[n].Claims {
			if have.Key() == c.Key() {
				return n
			}
		}
	}
	return ""
}

// Claim gives claims to vm, creating its entry. A claim held by another VM fails with an
// error wrapping host.ErrBusy and changes nothing; a claim vm holds already is kept once.
func (b *Book) Claim(vm string, claims ...Claim) error {
	for _, c := range claims {
		if h := b.Holder(c); h != "" && h != vm {
			return fmt.Errorf("%s %s is allocated to VM %q (ledger): %w", c.Kind, c.ID, h, host.ErrBusy)
		}
	}
	e := b.Entry(vm)
	for _, c := range claims {
		if b.Holder(c) != vm {
			e.Claims = append(e.Claims, c)
		}
	}
	e.UpdatedAt = time.Now().UTC()
	return nil
}

// Release drops claims from vm (all of them when none are named).
func (b *Book) Release(vm string, claims ...Claim) {
	e := b.VMs[vm]
	if e == nil {
		return
	}
	if len(claims) == 0 {
		e.Claims = nil
		return
	}
	drop := map[string]bool{}
	for _, c := range claims {
		drop[c.Key()] = true
	}
	kept := e.Claims[:0]
	for _, c := range e.Claims {
		if !drop[c.Key()] {
			kept = append(kept, c)
		}
	}
	e.Claims = kept
}

// Entry returns vm's entry, creating an empty one.
func (b *Book) Entry(vm string) *VM {
	e := b.VMs[vm]
	if e == nil {
		e = &VM{Name: vm, Phase: PhaseApplying}
		b.VMs[vm] = e
	}
	return e
}

// Record appends a step with status "started" to vm's journal and returns its number.
func (e *VM) Record(action, target string, params map[string]string) int {
	n := 1
	if len(e.Journal) > 0 {
		n = e.Journal[len(e.Journal)-1].N + 1
	}
	e.Journal = append(e.Journal, JournalStep{N: n, Action: action, Target: target, Params: params, Status: StepStarted, At: time.Now().UTC()})
	e.UpdatedAt = time.Now().UTC()
	return n
}

// Mark sets the status of step n.
func (e *VM) Mark(n int, status string) {
	for i := range e.Journal {
		if e.Journal[i].N == n {
			e.Journal[i].Status = status
			e.Journal[i].At = time.Now().UTC()
		}
	}
	e.UpdatedAt = time.Now().UTC()
}

// Live returns the steps that are started or done (not undone), oldest first: what a
// rollback or destroy must undo, newest first.
func (e *VM) Live() []JournalStep {
	var out []JournalStep
	for _, s := range e.Journal {
		if s.Status != StepUndone {
			out = append(out, s)
		}
	}
	return out
}
