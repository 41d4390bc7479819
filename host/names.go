package host

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
	"unicode"
	"unicode/utf8"
)

// MaxComponentLen is the longest path component CheckComponent accepts (NAME_MAX).
const MaxComponentLen = 255

// CheckComponent checks that s, a name that came from input (a command line, a spec, a state
// or mdevctl file: an mdev parent, a type id, a UUID, a VM, pool or volume name), is safe to
// join into a path as one element: not empty, not "." or "..", no '/', no NUL or other control
// character, valid UTF-8, not starting with '-' (an exec'd tool would take it for an option)
// and at most MaxComponentLen bytes. what names the input for the error
// ("--parent", "spec metadata.name"). Errors wrap ErrInvalid.
//
// Every name that becomes part of a path is checked here before it is joined:
// `mdev define --parent ../../..` must not write outside /etc/mdevctl.d.
func CheckComponent(what, s string) error {
	bad := func(why string) error {
		return fmt.Errorf("%s %q: %w: %s", what, s, ErrInvalid, why)
	}
	switch {
	case s == "":
		return bad("empty")
	case s == "." || s == "..":
		return bad("not a name but a directory reference")
	case len(s) > MaxComponentLen:
		return bad(fmt.Sprintf("longer than %d bytes", MaxComponentLen))
	case !utf8.ValidString(s):
		return bad("not valid UTF-8")
	case s[0] == '-':
		return bad("starts with '-'")
	}
	for _, r := range s {
		switch {
		case r == '/':
			return bad("contains '/': a name is one path element")
		case r == 0 || unicode.IsControl(r):
			return bad(fmt.Sprintf("contains the control character %U", r))
		}
	}
	return nil
}

// Size limits of the files vgpu-host reads. A file past its limit is refused with an error
// naming the limit, before it is decoded, so a hostile or runaway file cannot make a root
// process allocate without bound.
const (
	// MaxSpecSize is the largest VM spec file (YAML).
	MaxSpecSize = 1 << 20 // 1 MiB
	// MaxStateFileSize is the largest state or configuration file vgpu-host reads: its
	// ledgers, sriov.json, the vGPU state file, an mdevctl definition.
	MaxStateFileSize = 16 << 20 // 16 MiB
)

// ErrTooLarge is wrapped by ReadFileLimit when a file is past its limit.
var ErrTooLarge = errors.New("file too large")

// ReadFileLimit reads path like os.ReadFile but refuses a file larger than limit bytes, with an
// error naming the file and the limit. Errors from opening the file are returned unwrapped
// (errors.Is(err, fs.ErrNotExist) works as for os.ReadFile).
func ReadFileLimit(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := readLimit(f, path, limit)
	if errors.Is(err, syscall.EISDIR) {
		// A directory named where a file belongs (render DIR) is the caller's mistake.
		return nil, fmt.Errorf("%w, not a file: %w", err, ErrInvalid)
	}
	return b, err
}

// readLimit reads f (opened from path) to its end, refusing more than limit bytes.
func readLimit(f *os.File, path string, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		if _, ok := err.(*fs.PathError); ok {
			return nil, err // already "read PATH: ..."
		}
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(b)) > limit {
		return nil, TooLarge(path, limit)
	}
	return b, nil
}

// TooLarge is the error of reading path, or content sent under that name, larger than limit
// bytes (wraps ErrTooLarge).
func TooLarge(path string, limit int64) error {
	size := fmt.Sprintf("%d bytes", limit)
	if limit%(1<<20) == 0 {
		size = fmt.Sprintf("%d MiB", limit>>20)
	}
	return fmt.Errorf("read %s: %w: it is larger than the limit of %s for this file", path, ErrTooLarge, size)
}

// Clip shortens s to at most n runes for an error message, marking the cut with "…".
func Clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}
