package host

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWriteFileAtomic: the directories are made on the first write only, a write replaces the
// file whole with the asked mode, a directory at the path is refused, and no temporary file is
// left behind either way.
func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a", "b", "state.json")
	// Via a temporary directory of its own, which does not exist yet either.
	if err := WriteFileAtomicVia(filepath.Join(dir, "tmp"), filepath.Join(dir, "c", "d.json"), []byte("d\n"), 0o600); err != nil {
		t.Fatalf("write via a missing temporary directory into a missing directory: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "c", "d.json")); string(b) != "d\n" {
		t.Errorf("c/d.json holds %q", b)
	}
	if err := WriteFileAtomic(p, []byte("one\n"), 0o640); err != nil {
		t.Fatalf("first write into missing directories: %v", err)
	}
	if err := WriteFileAtomic(p, []byte("two\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "two\n" || st.Mode().Perm() != 0o644 {
		t.Errorf("file %q mode %v, want \"two\\n\" 0644", b, st.Mode().Perm())
	}
	d := filepath.Join(dir, "a", "b", "adir")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileAtomic(d, []byte("x"), 0o644); err == nil || !strings.Contains(err.Error(), d) {
		t.Errorf("write over a directory: %v, want an error naming it", err)
	}
	ents, err := os.ReadDir(filepath.Dir(p))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp") {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}
}
