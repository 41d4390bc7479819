package host

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// readAttr takes short paths from a stack buffer and long ones from the heap; both must read
// the file, and a missing file must satisfy fs.ErrNotExist and name the path.
func TestReadAttrPaths(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	long := filepath.Join(dir, strings.Repeat("d", 200), strings.Repeat("e", 200))
	if err := os.MkdirAll(long, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{dir, long} {
		p := filepath.Join(d, "class")
		if err := os.WriteFile(p, []byte("0x030000\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if v, err := readHexAttr(p); err != nil || v != 0x030000 {
			t.Errorf("readHexAttr(%d-byte path) = %x, %v", len(p), v, err)
		}
		dd := Root{}.devDir(filepath.Dir(d))
		if v, err := dd.hex(filepath.Base(d) + "/class"); err != nil || v != 0x030000 {
			t.Errorf("devDir.hex(%s/class) = %x, %v", filepath.Base(d)[:10], v, err)
		}
		dd.close()
		missing := filepath.Join(d, "missing")
		if _, err := readAttr(missing); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) {
			t.Errorf("readAttr(missing) = %v, want ErrNotExist naming %s", err, missing)
		}
	}
}
