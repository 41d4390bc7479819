package ledger

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
)

// legacyConflict is an old single document (ledger.json) found beside a ledger directory that
// holds entries a migration from it did not write: a stray copy (restored from a backup,
// copied from another host, left by an older vgpu-host run by hand). Migrating it would
// replace the live entries with the document's; reading it instead would hide them.
type legacyConflict struct {
	l   *Ledger
	why string
}

func (e *legacyConflict) Error() string {
	return fmt.Sprintf("ledger %s (the old single-file format) is beside the ledger %s, which it did not write (%s): "+
		"vgpu-host will neither migrate it over the entries there nor read it in their place; check that no VM in %s "+
		"still runs (virsh list --all) or that the ledger directory records it, then remove %s or move it aside (to %s.v1)",
		e.l.legacy, e.l.dir, e.why, e.l.legacy, e.l.legacy, e.l.legacy)
}

// legacyBeside says whether the ledger directory beside the old document old holds anything
// the migration from old would not have written, as a *legacyConflict. A migration killed
// before its commit point (the rename of ledger.json) leaves only VM files equal to the
// document's entries at generation 1 and at most the index it computes, and no transaction
// runs until the migration is redone: anything else was written by a transaction on the
// ledger directory, so the document is a stray.
func (l *Ledger) legacyBeside(old *Book) error {
	names, err := l.listVMs(&index{})
	if err != nil {
		return err
	}
	for _, name := range names {
		e, gen, _, err := l.readVMFile(name)
		switch {
		case err != nil:
			return &legacyConflict{l, fmt.Sprintf("the entry of VM %q there cannot be read: %v", name, err)}
		case old.vms[name] == nil:
			return &legacyConflict{l, fmt.Sprintf("it has VM %q, which %s does not", name, l.legacy)}
		case gen != 1 || !sameEntry(e, old.vms[name]):
			return &legacyConflict{l, fmt.Sprintf("its entry of VM %q (%s) has changed since", name, l.VMPath(name))}
		}
	}
	idx, err := l.loadIndex()
	if err != nil {
		return &legacyConflict{l, fmt.Sprintf("its index cannot be read: %v", err)}
	}
	if !idx.rebuilt && (idx.Generation != 1 || len(idx.Redo) > 0 || !maps.Equal(idx.Claims, old.claims)) {
		return &legacyConflict{l, fmt.Sprintf("its index %s has changed since", l.IndexPath())}
	}
	return nil
}

// sameEntry says whether two entries encode alike (the VM file a migration writes holds the
// document's entry as it is).
func sameEntry(a, b *VM) bool {
	ja, erra := json.Marshal(a)
	jb, errb := json.Marshal(b)
	return erra == nil && errb == nil && string(ja) == string(jb)
}

// isLegacyConflict says whether err is legacyBeside's.
func isLegacyConflict(err error) bool {
	var c *legacyConflict
	return errors.As(err, &c)
}
