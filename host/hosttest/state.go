package hosttest

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// State maps every path under dir to its content, its link target ("link:TARGET") or "dir":
// compare two States to prove an operation changed nothing on a fake host.
func State(tb testing.TB, dir string) map[string]string {
	tb.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			out[rel] = "link:" + l
		case d.IsDir():
			out[rel] = "dir"
		default:
			b, _ := os.ReadFile(p)
			out[rel] = string(b)
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return out
}
