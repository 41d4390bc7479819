package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"sort"
	"strings"
	"testing"
)

// initCompiles are the calls a package-level variable must not make at start: they run in
// every binary that links the package, `vgpu-host --version` included (#19, #32: host/snapshot's
// two expressions were the largest init of vgpu-host's own, 136 allocations). sync.OnceValue or
// a function compiles them on first use.
var initCompiles = map[string]bool{
	"regexp.MustCompile": true, "regexp.Compile": true, "regexp.MustCompilePOSIX": true, "regexp.CompilePOSIX": true,
	"template.Must": true, "template.New": true,
}

// startupViolations lists the package-level variables of f whose initialiser calls one of
// initCompiles outside a function literal.
func startupViolations(fset *token.FileSet, f *ast.File) []string {
	var bad []string
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.VAR {
			continue
		}
		for _, s := range gd.Specs {
			for _, v := range s.(*ast.ValueSpec).Values {
				ast.Inspect(v, func(n ast.Node) bool {
					switch n := n.(type) {
					case *ast.FuncLit:
						return false // runs when called, not at init
					case *ast.CallExpr:
						if name := callName(n); initCompiles[name] {
							bad = append(bad, fset.Position(n.Pos()).String()+": "+name)
						}
					}
					return true
				})
			}
		}
	}
	return bad
}

// TestNoCompileAtInit keeps regular expressions and templates out of package initialisers
// in every non-test file the binaries build from.
func TestNoCompileAtInit(t *testing.T) {
	root := moduleRoot(t)
	fset := token.NewFileSet()
	var bad []string
	files := 0
	parseSources(t, root, fset, func(string) bool { return false }, func(_ string, f *ast.File) {
		files++
		for _, v := range startupViolations(fset, f) {
			bad = append(bad, strings.TrimPrefix(v, root+"/"))
		}
	})
	if files < 100 {
		t.Fatalf("found only %d Go files under %s", files, root)
	}
	sort.Strings(bad)
	for _, b := range bad {
		t.Errorf("compiled at every start (use sync.OnceValue): %s", b)
	}
}

// TestStartupViolationsFound: the check sees a package-level compile, and not one inside a
// function literal or a function body.
func TestStartupViolationsFound(t *testing.T) {
	const src = `package p
import "regexp"
var a = regexp.MustCompile("a")
var (
	b, c = 1, regexp.MustCompile("c")
	d    = map[string]*regexp.Regexp{"d": regexp.MustCompile("d")}
)
var lazy = func() *regexp.Regexp { return regexp.MustCompile("l") }
func f() { _ = regexp.MustCompile("f") }
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := startupViolations(fset, f)
	if len(got) != 3 {
		t.Fatalf("found %d violations, want 3 (a, c, d): %q", len(got), got)
	}
	for i, line := range []string{"p.go:3:", "p.go:5:", "p.go:6:"} {
		if !strings.HasPrefix(got[i], line) {
			t.Errorf("violation %d is %q, want one at %s", i, got[i], line)
		}
	}
}
