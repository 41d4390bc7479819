package host

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestProcessGroups(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r, _ := NewRoot(dir)
	p := filepath.Join(dir, "proc", "42")
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(p, "status"), []byte("Name:\tcat\nUid:\t1000\t1000\t1000\t1000\nGid:\t1000\t1001\t1000\t1000\nGroups:\t4 24 998 1000 \n"), 0o644)
	got, err := ProcessGroups(r, 42)
	if err != nil || !slices.Equal(got, []int{1000, 1001, 4, 24, 998}) {
		t.Fatalf("ProcessGroups = %v, %v", got, err)
	}
	if _, err := ProcessGroups(r, 43); err == nil {
		t.Error("a missing process gave no error")
	}
	// This process, on the real /proc: its own effective gid is among them.
	real, _ := NewRoot("/")
	got, err = ProcessGroups(real, os.Getpid())
	if err != nil || !slices.Contains(got, os.Getegid()) {
		t.Fatalf("own groups %v (%v) lack egid %d", got, err, os.Getegid())
	}
}
