package host

import (
	"context"
	"path/filepath"
	"strings"
)

// LoggedWrite is one host change a LogWriter saw: the attribute's path, its device (the PCI
// address or mdev UUID in the path, "" when none), the value before (what reading the
// attribute gave; "" for write-only attributes such as bind) and the value written.
type LoggedWrite struct {
	Device, Path, Old, New string
	Err                    error
}

// LogWriter passes every write to W and reports it, with the value it replaced, to Log: the
// agent's one log line per host change.
type LogWriter struct {
	W   Writer
	Log func(LoggedWrite)
	// Root is the tree the paths are under: the old value is read inside it (the zero Root is
	// this machine's).
	Root Root
}

// Write reads the attribute's value, writes through W, and reports the change.
func (l LogWriter) Write(ctx context.Context, path, value string) error {
	old, _ := l.Root.readAttr(path)
	err := l.W.Write(ctx, path, value)
	l.Log(LoggedWrite{Device: deviceIn(path), Path: path, Old: old, New: strings.TrimSpace(value), Err: err})
	return err
}

// deviceIn returns the last PCI address or mdev UUID among path's elements.
func deviceIn(path string) string {
	elems := strings.Split(filepath.Clean(path), string(filepath.Separator))
	for i := len(elems) - 1; i >= 0; i-- {
		if _, err := ParseAddress(elems[i]); err == nil || IsMdevUUID(elems[i]) {
			return elems[i]
		}
	}
	return ""
}
