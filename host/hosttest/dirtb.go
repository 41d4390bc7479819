package hosttest

import (
	"fmt"
	"os"
	"testing"
)

// dirTB is the testing.TB a program (not a test) builds a tree with: its TempDir is the
// program's output directory, and a fatal error ends the program with status 1.
type dirTB struct {
	testing.TB
	prog, dir string
}

// ProgramTB returns a testing.TB for New outside a test: the tree is built in dir, and a
// failure prints "PROG: …" on stderr and exits 1 (cmd/gen-fakehost, test/k8s/fakehost).
func ProgramTB(prog, dir string) testing.TB { return dirTB{prog: prog, dir: dir} }

func (d dirTB) Helper()         {}
func (d dirTB) TempDir() string { return d.dir }
func (d dirTB) Cleanup(func())  {}
func (d dirTB) Fatal(a ...any) {
	fmt.Fprintln(os.Stderr, append([]any{d.prog + ":"}, a...)...)
	os.Exit(1)
}
func (d dirTB) Fatalf(f string, a ...any) {
	fmt.Fprintf(os.Stderr, d.prog+": "+f+"\n", a...)
	os.Exit(1)
}
func (d dirTB) Errorf(f string, a ...any) { d.Fatalf(f, a...) }
func (d dirTB) Logf(f string, a ...any)   { fmt.Fprintf(os.Stderr, f+"\n", a...) }
