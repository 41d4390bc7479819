package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// initCompiles are the calls a package-level variable must not make at start: they run in
// every binary that links the package, `vgpu-host --version` included (#19, #32: host/snapshot's
// two expressions were the largest init of vgpu-host's own, 136 allocations). sync.OnceValue
// and its kin are calls too, and allocate at every start: internal/lazy's Value and Regexp,
// or a function, compute on first use and cost the start nothing. fmt.Errorf: errors.New is
// laid out as data, fmt.Errorf runs (a type with Error and Unwrap methods wraps as data).
var initCompiles = map[string]bool{
	"regexp.MustCompile": true, "regexp.Compile": true, "regexp.MustCompilePOSIX": true, "regexp.CompilePOSIX": true,
	"template.Must": true, "template.New": true,
	"sync.OnceValue": true, "sync.OnceValues": true, "sync.OnceFunc": true, "fmt.Errorf": true,
}

// startupViolations lists the package-level variables of f whose initialiser calls one of
// initCompiles, or builds a map with entries, outside a function literal: a package-level map
// literal is built by the package's initialiser at every start (#32; a switch, or a
// lazy.Value, builds it on first use).
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
					case *ast.CompositeLit:
						if _, ok := n.Type.(*ast.MapType); ok && len(n.Elts) > 0 {
							bad = append(bad, fset.Position(n.Pos()).String()+": map literal")
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
	t.Parallel()
	root := moduleRoot(t)
	fset := token.NewFileSet()
	var bad []string
	files := 0
	// mocknvml is go-nvml's mock for tests and the -tags nvmlmock helper: no release binary
	// links it.
	skip := func(rel string) bool { return rel == filepath.Join("mig", "nvmlmig", "mocknvml") }
	parseSources(t, root, fset, skip, func(_ string, f *ast.File) {
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
		t.Errorf("computed at every start (use internal/lazy, a function or a switch): %s", b)
	}
}

// TestStartupViolationsFound: the check sees a package-level compile, sync.OnceValue,
// fmt.Errorf and map with entries, and not a compile inside a function literal or a function
// body, an empty map or errors.New.
func TestStartupViolationsFound(t *testing.T) {
	t.Parallel()
	const src = `package p
import "regexp"
var a = regexp.MustCompile("a")
var (
	b, c = 1, regexp.MustCompile("c")
	d    = map[string]*regexp.Regexp{"d": regexp.MustCompile("d")}
)
var e = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile("e") })
var f = fmt.Errorf("f: %w", err)
var g = map[string]bool{"g": true}
var h = sync.OnceFunc(func() {})
var empty = map[string]bool{}
var static = errors.New("static")
var lazy = func() *regexp.Regexp { return regexp.MustCompile("l") }
func f() { _ = regexp.MustCompile("f") }
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := startupViolations(fset, f)
	if len(got) != 8 {
		t.Fatalf("found %d violations, want 8 (a, c, d's map and its compile, e, f, g, h): %q", len(got), got)
	}
	for i, line := range []string{"p.go:3:", "p.go:5:", "p.go:6:", "p.go:6:", "p.go:8:", "p.go:9:", "p.go:10:", "p.go:11:"} {
		if !strings.HasPrefix(got[i], line) {
			t.Errorf("violation %d is %q, want one at %s", i, got[i], line)
		}
	}
}
