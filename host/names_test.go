package host

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckComponent(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"0000:41:00.0", "mbochs", "nvidia-471", "mbochs-small", "vm_1.a", "0b6c4a8e-1e4f-4b7a-9a43-5f2f3b1e9d10", "GRID A100-4C"} {
		if err := CheckComponent("name", ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "..", "../../..", "a/b", "/etc", "a\x00b", "a\nb", "a\rb", "\x1b[31m", "-rf", "\xff", strings.Repeat("a", 256)} {
		err := CheckComponent("--parent", bad)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "--parent") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func TestReadFileLimit(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "big.json")
	if err := os.WriteFile(p, make([]byte, 2049), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFileLimit(p, 2048); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "2048 bytes") || !strings.Contains(err.Error(), p) {
		t.Errorf("over the limit: %v", err)
	}
	if b, err := ReadFileLimit(p, 2049); err != nil || len(b) != 2049 {
		t.Errorf("at the limit: %d bytes, %v", len(b), err)
	}
	if _, err := ReadFileLimit(p+".missing", 1); !os.IsNotExist(err) {
		t.Errorf("missing file: %v", err)
	}
	// A directory where a file belongs (render DIR): the caller's mistake, said once.
	dir := filepath.Dir(p)
	if _, err := ReadFileLimit(dir, 1); !errors.Is(err, ErrInvalid) || err.Error() != "read "+dir+": is a directory, not a file: invalid input" {
		t.Errorf("directory: %v", err)
	}
}
