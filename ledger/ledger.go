// Package ledger is vgpu-host's allocation ledger: which VM holds which PCI function, VF,
// mdev instance or vendor vGPU type, and the journal of every host or libvirt step an apply
// takes, each recorded before it is taken.
//
// # Layout
//
// The ledger is a directory of small JSON files, so a transaction rewrites what it changes and
// nothing else, whatever the number of VMs (issue 19: one document rewritten whole cost 7 s per
// apply + destroy at 10,000 VMs and reached the 16 MiB state-file limit):
//
//	ROOT/var/lib/vgpu-host/ledger.lock            the lock (flock(2)), as before
//	ROOT/var/lib/vgpu-host/ledger/vms/NAME.json   one VM: its claims, phase and journal
//	ROOT/var/lib/vgpu-host/ledger/claims.json     the claims index: "kind:id" -> VM
//
// An operator reads them with jq:
//
//	$ jq .claims /var/lib/vgpu-host/ledger/claims.json
//	{ "pci:0000:41:00.0": "train-1", "mdev:83c32df7-d52e-4ec1-9668-1f3c7e4df107": "desk-2" }
//	$ jq '{phase, claims}' /var/lib/vgpu-host/ledger/vms/train-1.json
//
// A VM file is its entry (the VM type's fields) plus "version" and "generation". The claims
// index answers "who holds PCI function X / mdev Y / vendor VF Z" without opening a VM file;
// its size is bounded by the host's devices (each is held once), not by the number of VMs. A
// VM without devices (virtio-gpu) is in no index at all: listing the VMs is a readdir.
//
// # Transactions
//
// Update takes an exclusive flock on ledger.lock, hands the callback a Book that loads VM files
// only when asked (Book.VM; Holder reads the index), and afterwards writes the entries that
// changed, each by an atomic rename (host.WriteFileAtomic), before releasing the lock. Two
// vgpu-host processes therefore never both see a device as free. Read and View hold the lock
// shared.
//
// Most transactions change one VM file and no claim (a journal step recorded or marked): they
// are one atomic rename, like the single document was. A transaction that changes claims, or
// more than one VM file, writes claims.json first with a "redo" copy of every entry it is about
// to write (or null for one it removes), all at the transaction's "generation"; that rename is
// its commit point. Then it writes the VM files, each stamped with that generation. A process
// killed in between (kill -9) leaves VM files older than their redo copy: every reader takes
// the redo copy instead (a file with the same or a newer generation wins), and the next
// transaction that rewrites claims.json first writes them out. A VM file written alone gets a
// generation above the index's, so an old redo copy never shadows it. A process killed before
// the commit point left only temporary files (".NAME.tmp*" in ledger/, removed by the next
// transaction) and the kernel dropped its lock.
//
// # Damage
//
// A VM file that does not parse (or is null, or names another VM, or is past
// host.MaxStateFileSize) stops every transaction that loads that VM, and Read lists the intact
// VMs together with the error, which names the file and the fix. Claims of other VMs stay
// known from the index, so other VMs can still be applied. A damaged claims.json stops every
// transaction: delete it and the next command rebuilds it from the VM files (so does a missing
// one), as after editing a VM's claims by hand.
//
// # The old single file
//
// A ledger written by an older vgpu-host, one document ROOT/var/lib/vgpu-host/ledger.json, is
// read as it is (Read, View) and migrated by the first Update: the VM files and the index are
// written, then ledger.json is renamed to ledger.json.v1 (the backup, and the commit point).
// A migration killed before that rename is redone from ledger.json by the next Update. A
// ledger.json beside a ledger directory holding anything that migration did not write (a
// stray copy) is an error for every reader and writer, naming both and the fix; Read still
// lists the directory's VMs with it. It is never migrated over them.
package ledger

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/internal/filelock"
	"github.com/vgpu-host/vgpu-host/vgpu"
)

// FormatVersion is the "version" of the files this package writes (1 was the single
// ledger.json document, which it still reads and migrates).
const FormatVersion = 2

// ClaimKind is vgpu.ClaimKind: what a claim holds (a PCI function, an mdev instance, a VF's
// vGPU type), the "kind" written in the ledger.
type ClaimKind = vgpu.ClaimKind

// Claim kinds (vgpu's).
const (
	KindPCI        = vgpu.ClaimPCI
	KindMdev       = vgpu.ClaimMdev
	KindVendorVGPU = vgpu.ClaimVendorVGPU
)

// ClaimKindOf is vgpu.ClaimKindOf.
func ClaimKindOf(k vgpu.Kind) ClaimKind { return vgpu.ClaimKindOf(k) }

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
	// PhaseIncoming: the target of a live migration reserved and prepared the VM's devices
	// (lifecycle/migrate.go); the domain is not here yet. Like any phase but applied, the next
	// apply or destroy of the VM undoes it.
	PhaseIncoming = "incoming"
)

// VM is one VM's entry.
type VM struct {
	Name string `json:"name"`
	// SpecHash identifies the spec (and resolved allocation) last applied, so a re-apply of
	// the same spec can be a no-op.
	SpecHash string `json:"spec_hash"`
	// URI is the libvirt connection the domain lives on; Pool the storage pool of its volumes.
	URI  string `json:"uri"`
	Pool string `json:"pool,omitempty"`
	// Phase is "applying", "applied", "destroying" or "incoming" (a migration target's reservation).
	Phase string `json:"phase"`
	// Claims are the devices the VM holds. Change them with Book.Claim and Book.Release, which
	// keep the claims index in step.
	Claims []Claim `json:"claims"`
	// Fallback says why a gpus[] entry fell back to virtio-gpu, if one did.
	Fallback []string `json:"fallback,omitempty"`
	// Journal lists the steps taken for this VM, oldest first.
	Journal   []JournalStep `json:"journal"`
	UpdatedAt time.Time     `json:"updated_at"`
}

// Claim is vgpu.Claim: one device held by a VM.
type Claim = vgpu.Claim

// claimOfKey is the inverse of Key (without Detail): kinds have no ':'.
func claimOfKey(k string) Claim {
	kind, id, _ := strings.Cut(k, ":")
	return Claim{Kind: ClaimKind(kind), ID: id}
}

// Held is a claim with the VM that holds it.
type Held struct {
	Claim
	VM string
}

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
	// root is the host root the ledger is under (the real root for OpenPath): its files and
	// locks are opened inside it, never through a link or a FIFO (host.Root.OpenFile).
	root   host.Root
	legacy string // the old single document (ledger.json), read and migrated
	dir    string // the ledger directory (ledger/)
	lock   string
	// WriteFile replaces one ledger file with data (default: host.ReplaceFileVia with the
	// temporary file in the ledger directory: write, fsync, rename; the ledger then fsyncs
	// the directory, except when it settles). Tests inject a failing writer (ENOSPC) to prove
	// a failed write loses nothing.
	WriteFile func(path string, data []byte, perm os.FileMode) error
	// Remove removes one ledger file (default os.Remove; Open's refuses a path outside root).
	Remove func(path string) error
	// LockTimeout is how long a transaction waits for another process's (0:
	// filelock.DefaultTimeout); the error on timeout names the holder's pid.
	LockTimeout time.Duration
	// SyncDir fsyncs a ledger directory after a rename or removal in it (nil: host.SyncDir).
	// Tests count the calls (Settle leaves some out).
	SyncDir func(dir string)
	// CrashAt, when set (crash tests only), is called at the named points between the writes
	// of a transaction or a migration ("index-written", "vm-written", "migrate-vms-written",
	// "migrate-index-written"); the crash tests exit there as kill -9 would.
	CrashAt func(point string)
}

// Open returns the ledger under root's state directory (ROOT/var/lib/vgpu-host/ledger/, and
// the old ROOT/var/lib/vgpu-host/ledger.json it migrates). Its writes refuse a path that
// symlinks in the tree lead out of root (Root.CheckInside).
func Open(root host.Root) *Ledger {
	l := OpenPath(root.StateDir("ledger.json"))
	l.root = root
	l.WriteFile = func(path string, data []byte, perm os.FileMode) error {
		if err := root.CheckInside(path); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		return host.ReplaceFileVia(l.dir, path, data, perm)
	}
	l.Remove = root.Remove
	return l
}

// OpenPath returns the ledger whose old single document is path (DIR/ledger.json): its files
// are in path without ".json" (DIR/ledger/), its lock is path with ".lock" (DIR/ledger.lock).
func OpenPath(path string) *Ledger {
	return &Ledger{legacy: path, dir: strings.TrimSuffix(path, ".json"), lock: filelock.Sibling(path)}
}

// Path returns the ledger directory (ROOT/var/lib/vgpu-host/ledger).
func (l *Ledger) Path() string { return l.dir }

// VMPath returns the file of VM name (ROOT/var/lib/vgpu-host/ledger/vms/NAME.json).
func (l *Ledger) VMPath(name string) string { return filepath.Join(l.dir, "vms", name+".json") }

// IndexPath returns the claims index (ROOT/var/lib/vgpu-host/ledger/claims.json).
func (l *Ledger) IndexPath() string { return filepath.Join(l.dir, "claims.json") }

func (l *Ledger) locked(mode filelock.Mode, fn func() error) error {
	timeout := l.LockTimeout
	if timeout == 0 {
		timeout = filelock.DefaultTimeout
	}
	lock, err := filelock.AcquireIn(l.root, l.lock, mode, timeout)
	if err != nil {
		return fmt.Errorf("ledger %s: %w", l.dir, err)
	}
	defer lock.Release()
	return fn()
}

// removeStaleTemps deletes temporary ledger files (".NAME.tmp*" in the ledger directory, and
// the old ".ledger.json.tmp*" beside it) that a writer killed between writing and renaming
// left. Only a holder of the exclusive lock writes one, so while we hold the lock (exclusive,
// or shared: no writer then) every such file is a dead process's.
func (l *Ledger) removeStaleTemps() {
	for _, pat := range []string{
		filepath.Join(l.dir, ".*.tmp*"),
		filepath.Join(filepath.Dir(l.legacy), "."+filepath.Base(l.legacy)+".tmp*"),
	} {
		stale, _ := filepath.Glob(pat)
		for _, f := range stale {
			_ = l.remove(f)
		}
	}
}

// Read returns a snapshot of the whole ledger, every VM loaded (under a shared lock): for
// commands that show every VM (status, metrics, drift). When some VM entries are damaged it
// returns the intact ones together with the error, so a read-only command can still show them;
// a writer (Update) stops.
func (l *Ledger) Read() (*Book, error) {
	var b *Book
	err := l.readLocked(func() error {
		var err error
		if b, err = l.open(); err != nil {
			if b != nil && isLegacyConflict(err) {
				return errors.Join(err, b.loadAll()) // list the directory's VMs with the error
			}
			return err // b is the intact part of a damaged old document, or nil
		}
		return b.loadAll()
	})
	return b, err
}

// View runs fn on the ledger under a shared lock, loading only the VM files fn asks for:
// a read that needs one VM or the claims (apply's look before its transaction, destroy) costs
// the same at any number of VMs. A VM file that cannot be loaded is returned as the error.
func (l *Ledger) View(fn func(*Book) error) error {
	return l.readLocked(func() error {
		_, err := l.run(fn)
		return err
	})
}

// run opens a book and runs fn on it; a VM file fn asked for that could not be loaded is the
// error, whatever fn returned.
func (l *Ledger) run(fn func(*Book) error) (*Book, error) {
	b, err := l.open()
	if err != nil {
		return nil, err
	}
	ferr := fn(b)
	if b.err != nil {
		return nil, b.err
	}
	return b, ferr
}

func (l *Ledger) readLocked(fn func() error) error {
	// The lock file is never removed: when it exists now, the shared lock below is a real
	// one, no writer holds the exclusive lock, and any temporary ledger file is a dead
	// writer's, which a reader may clear too (a destroy of a VM that a killed apply never
	// recorded reads, finds nothing and ends: it would leave the dead apply's file behind).
	_, serr := l.root.Stat(l.lock)
	return l.locked(filelock.Shared, func() error {
		if serr == nil {
			l.removeStaleTemps()
		}
		return fn()
	})
}

// Update runs fn on the ledger under an exclusive lock and writes what it changed. If fn
// returns an error, or a VM file it asked for could not be loaded, nothing is written and the
// error is returned.
func (l *Ledger) Update(fn func(*Book) error) error { return l.update(fn, false) }

// Settle is Update for a transaction that only records what has already happened, which
// nothing is done on the strength of (apply marking its last step done and the VM applied):
// when all it changes is one VM's file, the file is written and synced whole, but its
// directory is not synced after the rename. A power loss right after it may then bring back
// the previous record (the last step recorded as taken but not done), which is what a kill -9
// just before Settle leaves and what the next apply or destroy resumes from; the next synced
// write in the directory makes it durable. A transaction that changes claims or more than one
// VM goes through the index and syncs as Update does. It saves apply one of its four fsyncs.
func (l *Ledger) Settle(fn func(*Book) error) error { return l.update(fn, true) }

func (l *Ledger) update(fn func(*Book) error, settle bool) error {
	return l.locked(filelock.Exclusive, func() error {
		l.removeStaleTemps()
		if err := l.migrate(); err != nil {
			return err
		}
		b, err := l.run(fn)
		if err != nil {
			return err
		}
		return l.commit(b, settle)
	})
}

// LockVM takes an exclusive, non-blocking lock on vm for the length of an apply or destroy
// (ROOT/var/lib/vgpu-host/vms/VM.lock, flock(2)): a second apply or destroy of the same VM
// while the first runs gets host.ErrBusy instead of tearing the first one's half-applied
// steps down under it. The kernel drops the lock when the process dies (kill -9), so an
// interrupted apply never blocks the next one. Call the returned function to release it.
//
// The lock file is removed on release when the ledger has no file for vm (a VM destroyed, an
// apply that failed before recording anything, a dry run), so that one file does not stay
// for every VM name ever tried. Removing it is safe at any time, because the lock is taken
// with filelock.AcquireIn and removed with Lock.RemoveAndRelease: the file is unlinked only
// while its flock is held, and a process that had opened it before and gets its flock after
// finds it no longer linked at the path and starts over on a new file, so two processes never
// hold one VM's lock at once. A VM whose entry is only in a redo copy or in an old ledger.json
// may lose its lock file too; the next apply or destroy creates it again.
func (l *Ledger) LockVM(vm string) (unlock func(), err error) {
	if err := host.CheckComponent("VM name", vm); err != nil {
		return nil, fmt.Errorf("lock VM: %w", err)
	}
	dir := filepath.Join(filepath.Dir(l.legacy), "vms")
	if err := l.root.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("VM lock directory %s: %w", dir, err)
	}
	path := filepath.Join(dir, vm+".lock")
	lock, err := filelock.AcquireIn(l.root, path, filelock.Exclusive, 0)
	if errors.Is(err, filelock.ErrTimeout) {
		return nil, fmt.Errorf("VM %s is being applied or destroyed by another vgpu-host process: %w; wait for it to finish", vm, err)
	}
	if err != nil {
		return nil, fmt.Errorf("lock VM %s: %w", vm, err)
	}
	return func() {
		if _, err := l.root.Lstat(l.VMPath(vm)); errors.Is(err, fs.ErrNotExist) {
			_ = lock.RemoveAndRelease() // best effort: a lock file left behind is harmless
			return
		}
		lock.Release()
	}, nil
}

// remove removes one ledger file with Remove (os.Remove by default).
func (l *Ledger) remove(path string) error {
	if l.Remove != nil {
		return l.Remove(path)
	}
	return os.Remove(path)
}

// Book is the ledger as a transaction (Update), a view (View) or a snapshot (Read) sees it.
// Entries are loaded when first asked for (VM, Entry); Holder, Claim and AllClaims answer from
// the claims index.
type Book struct {
	l *Ledger // nil for a book in memory (NewBook)
	// all: every entry is in vms (a snapshot, the old format, a book in memory).
	all bool
	// vms are the entries loaded or created; a nil value is a VM known absent (or deleted).
	vms map[string]*VM
	// orig is each loaded entry's encoding as loaded (nil: it did not exist), to find what a
	// transaction changed.
	orig map[string][]byte
	// gens is the generation of each loaded VM file.
	gens map[string]uint64
	// claims maps each claim key to its holder, for every VM.
	claims map[string]string
	idx    *index // nil for a book in memory or the old format
	// listed are the VM names found on disk, once asked for (Names).
	listed []string
	err    error // the first entry that could not be loaded
}

// NewBook returns an empty book held in memory only (for tests and previews).
func NewBook() *Book {
	return &Book{all: true, vms: map[string]*VM{}, orig: map[string][]byte{}, gens: map[string]uint64{}, claims: map[string]string{}}
}

// fail records the first load error: the transaction writes nothing and returns it.
func (b *Book) fail(err error) {
	if b.err == nil {
		b.err = err
	}
}

// VM returns vm's entry, or nil when the ledger has none (or its file could not be loaded:
// the transaction then fails with that error).
func (b *Book) VM(name string) *VM {
	if e, ok := b.vms[name]; ok || b.all {
		return e
	}
	e, gen, data, err := b.l.loadVM(b.idx, name)
	if err != nil {
		b.fail(err)
		return nil
	}
	b.vms[name], b.orig[name], b.gens[name] = e, data, gen
	return e
}

// Entry returns vm's entry, creating an empty one.
func (b *Book) Entry(vm string) *VM {
	e := b.VM(vm)
	if e == nil {
		e = &VM{Name: vm, Phase: PhaseApplying}
		b.vms[vm] = e
	}
	return e
}

// Delete forgets vm, releasing its claims.
func (b *Book) Delete(vm string) {
	if b.VM(vm) == nil {
		return
	}
	b.Release(vm)
	b.vms[vm] = nil
}

// Names returns the names of the VMs in the ledger, sorted. Outside a snapshot it lists the
// ledger's directory (no VM file is read).
func (b *Book) Names() []string {
	set := map[string]bool{}
	if !b.all && b.listed == nil {
		names, err := b.l.listVMs(b.idx)
		if err != nil {
			b.fail(err)
		}
		if names == nil {
			names = []string{}
		}
		b.listed = names
	}
	for _, n := range b.listed {
		set[n] = true
	}
	for n, e := range b.vms {
		set[n] = e != nil
	}
	out := make([]string, 0, len(set))
	for n, ok := range set {
		if ok {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// Len returns the number of VMs in the ledger.
func (b *Book) Len() int { return len(b.Names()) }

// Holder returns the VM holding the claim kind:id, or "".
func (b *Book) Holder(c Claim) string { return b.claims[c.Key()] }

// ClaimHolders returns the VMs that hold a claim, from the claims index the transaction read
// already: no VM file is listed or read (Names lists the ledger's directory).
func (b *Book) ClaimHolders() map[string]bool {
	out := map[string]bool{}
	for _, vm := range b.claims {
		out[vm] = true
	}
	return out
}

// AllClaims returns every claim held (kind and id; their details are in the VM entries) with
// its holder, sorted by key.
func (b *Book) AllClaims() []Held {
	keys := make([]string, 0, len(b.claims))
	for k := range b.claims {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]Held, len(keys))
	for i, k := range keys {
		out[i] = Held{Claim: claimOfKey(k), VM: b.claims[k]}
	}
	return out
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
			b.claims[c.Key()] = vm
		}
	}
	e.UpdatedAt = time.Now().UTC()
	return nil
}

// Release drops claims from vm (all of them when none are named).
func (b *Book) Release(vm string, claims ...Claim) {
	e := b.VM(vm)
	if e == nil {
		return
	}
	drop := map[string]bool{}
	for _, c := range claims {
		drop[c.Key()] = true
	}
	kept := e.Claims[:0]
	for _, c := range e.Claims {
		if len(claims) > 0 && !drop[c.Key()] {
			kept = append(kept, c)
		} else if b.claims[c.Key()] == vm {
			delete(b.claims, c.Key())
		}
	}
	if len(kept) == 0 && len(claims) == 0 {
		kept = nil
	}
	e.Claims = kept
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
