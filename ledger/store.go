package ledger

// The files: VM entries, the claims index with its redo copies, the old single document.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/vgpu-host/vgpu-host/host"
)

// index is claims.json.
type index struct {
	Version    int    `json:"version"`
	Generation uint64 `json:"generation"`
	// Claims maps "kind:id" to the VM holding it.
	Claims map[string]string `json:"claims"`
	// Redo holds the entries the last transaction that wrote this file then wrote to VM
	// files (null: removed), at Generation; a VM file older than its copy here was not.
	Redo map[string]*redo `json:"redo,omitempty"`

	rebuilt bool // not read from disk (missing): the next transaction that writes writes it
	files   int  // VM files a rebuild read
}

type redo struct {
	Generation uint64 `json:"generation"`
	Entry      *VM    `json:"entry"`
}

// vmFile is ledger/vms/NAME.json: the entry with the format version and the generation of the
// transaction that wrote it.
type vmFile struct {
	Version    int    `json:"version"`
	Generation uint64 `json:"generation"`
	*VM
}

// crash calls the CrashAt hook, if any, at point.
func (l *Ledger) crash(point string) {
	if l.CrashAt != nil {
		l.CrashAt(point)
	}
}

// syncDir fsyncs dir, a ledger directory, after a rename or removal in it (SyncDir).
func (l *Ledger) syncDir(dir string) {
	if l.SyncDir != nil {
		l.SyncDir(dir)
		return
	}
	host.SyncDir(dir)
}

func (l *Ledger) vmsDir() string { return filepath.Join(l.dir, "vms") }

// damagedVM explains a VM file that cannot be read.
func (l *Ledger) damagedVM(name string, why error) error {
	return fmt.Errorf("ledger entry %s is damaged: %w; it records which devices VM %q holds, so vgpu-host stops "+
		"rather than guess: repair the JSON by hand, or, if the VM is gone (virsh list --all), move the file aside, "+
		"delete %s (it is rebuilt from the VM files) and re-apply", l.VMPath(name), why, name, l.IndexPath())
}

// damagedIndex explains a claims index that cannot be read.
func (l *Ledger) damagedIndex(why error) error {
	return fmt.Errorf("ledger index %s is damaged: %w; it is derived from the VM files in %s: delete it and the next "+
		"vgpu-host command rebuilds it", l.IndexPath(), why, l.vmsDir())
}

// corrupt explains an old single-document ledger that cannot be read. vgpu-host never starts
// from an empty ledger in its place: that would hand devices other VMs hold to the next apply.
func (l *Ledger) corrupt(why error) error {
	return fmt.Errorf("ledger %s is damaged: %w; it records which VM holds which device, so vgpu-host stops "+
		"rather than guess: repair the JSON by hand, or, if no VM vgpu-host created is left (virsh list --all), "+
		"move the file aside and re-apply", l.legacy, why)
}

// open returns a book over the ledger: the old document when it is still there (only a
// reader sees it: Update migrates it first), else a lazy book over the index.
//
// A document beside a ledger directory it did not write (legacyBeside) is not read: the book
// is the directory's, returned with the error, so Read can still list its VMs.
func (l *Ledger) open() (*Book, error) {
	b, err := l.readLegacy()
	var conflict error
	if b != nil {
		conflict = l.legacyBeside(b)
	}
	if conflict == nil && (b != nil || err != nil) {
		return b, err
	}
	b, err = l.openIndexed()
	if err != nil {
		return nil, errors.Join(conflict, err)
	}
	return b, conflict
}

// openIndexed returns a lazy book over the index and the VM files.
func (l *Ledger) openIndexed() (*Book, error) {
	idx, err := l.loadIndex()
	if err != nil {
		return nil, err
	}
	return &Book{l: l, vms: map[string]*VM{}, orig: map[string][]byte{}, gens: map[string]uint64{},
		claims: maps.Clone(idx.Claims), idx: idx}, nil
}

// loadIndex reads claims.json, or rebuilds it from the VM files when it is missing.
func (l *Ledger) loadIndex() (*index, error) {
	path := l.IndexPath()
	data, err := l.root.ReadFileLimit(path, host.MaxStateFileSize)
	if errors.Is(err, os.ErrNotExist) {
		return l.rebuildIndex()
	}
	if err != nil {
		return nil, fmt.Errorf("read ledger index: %w", err)
	}
	if len(data) == 0 {
		return nil, l.damagedIndex(errors.New("the file is empty (truncated)"))
	}
	var idx index
	if err := json.Unmarshal(data, &idx); err != nil {
		return nil, l.damagedIndex(err)
	}
	if idx.Version > FormatVersion {
		return nil, fmt.Errorf("read ledger index %s: format version %d is newer than this vgpu-host (%d): %w", path, idx.Version, FormatVersion, host.ErrUnsupported)
	}
	if idx.Claims == nil {
		return nil, l.damagedIndex(errors.New(`"claims" is missing or null, so which devices are held is unknown`))
	}
	for k, vm := range idx.Claims {
		if vm == "" || !strings.Contains(k, ":") {
			return nil, l.damagedIndex(fmt.Errorf("the claim %q -> %q is not \"kind:id\" -> VM name", k, vm))
		}
	}
	for name, r := range idx.Redo {
		if r == nil {
			return nil, l.damagedIndex(fmt.Errorf("the redo copy of VM %q is null", name))
		}
		if r.Entry != nil && r.Entry.Name != name {
			return nil, l.damagedIndex(fmt.Errorf("the redo copy of VM %q names VM %q", name, r.Entry.Name))
		}
	}
	return &idx, nil
}

// rebuildIndex derives the index from every VM file (the index is missing: a ledger that
// never had a claim, or one the operator deleted after editing VM files).
func (l *Ledger) rebuildIndex() (*index, error) {
	idx := &index{Version: FormatVersion, Claims: map[string]string{}, rebuilt: true}
	names, err := l.listVMs(idx)
	if err != nil {
		return nil, err
	}
	for _, name := range names {
		e, gen, _, err := l.loadVM(idx, name)
		if err != nil {
			return nil, fmt.Errorf("rebuild the ledger index %s: %w", l.IndexPath(), err)
		}
		idx.files++
		idx.Generation = max(idx.Generation, gen)
		if e == nil {
			continue
		}
		for _, c := range e.Claims {
			if h, dup := idx.Claims[c.Key()]; dup && h != name {
				return nil, l.damagedVM(name, fmt.Errorf("it claims %s, which VM %q (%s) claims too", c.Key(), h, l.VMPath(h)))
			}
			idx.Claims[c.Key()] = name
		}
	}
	return idx, nil
}

// readVMFile reads name's file: nil, 0 when there is none.
func (l *Ledger) readVMFile(name string) (e *VM, gen uint64, exists bool, err error) {
	path := l.VMPath(name)
	raw, err := l.root.ReadFileLimit(path, host.MaxStateFileSize)
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, false, nil
	}
	if err != nil {
		return nil, 0, false, fmt.Errorf("read ledger entry of VM %q: %w", name, err)
	}
	if len(raw) == 0 {
		return nil, 0, true, l.damagedVM(name, errors.New("the file is empty (truncated)"))
	}
	var f vmFile
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, 0, true, l.damagedVM(name, err)
	}
	if f.Version > FormatVersion {
		return nil, 0, true, fmt.Errorf("read ledger entry %s: format version %d is newer than this vgpu-host (%d): %w", path, f.Version, FormatVersion, host.ErrUnsupported)
	}
	if f.VM == nil {
		return nil, 0, true, l.damagedVM(name, errors.New("it holds no VM entry (null)"))
	}
	if f.Name == "" {
		f.Name = name
	} else if f.Name != name {
		return nil, 0, true, l.damagedVM(name, fmt.Errorf("it is the entry of VM %q, not of %q (the file's name)", f.Name, name))
	}
	return f.VM, f.Generation, true, nil
}

// loadVM returns name's entry as the ledger has it (its file, or the index's redo copy when
// the file is older), its generation and its encoding; nil when there is none.
func (l *Ledger) loadVM(idx *index, name string) (e *VM, gen uint64, enc []byte, err error) {
	if host.CheckComponent("VM name", name) != nil {
		return nil, 0, nil, nil // no file can have this name
	}
	e, gen, exists, err := l.readVMFile(name)
	if err != nil {
		return nil, 0, nil, err
	}
	if r := idx.Redo[name]; r != nil && (!exists || gen < r.Generation) {
		e, gen = nil, r.Generation
		if r.Entry != nil {
			e = new(VM)
			b, _ := json.Marshal(r.Entry)
			_ = json.Unmarshal(b, e) // a copy: the caller changes it
		}
	}
	if e == nil {
		return nil, gen, nil, nil
	}
	enc, err = json.Marshal(e)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("encode ledger entry of VM %q: %w", name, err)
	}
	return e, gen, enc, nil
}

// listVMs lists the VM names in ledger/vms (a readdir: no file is read) with the index's redo
// copies laid over them.
func (l *Ledger) listVMs(idx *index) ([]string, error) {
	ents, err := l.root.ReadDir(l.vmsDir())
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("list the ledger's VMs: %w", err)
	}
	set := map[string]bool{}
	for _, d := range ents {
		n := d.Name()
		if !d.IsDir() && strings.HasSuffix(n, ".json") && !strings.HasPrefix(n, ".") {
			set[strings.TrimSuffix(n, ".json")] = true
		}
	}
	for name, r := range idx.Redo {
		if r.Entry != nil {
			set[name] = true
		} else if set[name] {
			_, gen, _, err := l.readVMFile(name)
			if err != nil {
				return nil, err
			}
			set[name] = gen >= r.Generation // re-created after it was removed
		}
	}
	out := make([]string, 0, len(set))
	for n, ok := range set {
		if ok {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out, nil
}

// loadAll loads every VM (Read): afterwards the book is a snapshot.
func (b *Book) loadAll() error {
	if b.all {
		return b.err
	}
	for _, n := range b.Names() {
		b.VM(n)
	}
	b.all, b.listed = true, nil
	return b.err
}

// write replaces the ledger file at path with data, whole, and unless settle makes the rename
// durable (see Settle).
func (l *Ledger) write(path string, data []byte, settle bool) error {
	var err error
	if l.WriteFile != nil {
		err = l.WriteFile(path, data, 0o644)
	} else {
		err = host.ReplaceFileVia(l.dir, path, data, 0o644)
	}
	if err == nil && !settle {
		l.syncDir(filepath.Dir(path))
	}
	return err
}

func (l *Ledger) writeVM(name string, e *VM, gen uint64) error {
	return l.writeVMSettle(name, e, gen, false)
}

func (l *Ledger) writeVMSettle(name string, e *VM, gen uint64, settle bool) error {
	data, err := json.MarshalIndent(vmFile{Version: FormatVersion, Generation: gen, VM: e}, "", "  ")
	if err != nil {
		return fmt.Errorf("encode ledger entry of VM %q: %w", name, err)
	}
	if err := l.write(l.VMPath(name), append(data, '\n'), settle); err != nil {
		return fmt.Errorf("write ledger entry %s (the previous version is intact): %w", l.VMPath(name), err)
	}
	return nil
}

func (l *Ledger) removeVM(name string) error {
	if err := l.remove(l.VMPath(name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove ledger entry %s: %w", l.VMPath(name), err)
	}
	l.syncDir(l.vmsDir())
	return nil
}

func (l *Ledger) writeIndex(idx *index) error {
	data, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return fmt.Errorf("encode ledger index: %w", err)
	}
	if err := l.write(l.IndexPath(), append(data, '\n'), false); err != nil {
		return fmt.Errorf("write ledger index %s (the previous version is intact): %w", l.IndexPath(), err)
	}
	return nil
}

// replay writes out the redo copies of idx that their VM files lack (the writer died after
// its commit point), before a new index drops them.
func (l *Ledger) replay(idx *index) error {
	for _, name := range sortedKeys(idx.Redo) {
		r := idx.Redo[name]
		_, gen, exists, err := l.readVMFile(name)
		if err != nil {
			return err
		}
		switch {
		case exists && gen >= r.Generation:
		case r.Entry != nil:
			if err := l.writeVM(name, r.Entry, r.Generation); err != nil {
				return err
			}
		case exists:
			if err := l.removeVM(name); err != nil {
				return err
			}
		}
	}
	return nil
}

// claimsAfter derives the index's claims after a transaction: the claims of the VMs it did
// not load, as they were, and those of the VMs it loaded, as they are now. A device claimed
// twice is refused (a caller that changed VM.Claims by hand).
func (b *Book) claimsAfter() (map[string]string, error) {
	out := make(map[string]string, len(b.idx.Claims))
	for k, vm := range b.idx.Claims {
		if _, loaded := b.vms[vm]; !loaded {
			out[k] = vm
		}
	}
	for _, name := range sortedKeys(b.vms) {
		e := b.vms[name]
		if e == nil {
			continue
		}
		for _, c := range e.Claims {
			if h, dup := out[c.Key()]; dup && h != name {
				return nil, fmt.Errorf("%s %s is allocated to VM %q (ledger): %w", c.Kind, c.ID, h, host.ErrBusy)
			}
			out[c.Key()] = name
		}
	}
	return out, nil
}

// redoLimit is the number of redo copies past which a transaction rewrites the index once
// more without them after writing the VM files (one that wrote many VMs at once), so the
// index does not keep their bulk until the next transaction that writes it.
const redoLimit = 16

// commit writes what the transaction changed: one VM file alone when that is all, else the
// index with redo copies (the commit point), then the VM files. settle (Settle) leaves the
// directory unsynced after the rename when one VM file is all it writes.
func (l *Ledger) commit(b *Book, settle bool) error {
	var changed []string
	for _, name := range sortedKeys(b.vms) {
		var enc []byte
		if e := b.vms[name]; e != nil {
			if err := host.CheckComponent("VM name", name); err != nil {
				return fmt.Errorf("ledger: %w", err)
			}
			if e.Name != name {
				return fmt.Errorf("ledger: the entry of VM %q is named %q: %w", name, e.Name, host.ErrInvalid)
			}
			var err error
			if enc, err = json.Marshal(e); err != nil {
				return fmt.Errorf("encode ledger entry of VM %q: %w", name, err)
			}
		}
		if !bytes.Equal(enc, b.orig[name]) {
			changed = append(changed, name)
		}
	}
	claims, err := b.claimsAfter()
	if err != nil {
		return err
	}
	idx := b.idx
	claimsChanged := !maps.Equal(claims, idx.Claims)
	writeIndex := idx.rebuilt && (len(changed) > 0 || idx.files > 0)
	switch {
	case len(changed) == 0 && !claimsChanged && !writeIndex:
		return nil
	case len(changed) == 1 && !claimsChanged && !writeIndex:
		name := changed[0]
		if e := b.vms[name]; e != nil {
			return l.writeVMSettle(name, e, max(idx.Generation, b.gens[name])+1, settle)
		}
		if idx.Redo[name] == nil {
			return l.removeVM(name)
		}
		// A redo copy would bring the file back: the removal goes through the index.
	}
	if err := l.replay(idx); err != nil {
		return err
	}
	gen := idx.Generation
	for _, name := range changed {
		gen = max(gen, b.gens[name])
	}
	gen++
	next := &index{Version: FormatVersion, Generation: gen, Claims: claims, Redo: map[string]*redo{}}
	for _, name := range changed {
		next.Redo[name] = &redo{Generation: gen, Entry: b.vms[name]}
	}
	if err := l.writeIndex(next); err != nil {
		return err
	}
	// Committed: a failure from here on leaves the redo copies, which every reader takes and
	// the next transaction that writes the index writes out.
	l.crash("index-written")
	for i, name := range changed {
		if i > 0 {
			l.crash("vm-written")
		}
		if e := b.vms[name]; e != nil {
			if err := l.writeVM(name, e, gen); err != nil {
				return nil
			}
		} else if err := l.removeVM(name); err != nil {
			return nil
		}
	}
	if len(changed) > redoLimit {
		next.Redo = nil
		_ = l.writeIndex(next) // best effort: the copies are only redundant now
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// readLegacy reads the old single document (ledger.json) as a snapshot; nil, nil when there
// is none. A document whose VM entries are partly null returns the intact entries with the
// error.
func (l *Ledger) readLegacy() (*Book, error) {
	data, err := l.root.ReadFileLimit(l.legacy, host.MaxStateFileSize)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read ledger: %w", err)
	}
	if len(data) == 0 {
		return nil, l.corrupt(errors.New("the file is empty (truncated)"))
	}
	var doc struct {
		Version int            `json:"version"`
		VMs     map[string]*VM `json:"vms"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, l.corrupt(err)
	}
	if doc.Version > 1 {
		return nil, fmt.Errorf("read ledger %s: format version %d is not the old single document (1): %w", l.legacy, doc.Version, host.ErrUnsupported)
	}
	b := NewBook()
	b.l = l
	var empty []string
	for _, name := range sortedKeys(doc.VMs) {
		e := doc.VMs[name]
		if e == nil {
			empty = append(empty, strconv.Quote(name))
			continue
		}
		e.Name = name // the key is the name (an old document could say otherwise in "name")
		b.vms[name] = e
		for _, c := range e.Claims {
			if b.claims[c.Key()] == "" {
				b.claims[c.Key()] = name
			}
		}
	}
	if len(empty) > 0 {
		return b, l.corrupt(fmt.Errorf("the entry of VM %s is null, so its devices are unknown", strings.Join(empty, ", ")))
	}
	return b, nil
}

// migrate turns the old single document into the VM files and the index (under the exclusive
// lock): every VM file is written, then the index, then ledger.json is renamed to
// ledger.json.v1, the commit point. Killed before that rename, it is redone from ledger.json.
// A document beside a ledger directory that holds anything else (legacyBeside) is never
// migrated: that would drop the entries of VMs that may still run.
func (l *Ledger) migrate() error {
	old, err := l.readLegacy()
	if err != nil || old == nil {
		return err
	}
	if err := l.legacyBeside(old); err != nil {
		return err
	}
	names := sortedKeys(old.vms)
	idx := &index{Version: FormatVersion, Generation: 1, Claims: map[string]string{}}
	for _, name := range names {
		if err := host.CheckComponent("VM name", name); err != nil {
			return l.corrupt(fmt.Errorf("it cannot be moved to one file per VM: %w", err))
		}
		for _, c := range old.vms[name].Claims {
			if h, dup := idx.Claims[c.Key()]; dup && h != name {
				return l.corrupt(fmt.Errorf("VMs %q and %q both claim %s", h, name, c.Key()))
			}
			idx.Claims[c.Key()] = name
		}
	}
	for _, name := range names {
		if err := l.writeVM(name, old.vms[name], 1); err != nil {
			return fmt.Errorf("migrate ledger %s: %w", l.legacy, err)
		}
	}
	l.crash("migrate-vms-written")
	if err := l.writeIndex(idx); err != nil {
		return fmt.Errorf("migrate ledger %s: %w", l.legacy, err)
	}
	l.crash("migrate-index-written")
	if err := os.Rename(l.legacy, l.legacy+".v1"); err != nil {
		return fmt.Errorf("migrate ledger %s: keep it as the backup %s.v1: %w", l.legacy, l.legacy, err)
	}
	l.syncDir(filepath.Dir(l.legacy))
	return nil
}
