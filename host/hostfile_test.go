package host

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Reads of the host tree are bounded in time and size, and so are the errors about what they
// read: a FIFO reads as empty at once, /dev/zero linked where a file belongs stops at
// maxHostFile with ErrTooLarge (it read until memory ran out), a page of garbage is quoted
// in 80 bytes (a 16 KB error line before).
func TestHostFileReadsBounded(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "zero")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	garbage := filepath.Join(dir, "garbage")
	os.WriteFile(garbage, []byte(strings.Repeat("\x00", 4096)), 0o644)

	start := time.Now()
	if s, err := ReadString(fifo); err != nil || s != "" {
		t.Errorf("ReadString(FIFO) = %q, %v", s, err)
	}
	if b, err := ReadHostFile(zero, 0); !errors.Is(err, ErrTooLarge) || b != nil || !strings.Contains(err.Error(), zero) {
		t.Errorf("ReadHostFile(/dev/zero) = %d bytes, %v", len(b), err)
	}
	if b, err := ReadHostFile(zero, cfgSize); err != nil || len(b) != cfgSize {
		t.Errorf("ReadHostFile(/dev/zero, %d) = %d bytes, %v", cfgSize, len(b), err)
	}
	var page [4096]byte
	if _, err := (Root{}).pathDir(dir).fileIn("zero", "", &page); !errors.Is(err, ErrTooLarge) {
		t.Errorf("fileIn(/dev/zero) = %v", err)
	}
	_, err := ReadHex(garbage)
	if err == nil || len(err.Error()) > 4*maxQuoted+100+len(garbage) || !strings.Contains(err.Error(), "… (4096 bytes)") {
		t.Errorf("ReadHex(a page of NULs): %d bytes of error: %.300v", len(err.Error()), err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %s", d)
	}
}
